"""Trace files read by a forked process per core: shares, the pool, the answers' hand-back, and the
check that reading apart gave what one process would.

A fleet's hundred thousand turns are about a gigabyte of trace lines, and decoding them, grouping
their spans into turns and computing the rows is Python work that one core does in most of a
minute. So the files are cut, at line ends and in file order, into shares (rounds of one per
core, each round's smaller than the last: ``share_weights``), each read by the next free one of
a forked reader per core (``read_apart``); each reader's answer comes back through a file
(``_read_to_file``).

That is only the same as reading everything in one process when no turn's spans are divided
between two shares: each share reports the span ids it read, its turn span ids and the parents
it could not find, and where a parent is a turn of another share (a device's turn in one file and
its server's in another, or a turn cut across a share's edge), or one span id is in two shares,
``read_apart`` gives nothing and the caller reads everything in one process (``read.read_traces``).

``Aside`` is other work done in a forked child meanwhile (the report's run checks and its slowest
sections), its answer pickled back through a file the same way.

Forking is only safe while this process runs one thread (a lock another thread holds would be
copied held), and only where the platform forks at all (``can_fork``). A forked reader starts
with its parent's memory: what it reads with need not be pickled to reach it.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import tempfile
import threading
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from itertools import accumulate, repeat
from pathlib import Path
from typing import Generic, NamedTuple, TypeVar

import numpy as np

from pipeline.analysis.facts import Making, TurnFacts

# Below this much to read, forking and handing results back costs more than a second core saves.
PARALLEL_BYTES = 32 << 20
MOST_WORKERS = 8
# Rounds of shares, each a share per worker (``share_weights``): a share's answer is pickled, sent and
# unpickled (in this process's result thread) while the workers read the next shares.
ROUNDS = 5
_CUT_SEARCH = 1 << 16  # how far ahead a cut looks for a line end at a time
_FORK = "fork"


class Piece(NamedTuple):
    """Bytes ``start`` to ``end`` (None: to the end) of a trace file: whole lines, in order."""

    path: str
    start: int
    end: int | None


class ShareResult(NamedTuple):
    """A share's answer: its turns' facts, and what ``read_apart`` needs to know it was independent."""

    facts: list[TurnFacts]
    joined: int  # server turns joined to their device's turns, left out
    read_problems: list[tuple[int, int, str]]  # (piece, line number within the piece (0: none), text)
    group_problems: list[str]
    lines: list[int]  # lines read from each piece
    span_hashes: np.ndarray  # ``span_hashes`` of every span id read (first copies): a span id in two shares
    turn_ids: frozenset[str]
    dangling: frozenset[str]  # parent ids of spans whose parent this share did not read


R = TypeVar("R")

Reader = Callable[[Sequence[Piece], Making], ShareResult]  # one share read, making what ``facts_of`` makes


def can_fork() -> bool:
    return _FORK in multiprocessing.get_all_start_methods() and threading.active_count() == 1


def cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def workers_for(files: Sequence[Path]) -> int:
    """Readers for ``files`` by default: one per core (at most ``MOST_WORKERS``) for a large read where
    forking is safe, else this process alone."""
    big = sum(_size(f) for f in files) >= PARALLEL_BYTES
    return min(cores(), MOST_WORKERS) if big and can_fork() else 1


def share_weights(workers: int) -> list[float]:
    """Shares' sizes, relative, in the order they are handed out: ``workers`` alike in each of ``ROUNDS``
    rounds, each round's half the size of the one before. Each reader takes the next share when it is
    done with its last, so the readers finish near together however their speeds differ (on this
    shared VM two alike processes do not read alike), and only a small share's answer is left to
    hand back after the readers are done."""
    return [0.5**r for r in range(ROUNDS) for _ in range(workers)]


def cut(files: Sequence[Path], weights: Sequence[float]) -> list[list[Piece]]:
    """The files as runs of whole lines in file order, sized about as ``weights`` (one a run)."""
    sizes = [_size(f) for f in files]
    total = sum(sizes)
    scale = total / sum(weights)
    edges = list(accumulate(weight * scale for weight in weights))  # where each run ends
    out: list[list[Piece]] = [[]]
    done = 0  # bytes before the current file
    for path, size in zip(files, sizes, strict=True):
        start = 0
        while len(out) < len(weights) and done + size > edges[len(out) - 1] and size > 0:
            at = _line_end(path, max(start, int(edges[len(out) - 1] - done)))
            if at is None or at >= size:
                break
            if at > start:
                out[-1].append(Piece(str(path), start, at))
            out.append([])
            start = at
        out[-1].append(Piece(str(path), start, None))
        done += size
    return [share for share in out if share]


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0  # read as a whole, where its error is reported


def _line_end(path: Path, at: int) -> int | None:
    """The offset just after the first line end at or after ``at``."""
    try:
        with path.open("rb") as fh:
            fh.seek(at)
            offset = at
            while block := fh.read(_CUT_SEARCH):
                found = block.find(b"\n")
                if found >= 0:
                    return offset + found + 1
                offset += len(block)
    except OSError:
        return None
    return None


def read_apart(
    shares: Sequence[Sequence[Piece]],
    readers: int,
    reader: Reader,
    making: Making,
    meanwhile: Callable[[], object],
) -> list[ShareResult] | None:
    """Each share read by ``reader`` in one of ``readers`` forked processes, the answers in the shares'
    order; ``meanwhile`` called once while they read. None where a reader was killed (out of memory,
    say) or a turn's spans were divided between shares: the caller reads it all in one process."""
    # every share in a reader, this process only waiting: holding none of the spans itself, it
    # starts the report with a small heap (tried: reading a share here, its report was slower)
    try:
        with (
            tempfile.TemporaryDirectory(prefix="report-shares-", dir=spill_root()) as folder,
            ProcessPoolExecutor(readers, mp_context=multiprocessing.get_context(_FORK)) as pool,
        ):
            spilled = pool.map(_read_to_file, repeat(reader), shares, repeat(making), repeat(folder))
            meanwhile()
            results = [_unspilled(path) for path in spilled]  # each as soon as it is there, in order
    except BrokenProcessPool:
        return None
    return results if _independent(results) else None


