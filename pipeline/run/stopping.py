"""A run its operator stops (SIGTERM, or Ctrl-C): the turns in flight become failed rows, none is lost.

``until_stopped`` runs a run's coroutine with SIGTERM and SIGINT handled on its event loop: the first
signal cancels the run, naming the signal; each device's turn in flight ends as a failed row
(``session.STOPPED``) carrying the name, written before the run unwinds, and ``Stopped`` tells the entry
point which signal it was. Without the handler SIGTERM ends the process at once and loses every turn
in flight; Ctrl-C cancels the run as asyncio's runner does, with the same rows written.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")
SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Stopped(Exception):
    """The run was stopped by a signal; its finished turns and those in flight are written."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(f"stopped by {signal.Signals(signum).name}")

    @property
    def exit_code(self) -> int:
        """What a shell reports for a process the signal ended (128 + its number)."""
        return 128 + self.signum


async def until_stopped(run: Coroutine[Any, Any, T]) -> T:
    """``run``, cancelled by the first SIGTERM or SIGINT (raised as ``Stopped``); a second is ignored."""
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    heard: list[int] = []

    def stop(signum: int) -> None:
        if not heard and task is not None:
            heard.append(signum)
            task.cancel(msg=signal.Signals(signum).name)

    installed = []
    for signum in SIGNALS:
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):  # not the main thread
            loop.add_signal_handler(signum, stop, signum)
            installed.append(signum)
    try:
        return await run
    except asyncio.CancelledError:
        if not heard:
            raise
        raise Stopped(heard[0]) from None
    finally:
        for signum in installed:
            loop.remove_signal_handler(signum)
