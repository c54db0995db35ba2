"""The xiaozhi WebSocket transport's server end: each connection is one device session.

The handshake checks the path, the bearer token and the ``Protocol-Version`` header (binary
framing 1, 2 or 3); then the connection is a ``ServerChannel`` for ``session.DeviceSession``.
A message over the size limit is closed by websockets itself (1009).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any

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


@dataclass(frozen=True, slots=True)
class GatewaySettings:
    host: str = "127.0.0.1"
    port: int = 8000
    path: str = "/xiaozhi/v1/"
    token: str = field(default="", repr=False)  # when set, devices must send "Authorization: Bearer TOKEN"
    max_message_bytes: int = 16 * 1024  # a 60 ms Opus frame is ~150 bytes; a control message well under 1 KiB
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
        if request.path.rstrip("/") != settings.path.rstrip("/"):
            return connection.respond(HTTPStatus.NOT_FOUND, f"no xiaozhi endpoint at {request.path}\n")
        if settings.token and request.headers.get("Authorization", "") != f"Bearer {settings.token}":
            return connection.respond(HTTPStatus.UNAUTHORIZED, "missing or wrong bearer token\n")
        if not _version(request.headers):
            versions = ", ".join(map(str, protocol.VERSIONS))
            return connection.respond(HTTPStatus.BAD_REQUEST, f"Protocol-Version must be one of {versions}\n")
        return None

    return check


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
