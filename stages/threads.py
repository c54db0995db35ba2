"""Work a stage hands to a native engine's own thread, finished even when the turn is cancelled.

A timed-out turn is cancelled, but a decode or a synthesis already running on an engine's
thread cannot be: left alone it would still hold the thread when the next turn asks for it,
and that turn's stage time would include the leftover. So the awaiting stage waits for it
before giving up, and the turn's cancellation (and the time it took) covers it instead.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import Executor
from typing import TypeVar

T = TypeVar("T")


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