def _read_to_file(reader: Reader, pieces: Sequence[Piece], making: Making, folder: str) -> str:
    """``reader`` in a forked process, its answer pickled to a file in ``folder``: the file's name.

    Handed back through the pool's pipe, a share's answer (megabytes) kept its reader waiting until
    this process had received and unpickled the other reader's: reading ``scripts/bench_report.py``'s
    100,000 turns, a reader took 0.27 to 0.44 s from its first share's end to its second's start
    (each share's start and end logged by a wrapper around the reader), 0.18 to 0.23 s written to
    a file (mostly the pickling). Written to a file, the reader goes on at once; only a name crosses
    the pipe."""
    result = reader(pieces, making)
    with tempfile.NamedTemporaryFile(dir=folder, suffix=".pickle", delete=False) as fh:
        pickle.dump(result, fh, protocol=pickle.HIGHEST_PROTOCOL)
    return fh.name


def _unspilled(path: str) -> ShareResult:
    with open(path, "rb") as fh:
        result: ShareResult = pickle.load(fh)  # written by our own reader, in a folder only this user can read
    os.unlink(path)  # its memory back now, not when the folder goes
    return result


def spill_root() -> str | None:
    """Memory-backed /dev/shm where there is one (nothing written back to disk), else the default."""
    return _SHM if os.path.isdir(_SHM) and os.access(_SHM, os.W_OK) else None


_SHM = "/dev/shm"


def span_hashes(span_ids: Iterable[str], count: int) -> np.ndarray:
    """``hash`` of each span id, for ``_independent`` to find an id read by two shares.

    The hashes are computed in different processes and compared in this one. That is sound only
    because the readers are forked (``read_apart``'s pool uses the fork start method): a forked
    child inherits its parent's string-hash seed, so one id hashes alike in every reader. Spawned
    readers would each draw their own seed (unless PYTHONHASHSEED is set), and an id in two shares
    would go unnoticed; with another start method, hand back the ids themselves (or a stable
    digest) instead."""
    return np.fromiter(map(hash, span_ids), dtype=np.int64, count=count)


def _independent(results: Sequence[ShareResult]) -> bool:
    """No turn's spans divided between shares: what each share made of its turns is what one process would."""
    hashes = np.sort(np.concatenate([r.span_hashes for r in results]))
    if bool((hashes[1:] == hashes[:-1]).any()):  # a span id in two shares (or, rarely, two ids' hashes alike)
        return False
    for i, r in enumerate(results):
        others = (o.turn_ids for j, o in enumerate(results) if j != i)
        if any(not r.dangling.isdisjoint(ids) for ids in others):
            return False
    return True


class Aside(Generic[R]):
    """``work`` computing in a forked child from now, where forking is safe and ``fork``; ``result`` waits
    for its answer (pickled back through a file). Without a child, or where it failed (killed, or
    ``work`` raised), ``result`` does the work in this process: the same answer, only later, and
    ``work``'s own error where it has one. ``work`` must change nothing its caller reads afterwards:
    what it changes in the child is lost."""

    def __init__(self, work: Callable[[], R], fork: bool = True) -> None:
        self.work = work
        self.pid = 0
        self.done: tuple[R] | None = None
        if not (fork and can_fork()):
            return
        fd, self.path = tempfile.mkstemp(prefix="report-aside-", suffix=".pickle", dir=spill_root())
        os.close(fd)
        self.pid = os.fork()
        if self.pid == 0:  # the child: its answer to the file, then gone without the interpreter's teardown
            status = 1
            try:
                with open(self.path, "wb") as fh:
                    pickle.dump(work(), fh, protocol=pickle.HIGHEST_PROTOCOL)
                status = 0
            finally:
                os._exit(status)

    def result(self) -> R:
        if self.done is None:
            self.done = self._answer()
        return self.done[0] if self.done is not None else self.work()

    def _answer(self) -> tuple[R] | None:
        if not self.pid:
            return None
        _, status = os.waitpid(self.pid, 0)
        self.pid = 0
        try:
            if os.waitstatus_to_exitcode(status) == 0:
                with open(self.path, "rb") as fh:
                    return (pickle.load(fh),)  # written by our own child, in a folder only this user can read
            return None
        finally:
            os.unlink(self.path)

    def close(self) -> None:
        """The child waited for (and its answer file removed), whether or not its answer was asked for."""
        if self.pid:
            self.done = self._answer()
