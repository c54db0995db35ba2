"""The xiaozhi WebSocket transport's server end: each connection is one device session.

The handshake checks the path (its query string aside), the bearer token and the
``Protocol-Version`` header (binary framing 1, 2 or 3); then the connection is a
``ServerChannel`` for ``session.DeviceSession``. As xiaozhi-esp32-server does, a client that
cannot set headers (a browser page) may send ``device-id``, ``client-id`` and
``authorization`` as query parameters instead, and the MQTT gateway's
``?from=mqtt_gateway`` is allowed; with ``DoorSettings.allowed_devices`` only a listed Device-Id
comes in (403), and a web page only from this machine or an origin listed in ``allowed_origins`` (403;
devices send no Origin: ``origins``). A message over the size limit is closed by websockets
itself (1009), and a client that stops reading holds at most its queue (websockets'
``max_queue``) before TCP stops it. What the real server has no limit for, the lab's front door
has as ``DoorSettings``: open connections (over the cap, 503), a send that cannot go out
within ``write_timeout_s`` (the connection is dropped), a handshake not done within
``handshake_timeout_s``, and connections waiting for their handshake (past ``max_waiting``, the one that
has waited longest is dropped, so idle sockets cannot take every descriptor).
"""

from __future__ import annotations

import asyncio
import hmac
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qs, urlsplit

from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.datastructures import Headers
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

from pipeline.clock import Clock
from pipeline.endpoints.doors import WaitingRoom
from pipeline.endpoints.repeats import Repeats, say_loop_errors_once
from pipeline.tracing.timeline import PacketCounts
from pipeline.transport.server.device_session import DeviceSession
from pipeline.transport.server.flood import FloodGuard
from pipeline.transport.server.origins import origin_allowed
from pipeline.transport.server.requests import TurnSources
from pipeline.transport.server.server_settings import DoorSettings, SessionSettings
from pipeline.transport.wire import framing
from pipeline.transport.wire.failures import ChannelGone
from pipeline.transport.wire.inbound import Inbound, from_websocket
from pipeline.transport.wire.messages import Hello, Message, encode

# headers a client may send as query parameters instead (xs/core/websocket_server.py:83-106)
QUERY_FALLBACKS = ("Device-Id", "Client-Id", "Authorization")
_log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class WebSocketSettings:
    """Where the WebSocket front door listens and what it asks of a device."""

    host: str = "127.0.0.1"
    port: int = 8000
    path: str = "/xiaozhi/v1/"
    token: str = field(default="", repr=False)  # when set, devices must send "Authorization: Bearer TOKEN"
    # websockets' default, as the real server runs: an MCP tools/list reply runs to tens of KiB
    max_message_bytes: int = 2**20
    session: SessionSettings = field(default_factory=SessionSettings)
    door: DoorSettings = field(default_factory=DoorSettings)
    reuse_port: bool = False  # SO_REUSEPORT: several server processes share the port (serve --processes)


class WebSocketChannel:
    """A WebSocket connection as a session's channel; binary messages in the negotiated framing."""

    transport = "websocket"

    def __init__(self, ws: ServerConnection, settings: WebSocketSettings, clock: Clock) -> None:
        self.ws, self.write_timeout_s = ws, settings.door.write_timeout_s
        self.version = _version(ws.request.headers if ws.request else Headers())
        self.guard = FloodGuard(settings.session.flood, clock)

    async def incoming(self) -> AsyncIterator[Inbound]:
        try:
            async for message in self.ws:
                yield from_websocket(self.version, message)
        except ConnectionClosed:
            return

    async def send(self, message: Message) -> None:
        await self._send(encode(message))

    async def send_audio(self, opus: bytes, timestamp_ms: int) -> None:
        await self._send(framing.pack(self.version, opus, timestamp_ms))

    async def _send(self, data: str | bytes) -> None:
        try:
            async with asyncio.timeout(self.write_timeout_s):
                await self.ws.send(data)
        except ConnectionClosed as exc:
            raise ChannelGone(str(exc)) from None
        except TimeoutError:  # the device stopped reading: it holds nothing of ours any longer
            self.ws.transport.abort()
            raise ChannelGone(f"a send could not go out within {self.write_timeout_s:g} s") from None

    async def close(self, code: int, reason: str) -> None:
        await self.ws.close(code, reason)

    def answer_hello(self, answer: Hello) -> Hello:
        return answer

    def turn_started(self) -> None:
        pass

    def packet_counts(self) -> PacketCounts | None:
        return None  # TCP: nothing is lost or reordered


def _version(headers: Headers) -> int:
    raw = headers.get("Protocol-Version", "1")
    return int(raw) if raw.isascii() and raw.isdigit() and int(raw) in framing.VERSIONS else 0


