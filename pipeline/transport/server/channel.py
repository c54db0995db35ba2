"""A device's link as the server's session sees it, whatever the transport (``ServerChannel``)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Coroutine
from typing import Any, Protocol

from pipeline.tracing.timeline import PacketCounts
from pipeline.transport.server.flood import FloodGuard
from pipeline.transport.wire.failures import ChannelGone
from pipeline.transport.wire.inbound import Inbound
from pipeline.transport.wire.messages import Hello, Message


class ServerChannel(Protocol):
    """One device's link to the server: what arrives (decoded at the edge), and ways to answer."""

    transport: str  # what the hello says: "websocket", "udp"
    guard: FloodGuard  # the connection's, shared by every session it carries

    def incoming(self) -> AsyncIterator[Inbound]: ...

    async def send(self, message: Message) -> None:
        """Send a control message; ``ChannelGone`` when the device is gone."""

    async def send_audio(self, opus: bytes, timestamp_ms: int) -> None: ...

    async def close(self, code: int, reason: str) -> None: ...

    def answer_hello(self, answer: Hello) -> Hello:
        """The server's hello as this transport sends it (MQTT adds its version and UDP channel)."""

    def turn_started(self) -> None:
        """A turn begins: a lossy channel starts counting its packets afresh."""

    def packet_counts(self) -> PacketCounts | None:
        """The turn's incoming packets, for a lossy channel (UDP); None for a reliable one."""


async def tell(channel: ServerChannel, message: Message) -> None:
    """Send a message the device may no longer be there to hear: a channel gone is no error here."""
    with contextlib.suppress(ChannelGone):
        await channel.send(message)


class Background:
    """Work a session's message loop must not wait for (asking a device's tools, telling it a refusal).

    A device gone meanwhile is no error of ours; anything else that fails goes to the loop's handler."""

    def __init__(self) -> None:
        self.tasks: set[asyncio.Task[None]] = set()

    def soon(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(work)
        self.tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self.tasks.discard(task)
        exc = None if task.cancelled() else task.exception()
        if exc is not None and not isinstance(exc, ChannelGone):
            task.get_loop().call_exception_handler({"message": "device session work failed", "exception": exc})
