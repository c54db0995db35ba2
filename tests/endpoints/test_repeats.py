"""A repeated failure said once, then as a count (``pipeline.endpoints.repeats``): the event loop's own errors
(descriptors out: "socket.accept() out of system resource" each second per listener) and a door's refusals."""

from __future__ import annotations

import asyncio
import errno
from typing import Any

from pipeline.clock import VirtualClock, run_on_clock
from pipeline.endpoints.repeats import Repeats, say_loop_errors_once


def test_each_kind_is_said_once_then_its_count_at_most_once_a_period() -> None:
    said: list[str] = []
    now = [0.0]
    repeats = Repeats(said.append, every_s=60.0, now=lambda: now[0])
    for second in range(150):  # one a second of one kind, and one of another
        now[0] = float(second)
        repeats.say("full", "the door is full")
    repeats.say("host", "Host evil.example refused")
    repeats.flush()
    assert said == [
        "the door is full",
        "the door is full (60 times in the last 60 s)",
        "the door is full (60 times in the last 60 s)",
        "Host evil.example refused",
        "full: 29 more in the last 29 s",
    ]
    assert repeats.count == 151


def test_the_loops_repeated_errors_reach_its_handler_once_then_as_a_count() -> None:
    """Attack: 1,100 idle sockets under a 1,024-descriptor limit wrote 101,822 error lines (issue 42)."""
    seen: list[dict[str, Any]] = []

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(lambda _loop, context: seen.append(context))
        say_loop_errors_once(every_s=60.0)
        say_loop_errors_once(every_s=60.0)  # a second door starting: nothing changes
        out = OSError(errno.EMFILE, "Too many open files")
        for _ in range(120):  # asyncio's retry: once a second while descriptors are out
            loop.call_exception_handler({"message": "socket.accept() out of system resource", "exception": out})
            await asyncio.sleep(1.0)
        loop.call_exception_handler({"message": "another", "exception": ValueError("x")})

    run_on_clock(scenario(), VirtualClock())
    messages = [context["message"] for context in seen]
    assert messages == [
        "socket.accept() out of system resource",
        "socket.accept() out of system resource (60 times in the last 60 s)",
        "another",
    ]
    assert all(isinstance(context["exception"], Exception) for context in seen)
