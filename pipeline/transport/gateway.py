"""The xiaozhi WebSocket transport's server end: each connection is one device session.

The handshake checks the path (its query string aside), the bearer token and the
``Protocol-Version`` header (binary framing 1, 2 or 3); then the connection is a
``ServerChannel`` for ``session.DeviceSession``. As xiaozhi-esp32-server does, a client that
cannot set headers (a browser page) may send ``device-id``, ``client-id`` and
``authorization`` as query parameters instead, and the MQTT gateway's
``?from=mqtt_gateway`` is allowed. A message over the size limit is closed by websockets
itself (1009).
"""

from __future__ import annotations

import hmac
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qs, urlsplit

from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.datastructures import Headers
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

from pipeline.clock import Clock
from pipeline.tracing.timeline import PacketCounts
from pipeline.transport import protocol
from pipeline.transport.protocol import ChannelGone
from pipeline.transport.session import DeviceSession, SessionSettings, TurnRequest, Turns

__all__ = ["GatewaySettings", "TurnRequest", "Turns", "WebSocketChannel", "start_gateway"]

# headers a client may send as query parameters instead (xs/core/websocket_server.py:83-106)
QUERY_FALLBACKS = ("Device-Id", "Client-Id", "Authorization")


@dataclass(frozen=True, slots=True)
class GatewaySettings:
    host: str = "127.0.0.1"
    port: int = 8000
    path: str = "/xiaozhi/v1/"
    token: str = field(default="", repr=False)  # when set, devices must send "Authorization: Bearer TOKEN"
    # websockets' default, as the real server runs: an MCP tools/list reply runs to tens of KiB
    max_message_bytes: int = 2**20
    session: SessionSettings = field(default_factory=SessionSettings)


class WebSocketChannel:
    """A WebSocket connection as a session's channel; binary messages in the negotiated framing."""

    transport = "websocket"

    def __init__(self, ws: ServerConnection) -> None:
        self.ws = ws
        self.version = _version(ws.request.headers if ws.request else Headers())

    async def incoming(self) -> AsyncIterator[str | protocol.Packet]:
        try:
            async for message in self.ws:
                yield message if isinstance(message, str) else protocol.unpack(self.version, message)
        except ConnectionClosed:
            return

    async def send_json(self, message: dict[str, Any]) -> None:
        try:
            await self.ws.send(protocol.dump(message))
        except ConnectionClosed as exc:
            raise ChannelGone(str(exc)) from None

    async def send_audio(self, opus: bytes, timestamp_ms: int) -> None:
        try:
            await self.ws.send(protocol.pack(self.version, opus, timestamp_ms))
        except ConnectionClosed as exc:
            raise ChannelGone(str(exc)) from None

    async def close(self, code: int, reason: str) -> None:
        await self.ws.close(code, reason)

    def hello_extra(self, session_id: str) -> dict[str, Any]:
        return {}

    def turn_started(self) -> None:
        pass

    def packet_counts(self) -> PacketCounts | None:
        return None  # TCP: nothing is lost or reordered


def _version(headers: Headers) -> int:
    raw = headers.get("Protocol-Version", "1")
    return int(raw) if raw.isdigit() and int(raw) in protocol.VERSIONS else 0


def _refuse(settings: GatewaySettings) -> Any:
    """The handshake's checks: path, token and protocol version, answered with an HTTP status."""

    def check(connection: ServerConnection, request: Request) -> Response | None:
        parts = urlsplit(request.path)
        if parts.path.rstrip("/") != settings.path.rstrip("/"):
            return connection.respond(HTTPStatus.NOT_FOUND, f"no xiaozhi endpoint at {parts.path}\n")
        _headers_from_query(request.headers, parts.query)
        if settings.token and not _token_ok(request.headers.get("Authorization", ""), settings.token):
            return connection.respond(HTTPStatus.UNAUTHORIZED, "missing or wrong bearer token\n")
        if not _version(request.headers):
            versions = ", ".join(map(str, protocol.VERSIONS))
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


async def start_gateway(settings: GatewaySettings, turns: Turns, clock: Clock) -> Server:
    """Listen for devices; the returned server is closed by the caller (``async with`` or ``close()``)."""

    async def handler(ws: ServerConnection) -> None:
        await DeviceSession(WebSocketChannel(ws), settings.session, turns, clock).serve()

    return await serve(
        handler,
        settings.host,
        settings.port,
        process_request=_refuse(settings),
        max_size=settings.max_message_bytes,
        compression=None,  # audio does not compress, and per-message deflate costs every frame
        close_timeout=2.0,  # a flooding client's close frame waits behind its unread messages
    )
