"""A device that lost its connection opening it again, on the firmware's backoff (``device_settings.Backoff``).

The emulator opens it again when the next question wakes it, as the firmware's wake does, not in the
background while idle: a question waits for each try in turn (the first at once, the rest after the
backoff's delays, each counted from the failure before it, as the firmware sleeps after a failed try).
What happened is a ``Reconnection`` on the question's turn: when the connection was lost, when the
question began to try, each try that failed and why, and when the server answered the hello again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from pipeline.clock import Clock
from pipeline.tracing.timeline import Reconnection
from pipeline.transport.device.device_settings import Backoff
from pipeline.transport.device.link import DeviceError

Opener = Callable[[], Awaitable[int]]  # opens the connection; when the server answered the hello


async def reopen(open_again: Opener, backoff: Backoff, clock: Clock, lost_ns: int) -> Reconnection:
    """Try ``open_again`` (which returns when the server answered the hello) on ``backoff``'s schedule until it
    succeeds or the tries run out; what happened."""
    back = Reconnection(lost_ns=lost_ns, woke_ns=clock.now_ns())
    for delay in backoff.delays_s():
        if delay:
            await asyncio.sleep(delay)
        try:
            back.answered_ns = await open_again()
        except DeviceError as exc:
            back.failed.append((clock.now_ns(), str(exc)))
            continue
        return back
    return back


def gave_up(back: Reconnection) -> str:
    """Why a question was not asked: its tries, how long they took, what the last one was told."""
    waited_s = (back.failed[-1][0] - back.woke_ns) / 1e9 if back.failed else 0.0
    last = back.failed[-1][1] if back.failed else "no try was made"
    return f"the server did not answer again: {len(back.failed)} tries in {waited_s:g} s; the last: {last}"
