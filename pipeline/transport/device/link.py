"""A device's end of a transport (``DeviceLink``), and what both links share.

Each link connects, says hello as the firmware does (protocol version, ``features: {"mcp": true}``)
and keeps the session id. A reader runs for the whole connection, as the firmware's network task
does, and decodes what arrives at the edge (``wire.inbound``): MCP requests go to the device's
handler the moment they arrive, whether a turn runs or not; everything else waits in an inbox,
stamped on arrival, for the turn that reads it. A link that is gone raises ``LinkGone`` (a
``ChannelGone`` that says whether the connection was lost or the device hung up on a hostile server);
a session that cannot be opened, ``DeviceError``. What waits unread in the inbox is capped
(``DownlinkLimits``): a server that fills it is hostile, and the link hangs up on it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Protocol

from pipeline.clock import Clock
from pipeline.tracing.timeline import PacketCounts
from pipeline.transport.device.device_settings import DownlinkLimits, LinkSettings
from pipeline.transport.device.downlink_guard import DownlinkFlood
from pipeline.transport.wire.failures import ChannelGone
from pipeline.transport.wire.framing import Audio
from pipeline.transport.wire.inbound import Inbound
from pipeline.transport.wire.messages import LAB_AUDIO, Features, Hello, Malformed, Mcp, Message, Other, kind

McpHandler = Callable[[Mcp], Awaitable[None]]
_END = object()
LOST, FLOODED = "disconnected", "flooded"  # why a link is gone: a turn cut by it fails with this kind


class LinkGone(ChannelGone):
    """The link is gone: ``kind`` says why (``LOST``: the connection ended; ``FLOODED``: the device hung
    up on a server that sent more than it takes), the text says what happened, ``at_ns`` when."""

    def __init__(self, reason: str, kind: str = LOST, at_ns: int | None = None) -> None:
        super().__init__(reason)
        self.kind, self.at_ns = kind, at_ns


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

    def lost(self) -> LinkGone | None:
        """Why the link ended, when it has (None: it has not, as far as the device knows)."""


def why_gone(link: DeviceLink, exc: ChannelGone) -> LinkGone:
    """Why a send or a read found ``link`` gone: what the link knows (the device hung up on a flood, the
    server closed it) over what the failed call says."""
    return link.lost() or (exc if isinstance(exc, LinkGone) else LinkGone(str(exc)))


def no_session(link: DeviceLink, exc: BaseException) -> str:
    """Why opening ``link`` failed: the device hanging up on a flood says more than the call it broke."""
    gone = link.lost()
    return str(gone) if gone is not None and gone.kind == FLOODED else f"{type(exc).__name__}: {exc}"


class Inbox:
    """What the server sent, in arrival order, each stamped when it arrived, for the turn to read."""

    def __init__(self, clock: Clock, limits: DownlinkLimits | None = None) -> None:
        self.clock = clock
        self.limits = limits or DownlinkLimits()
        self.queue: asyncio.Queue[tuple[int, object, int]] = asyncio.Queue()
        self.gone = ""  # why the connection ended; "": it has not
        self.gone_kind = LOST
        self.gone_ns: int | None = None  # when it ended
        self.last_ns: int | None = None  # when the last item arrived
        self.waiting_bytes = 0

    def put(self, item: Inbound, size: int = 0) -> None:
        """``item`` arrived now, ``size`` bytes on the wire; ``DownlinkFlood`` when more would wait unread than may."""
        if self.gone:
            return  # the link has ended: nothing more is kept for it
        caps = self.limits
        if self.queue.qsize() >= caps.max_waiting or self.waiting_bytes + size > caps.max_waiting_bytes:
            raise DownlinkFlood(f"more than {caps.max_waiting} messages or {caps.max_waiting_bytes} bytes unread")
        self.last_ns = self.clock.now_ns()
        self.waiting_bytes += size
        self.queue.put_nowait((self.last_ns, item, size))

    def end(self, reason: str, kind: str = LOST) -> None:
        if not self.gone:
            self.gone, self.gone_kind, self.gone_ns = reason, kind, self.clock.now_ns()
            self.queue.put_nowait((self.gone_ns, _END, 0))

    def hang_up(self, flood: DownlinkFlood) -> None:
        """The device hangs up on its server: what waits is thrown away, a turn reading is told why."""
        while not self.queue.empty():
            self.queue.get_nowait()
        self.waiting_bytes = 0
        self.end(f"the device hung up: the server sent {flood}", FLOODED)

    def why(self) -> LinkGone | None:
        return LinkGone(self.gone, self.gone_kind, self.gone_ns) if self.gone else None

    async def get(self) -> tuple[int, Inbound]:
        at, item, size = await self.queue.get()
        if item is _END:
            self.queue.put_nowait((at, item, size))  # every later call is told too
            raise LinkGone(self.gone, self.gone_kind, self.gone_ns)
        self.waiting_bytes -= size
        return at, item  # type: ignore[return-value]

    def drain(self) -> int:
        """Everything waiting is taken out (the end of the connection stays); how many were audio."""
        audio = 0
        while not self.queue.empty():
            at, item, size = self.queue.get_nowait()
            if item is _END:
                self.queue.put_nowait((at, item, size))
                break
            self.waiting_bytes -= size
            audio += isinstance(item, Audio)
        return audio


async def deliver(inbox: Inbox, on_mcp: McpHandler | None, item: Message | Other | Malformed, size: int) -> None:
    """A control message as the firmware's network task takes it: MCP answered at once, the rest kept."""
    if isinstance(item, Mcp) and on_mcp is not None:
        await on_mcp(item)
    else:
        inbox.put(item, size)


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
