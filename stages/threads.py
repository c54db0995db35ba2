"""Work a stage hands to a native engine's own thread, finished even when the turn is cancelled.

A timed-out turn is cancelled, but a decode or a synthesis already running on an engine's
thread cannot be: left alone it would still hold the thread when the next turn asks for it,
and that turn's stage time would include the leftover. So the awaiting stage waits for it
before giving up, and the turn's cancellation (and the time it took) covers it instead.
``from_thread`` does the same for an engine that produces a stream (tokens, audio chunks).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Iterable
from concurrent.futures import Executor
from typing import TypeVar

T = TypeVar("T")


class _End:
    """What the thread sends after the last item."""


async def on_thread(executor: Executor, fn: Callable[..., T], *args: object) -> T:
    """``fn(*args)`` on ``executor``; if cancelled meanwhile, returns only after ``fn`` has finished."""
    future = asyncio.get_running_loop().run_in_executor(executor, fn, *args)
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        await finished(future)
        raise


async def finished(future: asyncio.Future[T]) -> None:
    """Wait until ``future`` is done, through any number of cancellations: a turn is cancelled from
    several sides at once, and each must wait for the thread all the same."""
    while not future.done():
        try:
            await asyncio.wait([future])
        except asyncio.CancelledError:
            continue


@contextlib.asynccontextmanager
async def from_thread(
    executor: Executor | None, produce: Callable[[], Iterable[T]], stop: Callable[[], object] = lambda: None
) -> AsyncIterator[AsyncIterator[T]]:
    """The items ``produce()`` yields on ``executor``'s thread (``None``: the loop's default pool), each handed
    to the event loop the moment it exists; an exception there is raised here, with its own class.

    On leaving the block, finished or not, ``stop()`` tells the producer to end (set its cancel flag, kill
    its child) and the block returns only once the thread is done with it, as ``on_thread`` does.
    """
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[T | BaseException | _End] = asyncio.Queue()

    def work() -> None:
        try:
            for item in produce():
                loop.call_soon_threadsafe(queue.put_nowait, item)
            loop.call_soon_threadsafe(queue.put_nowait, _End())
        except BaseException as exc:  # handed to the event loop
            loop.call_soon_threadsafe(queue.put_nowait, exc)

    async def items() -> AsyncIterator[T]:
        while not isinstance(item := await queue.get(), _End):
            if isinstance(item, BaseException):
                raise item
            yield item

    worker = loop.run_in_executor(executor, work)
    try:
        yield items()
    finally:
        stop()
        await finished(worker)
