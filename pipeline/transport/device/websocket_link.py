"""The device's WebSocket link, as the firmware opens it (``websocket_protocol.cc``).

Headers ``Protocol-Version``, ``Device-Id``, ``Client-Id`` and, with a token, ``Authorization:
Bearer``; then the device's hello, and binary audio in the negotiated framing. With a link profile
the connection goes through the lab's link emulator (M14). A server that sends more than the device
takes (``DownlinkLimits``: messages over ``max_message_bytes``, audio or control floods) is hung up on.
"""

from __future__ import annotations

import asyncio
from urllib.parse import urlsplit, urlunsplit

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed
from websockets.frames import CloseCode
from websockets.protocol import State

from pipeline.clock import Clock
from pipeline.endpoints.link.proxy import LinkEmulator
from pipeline.tracing.timeline import PacketCounts
from pipeline.transport.device.device_settings import LinkSettings
from pipeline.transport.device.downlink_guard import DownlinkFlood, DownlinkGuard
from pipeline.transport.device.link import (
    DeviceError,
    Inbox,
    LinkGone,
    McpHandler,
    deliver,
    device_hello,
    hello_answer,
    next_control,
    no_session,
)
from pipeline.transport.wire import framing
from pipeline.transport.wire.failures import ChannelGone, ProtocolError
from pipeline.transport.wire.framing import Audio
from pipeline.transport.wire.inbound import Inbound, from_websocket
from pipeline.transport.wire.messages import Hello, Message, encode


class WebSocketLink:
    """A device's WebSocket connection to its server."""

    transport = "websocket"

    def __init__(self, settings: LinkSettings, clock: Clock) -> None:
        self.settings = settings
        self.ws: ClientConnection | None = None
        self.session_id = ""
        self.proxy: LinkEmulator | None = None
        self.inbox = Inbox(clock, settings.limits)
        self.guard = DownlinkGuard(settings.limits, clock)
        self.on_mcp: McpHandler | None = None
        self._reader: asyncio.Task[None] | None = None
        self.label = f"xiaozhi server at {settings.url} (websocket, protocol {settings.protocol_version})"
        if settings.profile is not None:
            self.label += f"; link profile {settings.profile.name}"

    @property
    def is_open(self) -> bool:
        return self.ws is not None and self.ws.state is State.OPEN and not self.inbox.gone

    async def open(self) -> None:
        s = self.settings
        headers = {"Protocol-Version": str(s.protocol_version), "Device-Id": s.device_id, "Client-Id": s.client_id}
        if s.token:
            headers["Authorization"] = f"Bearer {s.token}"
        try:
            async with asyncio.timeout(s.connect_timeout_s):
                url = await self._through_profile(s.url)
                self.ws = await connect(
                    url, additional_headers=headers, compression=None, max_size=s.limits.max_message_bytes
                )
                self._reader = asyncio.create_task(self._read(self.ws))
                await self.send(device_hello("websocket", s.protocol_version))
                answer = await next_control(self)
        except (OSError, TimeoutError, ChannelGone, ProtocolError) as exc:
            await self.close()
            raise DeviceError(f"{s.url}: no session ({no_session(self, exc)})") from None
        except Exception as exc:  # the handshake refused: websockets.InvalidStatus names the HTTP status
            await self.close()
            raise DeviceError(f"{s.url}: refused ({exc})") from None
        self.session_id = (await hello_answer(self, answer)).session_id or ""

    async def _read(self, ws: ClientConnection) -> None:
        try:
            while True:
                data = await ws.recv()
                item = from_websocket(self.settings.protocol_version, data)
                if isinstance(item, Audio):
                    self.guard.audio(item.opus)
                    self.inbox.put(item, len(data))
                    continue
                self.guard.control()
                if isinstance(item, Hello) and not self.session_id:
                    self.session_id = item.session_id or ""  # MCP answers right after it need it
                await deliver(self.inbox, self.on_mcp, item, len(data))
        except ConnectionClosed as exc:
            if exc.sent is not None and exc.sent.code == CloseCode.MESSAGE_TOO_BIG:  # websockets refused it
                self.inbox.hang_up(DownlinkFlood(f"a message over {self.settings.limits.max_message_bytes} bytes"))
            else:
                self.inbox.end(f"the server closed the connection ({exc})")
        except DownlinkFlood as exc:
            self.inbox.hang_up(exc)
            ws.transport.abort()  # no closing handshake with a server that floods: nothing more is read from it
        finally:
            self.inbox.end("the connection is closed")

    async def _through_profile(self, url: str) -> str:
        """The URL to dial: the server's, or the link emulator's in front of it."""
        if self.settings.profile is None:
            return url
        parts = urlsplit(url)
        default = 443 if parts.scheme == "wss" else 80
        self.proxy = LinkEmulator(self.settings.profile, parts.hostname or "127.0.0.1", parts.port or default)
        port = await self.proxy.start()
        return urlunsplit(parts._replace(netloc=f"127.0.0.1:{port}"))

    async def close(self) -> None:
        if self.ws is not None:
            await self.ws.close()
            self.ws = None
        if self._reader is not None:
            self._reader.cancel()
            await asyncio.gather(self._reader, return_exceptions=True)
            self._reader = None
        if self.proxy is not None:
            await self.proxy.stop()
            self.proxy = None

    async def send(self, message: Message) -> None:
        await self._send(encode(message))

    async def send_audio(self, opus: bytes, timestamp_ms: int) -> None:
        data = framing.pack(self.settings.protocol_version, opus, timestamp_ms)
        ws = self.ws
        if ws is not None and ws.protocol.state is State.OPEN and not ws.paused and not ws.transport.is_closing():
            # What websockets' send does when nothing is in the way, without its async context manager,
            # which cost a fleet more than the write itself (bench_capacity's profile); anything in the
            # way (closing, the socket's buffer full) goes the whole way round below
            ws.protocol.send_binary(data)
            ws.send_data()
            return
        await self._send(data)

    async def _send(self, data: str | bytes) -> None:
        if self.ws is None:
            raise ChannelGone("not connected")
        try:
            await self.ws.send(data)
        except ConnectionClosed as exc:
            raise ChannelGone(f"the server closed the connection ({exc})") from None

    async def recv_at(self) -> tuple[int, Inbound]:
        """The next message and when it arrived."""
        return await self.inbox.get()

    def turn_started(self, drain: bool = True) -> int:
        """A new turn: what is still waiting belongs to none (``drain``); the audio frames thrown away."""
        return self.inbox.drain() if drain else 0

    def last_arrival_ns(self) -> int | None:
        return self.inbox.last_ns

    def lost(self) -> LinkGone | None:
        return self.inbox.why()

    def packet_counts(self) -> PacketCounts | None:
        return None
