"""A run stopped by SIGTERM or Ctrl-C: the signal cancels it once, named, and the handlers are taken down."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest

from pipeline.run.stopping import Stopped, until_stopped


async def waits(seen: list[str]) -> None:
    try:
        await asyncio.sleep(30)
    except asyncio.CancelledError as exc:
        seen.append(str(exc.args[0]) if exc.args else "")
        raise


def test_the_first_signal_cancels_the_run_naming_it_and_a_second_is_ignored() -> None:
    seen: list[str] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        loop.call_later(0.05, os.kill, os.getpid(), signal.SIGTERM)
        loop.call_later(0.06, os.kill, os.getpid(), signal.SIGINT)
        await until_stopped(waits(seen))

    with pytest.raises(Stopped) as stopped:
        asyncio.run(main())
    assert seen == ["SIGTERM"]  # what the turn in flight is told: a failed row names it
    assert (stopped.value.signum, stopped.value.exit_code, str(stopped.value)) == (15, 143, "stopped by SIGTERM")
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL  # the handler is gone with the run


def test_a_cancellation_that_is_no_signal_stays_a_cancellation() -> None:
    async def main() -> None:
        task = asyncio.ensure_future(until_stopped(waits([])))
        await asyncio.sleep(0.01)
        task.cancel()
        await task

    with pytest.raises(asyncio.CancelledError):
        asyncio.run(main())


def test_a_run_that_ends_returns_its_result() -> None:
    async def answer() -> int:
        return 42

    assert asyncio.run(until_stopped(answer())) == 42
