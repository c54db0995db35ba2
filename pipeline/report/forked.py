"""Work handed to forked processes, so a large report uses every core of the machine.

A forked child starts with the parent's memory: a hundred thousand rows need not be pickled to
reach it, only its answer comes back. Forking is only safe while this process runs one thread
(a lock another thread holds would be copied held), and only where the platform forks at all;
``can_fork`` says so, and callers do the work in this process otherwise.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from typing import Any, TypeVar

R = TypeVar("R")

_FORK = "fork"
_pending: Callable[[], Any] | None = None  # what the next forked child is to run


def can_fork() -> bool:
    return _FORK in multiprocessing.get_all_start_methods() and threading.active_count() == 1


def cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def pool(workers: int) -> ProcessPoolExecutor:
    return ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context(_FORK))


def _run_pending() -> Any:
    assert _pending is not None, "a forked child runs what its parent set before forking"
    return _pending()


def start_forked(work: Callable[[], R]) -> tuple[Future[R], ProcessPoolExecutor]:
    """``work`` started in a forked child now; the caller collects the future and shuts the pool down.

    ``work`` itself is not pickled (a closure over the report's data is fine): the child finds it in
    the memory it was forked with. Only its result is pickled back."""
    global _pending
    workers = pool(1)
    _pending = work
    try:
        future: Future[R] = workers.submit(_run_pending)  # the child is forked here, with _pending set
    finally:
        _pending = None
    return future, workers


@contextmanager
def apart(work: Callable[[], R], fork: bool) -> Iterator[Callable[[], R]]:
    """``work`` started in a forked child now, when ``fork`` and forking is safe; the call given back
    waits for its result. Without a child, or where the child was killed (out of memory, say), the
    call does the work in this process: the answer is the same, only later."""
    if not (fork and can_fork()):
        yield work
        return
    future, workers = start_forked(work)

    def result() -> R:
        try:
            return future.result()
        except BrokenProcessPool:
            return work()

    try:
        yield result
    finally:
        workers.shutdown()
