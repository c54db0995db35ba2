"""A failure that repeats is said once, then as a count: a flood of one error is a few lines, not 100,000.

While a process is out of file descriptors, asyncio says "socket.accept() out of system resource" with a
traceback each time a listener retries (each second, per listener), and a door refusing a flood of connections
would say each refusal: 1,100 idle sockets wrote 101,822 error lines (issue 42). ``Repeats`` says the first
of a kind at once and counts the rest, saying the count at most once every ``every_s``; ``say_loop_errors_once``
does that for the event loop's own errors.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

EVERY_S = 60.0


@dataclass(slots=True)
class _Kind:
    said_at: float
    since_said: int = 0  # how many came after it was last said


class Repeats:
    """Says each kind of message once, then how many more came, at most once every ``every_s``."""

    def __init__(
        self, say: Callable[[str], None], every_s: float = EVERY_S, now: Callable[[], float] = time.monotonic
    ) -> None:
        self._say, self.every_s, self.now = say, every_s, now
        self._kinds: dict[str, _Kind] = {}
        self.count = 0  # every message, said or counted

    def say(self, kind: str, message: str) -> None:
        """``message`` is said if it is the first of ``kind``, or the first since ``every_s`` with the count."""
        self.count += 1
        now, seen = self.now(), self._kinds.get(kind)
        if seen is None:
            self._kinds[kind] = _Kind(now)
            self._say(message)
            return
        seen.since_said += 1
        if now - seen.said_at >= self.every_s:
            self._say(f"{message} ({seen.since_said} times in the last {now - seen.said_at:.0f} s)")
            seen.said_at, seen.since_said = now, 0

    def flush(self) -> None:
        """Says the count of each kind that came since it was last said (a server stopping)."""
        for kind, seen in self._kinds.items():
            if seen.since_said:
                self._say(f"{kind}: {seen.since_said} more in the last {self.now() - seen.said_at:.0f} s")
                seen.since_said = 0


class _LoopErrors:
    """An event loop's exception handler that passes each kind of error on once, then as a count."""

    def __init__(self, loop: asyncio.AbstractEventLoop, every_s: float) -> None:
        self.loop, self.previous = loop, loop.get_exception_handler()
        self.context: dict[str, Any] = {}
        self.repeats = Repeats(self._pass_on, every_s, loop.time)

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        kind = f"{context.get('message', '')} {type(exc).__name__ if exc else ''} {getattr(exc, 'errno', '')}"
        self.context = context
        self.repeats.say(kind, str(context.get("message", "")))

    def _pass_on(self, message: str) -> None:
        context = {**self.context, "message": message}
        if self.previous is not None:
            self.previous(self.loop, context)
        else:
            self.loop.default_exception_handler(context)


def say_loop_errors_once(every_s: float = EVERY_S) -> None:
    """The running loop's errors from here on are said once per kind, then as a count (its earlier handler, or
    asyncio's own, says them); a second call changes nothing."""
    loop = asyncio.get_running_loop()
    if not isinstance(loop.get_exception_handler(), _LoopErrors):
        loop.set_exception_handler(_LoopErrors(loop, every_s))