def _full(connection: ServerConnection, door: DoorSettings) -> str:
    """Why the door is full for this connection, "" when it is not (it counts itself among the open ones)."""
    open_now = connection.server.connections
    if len(open_now) >= door.max_connections:
        return f"{door.max_connections} connections are open, the most this server takes"
    address = connection.remote_address[0] if connection.remote_address else ""
    if door.max_per_address and sum(1 for c in open_now if c.remote_address[0] == address) >= door.max_per_address:
        return f"{door.max_per_address} connections from {address} are open, the most from one address"
    return ""


def _refuse(settings: WebSocketSettings) -> Callable[[ServerConnection, Request], Response | None]:
    """The handshake's checks: room, path, origin, device, token and protocol version, answered with an HTTP
    status."""

    def check(connection: ServerConnection, request: Request) -> Response | None:
        full = _full(connection, settings.door)
        if full:
            return connection.respond(HTTPStatus.SERVICE_UNAVAILABLE, full + "\n")
        parts = urlsplit(request.path)
        if parts.path.rstrip("/") != settings.path.rstrip("/"):
            return connection.respond(HTTPStatus.NOT_FOUND, f"no xiaozhi endpoint at {parts.path}\n")
        if not origin_allowed(request.headers.get("Origin"), settings.door.allowed_origins):
            return connection.respond(HTTPStatus.FORBIDDEN, "this web origin may not connect (allowed_origins)\n")
        _headers_from_query(request.headers, parts.query)
        if not settings.door.admits(request.headers.get("Device-Id", "")):
            return connection.respond(HTTPStatus.FORBIDDEN, "not an allowed device\n")
        if settings.token and not _token_ok(request.headers.get("Authorization", ""), settings.token):
            return connection.respond(HTTPStatus.UNAUTHORIZED, "missing or wrong bearer token\n")
        if not _version(request.headers):
            versions = ", ".join(map(str, framing.VERSIONS))
            return connection.respond(HTTPStatus.BAD_REQUEST, f"Protocol-Version must be one of {versions}\n")
        return None

    return check


def _headers_from_query(headers: Headers, query: str) -> None:
    """A header the client did not send is taken from the query parameter of the same name, lower case."""
    params = parse_qs(query)
    for name in QUERY_FALLBACKS:
        values = params.get(name.lower())
        if name not in headers and values:
            headers[name] = values[0]


def _token_ok(authorization: str, token: str) -> bool:
    # "Bearer TOKEN" exactly, as the real server wants (xs/core/websocket_server.py:213-217); compared in
    # constant time so that the answer's timing does not tell how much of a guess was right
    return hmac.compare_digest(authorization.encode(), f"Bearer {token}".encode())


def _waiting_room(door: DoorSettings) -> type[ServerConnection]:
    """Connections that wait in one room until their handshake is done: past ``door``'s cap the one that has waited
    longest is dropped, so that sockets left idle cannot hold every descriptor (``endpoints.doors``)."""
    room: WaitingRoom[ServerConnection] = WaitingRoom(lambda c: c.transport.abort(), door.waiting_cap())
    said = Repeats(_log.warning, now=asyncio.get_running_loop().time)

    class Waiting(ServerConnection):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            super().connection_made(transport)
            closed = room.closed
            room.enter(self)
            if room.closed > closed:
                said.say("full", f"{room.cap} WebSocket connections wait for their handshake: the oldest was dropped")

        async def handshake(self, *args: Any, **kwargs: Any) -> None:
            try:
                await super().handshake(*args, **kwargs)
            finally:
                room.leave(self)

        def connection_lost(self, exc: Exception | None) -> None:
            room.leave(self)
            super().connection_lost(exc)

    return Waiting


async def start_websocket_server(settings: WebSocketSettings, turns: TurnSources, clock: Clock) -> Server:
    """Listen for devices; the returned server is closed by the caller (``async with`` or ``close()``)."""

    async def handler(ws: ServerConnection) -> None:
        await DeviceSession(WebSocketChannel(ws, settings, clock), settings.session, turns, clock).serve()

    server = await serve(
        handler,
        settings.host,
        settings.port,
        process_request=_refuse(settings),
        max_size=settings.max_message_bytes,
        compression=None,  # audio does not compress, and per-message deflate costs every frame
        reuse_port=settings.reuse_port,
        close_timeout=2.0,  # a flooding client's close frame waits behind its unread messages
        open_timeout=settings.door.handshake_timeout_s,
        create_connection=_waiting_room(settings.door),
    )
    say_loop_errors_once()
    return server
