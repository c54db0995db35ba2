"""A device's end of a transport (``DeviceLink``), and what both links share.

Each link connects, says hello as the firmware does (protocol version, ``features: {"mcp": true}``)
and keeps the session id. A reader runs for the whole connection, as the firmware's network task
does, and decodes what arrives at the edge (``wire.inbound``): MCP requests go to the device's
handler the moment they arrive, whether a turn runs or not; everything else waits in an inbox,
stamped on arrival, for the turn that reads it. A link that is gone raises ``ChannelGone``; a
session that cannot be opened, ``DeviceError``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Protocol

from pipeline.clock import Clock
from pipeline.tracing.timeline import PacketCounts
from pipeline.transport.device.device_settings import LinkSettings
from pipeline.transport.wire.failures import ChannelGone
from pipeline.transport.wire.framing import Audio
from pipeline.transport.wire.inbound import Inbound
from pipeline.transport.wire.messages import LAB_AUDIO, Features, Hello, Malformed, Mcp, Message, Other, kind

McpHandler = Callable[[Mcp], Awaitable[None]]
_END = object()


class DeviceError(RuntimeError):
    """The server could not be reached, refused the device, or broke the protocol."""


class DeviceLink(Protocol):
    """One connection from the device to its server, for as long as it lasts."""

    transport: str
    label: str
    settings: LinkSettings
    session_id: str
    on_mcp: McpHandler | None

    @property
    def is_open(self) -> bool: ...

    async def open(self) -> None:
        """Connect and say hello; ``DeviceError`` when no session comes of it."""

    async def close(self) -> None: ...

    async def send(self, message: Message) -> None: ...

    async def send_audio(self, opus: bytes, timestamp_ms: int) -> None: ...

    async def recv_at(self) -> tuple[int, Inbound]:
        """The next thing that arrived, and when."""

    def turn_started(self, drain: bool = True) -> int:
        """A new turn: what is still waiting belongs to none (``drain``); how many audio frames went."""

    def last_arrival_ns(self) -> int | None:
        """When the server's last message or frame arrived (None: nothing yet)."""

    def packet_counts(self) -> PacketCounts | None: ...


class Inbox:
    """What the server sent, in arrival order, each stamped when it arrived, for the turn to read."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.queue: asyncio.Queue[tuple[int, object]] = asyncio.Queue()
        self.gone = ""  # why the connection ended; "": it has not
        self.last_ns: int | None = None  # when the last item arrived

    def put(self, item: Inbound) -> None:
        self.last_ns = self.clock.now_ns()
        self.queue.put_nowait((self.last_ns, item))

    def end(self, reason: str) -> None:
        if not self.gone:
            self.gone = reason
            self.queue.put_nowait((self.clock.now_ns(), _END))

    async def get(self) -> tuple[int, Inbound]:
        at, item = await self.queue.get()
        if item is _END:
            self.queue.put_nowait((at, item))  # every later call is told too
            raise ChannelGone(self.gone)
        return at, item  # type: ignore[return-value]

    def drain(self) -> int:
        """Everything waiting is taken out (the end of the connection stays); how many were audio."""
        audio = 0
        while not self.queue.empty():
            at, item = self.queue.get_nowait()
            if item is _END:
                self.queue.put_nowait((at, item))
                break
            audio += isinstance(item, Audio)
        return audio


async def deliver(inbox: Inbox, on_mcp: McpHandler | None, item: Message | Other | Malformed) -> None:
    """A control message as the firmware's network task takes it: MCP answered at once, the rest kept."""
    if isinstance(item, Mcp) and on_mcp is not None:
        await on_mcp(item)
    else:
        inbox.put(item)


def device_hello(transport: str, version: int) -> Hello:
    """The firmware's hello (websocket_protocol.cc / mqtt_protocol.cc GetHelloMessage)."""
    return Hello(version=version, transport=transport, audio_params=LAB_AUDIO, features=Features(mcp=True))


async def next_control(link: DeviceLink) -> Message | Other | Malformed:
    """The next control message, audio that came before it left aside."""
    while True:
        _at, item = await link.recv_at()
        if not isinstance(item, Audio):
            return item


async def hello_answer(link: DeviceLink, answer: Message | Other | Malformed) -> Hello:
    """The server's answer to our hello, or ``DeviceError`` (the link closed) when it answered otherwise."""
    if not isinstance(answer, Hello):
        await link.close()
        said = answer.reason if isinstance(answer, Malformed) else kind(answer)
        raise DeviceError(f"{link.settings.url}: answered hello with {said!r}")
    return answer
