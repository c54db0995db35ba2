"""A scripted server at the far end of a device's own WebSocket link, in the test's event loop, no socket.

``FarEnd`` plays websockets' face as ``WebSocketLink`` uses it: its hello, then for each ``listen`` the
device sends the next answer in its script (text and binary messages, a ``flood`` that repeats for ever,
a ``sleep``, a ``close`` that drops the connection there). ``FarEndLink`` is the device's real link (its reader,
guard and inbox) with a ``FarEnd`` in place of the socket; ``Dialer`` hands a device, connection after
connection, links to far ends or refusals, and notes when each was opened. On the virtual clock the
whole device runs in simulated time: a backoff of minutes takes milliseconds and its times are exact.
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from collections.abc import Sequence
from typing import Any

from websockets.exceptions import ConnectionClosed
from websockets.protocol import State

from pipeline.clock import Clock
from pipeline.transport.device.device_settings import LinkSettings
from pipeline.transport.device.link import DeviceError
from pipeline.transport.device.websocket_link import WebSocketLink
from pipeline.transport.wire.opus import OpusEncoder
from tests.scenario import TONE

# ("text", str) | ("binary", bytes) | ("flood", str | bytes) | ("sleep", seconds) | ("close", None)
Item = tuple[str, Any]
TONE_PACKET = OpusEncoder("lab").encode(TONE)
ANSWER: list[Item] = [
    ("text", json.dumps({"type": "stt", "text": "question"})),
    ("text", json.dumps({"type": "tts", "state": "start"})),
    *[("binary", TONE_PACKET)] * 5,
    ("text", json.dumps({"type": "tts", "state": "stop"})),
]
GAP_S = 0.001  # between two things the far end sends


class FarEnd:
    """One connection's far end: its hello, then an answer from ``answers`` for each ``listen`` it is sent;
    once they are all played it closes (``close``) or says nothing more."""

    def __init__(self, answers: Sequence[Sequence[Item]], close: bool = False) -> None:
        self.answers, self.close_at_end = deque(list(a) for a in answers), close
        self.playing: deque[Item] = deque()
        self.state = State.OPEN
        self.transport = self
        self.listened = asyncio.Event()
        self.said_hello = False

    async def recv(self) -> str | bytes:
        if not self.said_hello:
            self.said_hello = True
            return json.dumps({"type": "hello", "transport": "websocket", "session_id": "s"})
        while not self.playing:
            self._closed_or_open()
            if not self.answers and self.close_at_end:
                self.state = State.CLOSED
                continue
            if not self.answers:
                await asyncio.Event().wait()  # says nothing more, until the link is closed
            await self.listened.wait()
            self.listened.clear()
            self.playing.extend(self.answers.popleft())
        await asyncio.sleep(GAP_S)
        self._closed_or_open()
        kind, data = self.playing[0]
        if kind == "sleep":
            self.playing.popleft()
            await asyncio.sleep(data)
            return await self.recv()
        if kind != "flood":  # a flood: the same message for ever
            self.playing.popleft()
        if kind == "close":
            self.state = State.CLOSED
            self._closed_or_open()
        return bytes(data) if isinstance(data, bytes) else str(data)

    def _closed_or_open(self) -> None:
        if self.state is not State.OPEN:
            raise ConnectionClosed(None, None)

    async def send(self, data: str | bytes) -> None:
        self._closed_or_open()
        if isinstance(data, str) and '"listen"' in data:
            self.listened.set()

    async def close(self) -> None:
        self.state = State.CLOSED

    def abort(self) -> None:
        self.state = State.CLOSED


class FarEndLink(WebSocketLink):
    """The device's WebSocket link with a ``FarEnd`` in place of the socket (``refused``: its open fails)."""

    def __init__(self, settings: LinkSettings, clock: Clock, far: FarEnd | str, transport: str = "websocket") -> None:
        super().__init__(settings, clock)
        self.far, self.transport = far, transport

    async def open(self) -> None:
        if isinstance(self.far, str):
            raise DeviceError(f"{self.settings.url}: {self.far}")
        self.ws = self.far  # type: ignore[assignment]
        self._reader = asyncio.create_task(self._read(self.far))  # type: ignore[arg-type]
        await self.inbox.get()  # the hello
        self.session_id = "s"

    async def send_audio(self, opus: bytes, timestamp_ms: int) -> None:
        if isinstance(self.far, FarEnd):
            await self.far.send(opus)


class Dialer:
    """What a device reaches, connection after connection: a far end, or a refusal (a string saying why);
    the last is repeated. ``opened_ns``: when each was opened."""

    def __init__(self, plan: Sequence[FarEnd | str], transport: str = "websocket") -> None:
        self.plan, self.transport = list(plan), transport
        self.opened_ns: list[int] = []

    def __call__(self, settings: LinkSettings, clock: Clock) -> FarEndLink:
        far = self.plan.pop(0) if len(self.plan) > 1 else self.plan[0]
        link = FarEndLink(settings, clock, far, self.transport)
        original = link.open

        async def noted() -> None:
            self.opened_ns.append(clock.now_ns())
            await original()

        link.open = noted  # type: ignore[method-assign]
        return link
