"""A device's end of each transport: WebSocket, and MQTT (control) + UDP (encrypted audio).

Each link connects, says hello and keeps the session id; then it sends control JSON and Opus
packets and hands back what the server sends, control messages as text and audio as packets.
A link that is gone raises ``ChannelGone``; a session that cannot be opened, ``DeviceError``.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import aiomqtt
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed
from websockets.protocol import State

from pipeline.endpoints.link.datagrams import UdpRelay
from pipeline.endpoints.link.profiles import NetProfile
from pipeline.endpoints.link.proxy import LinkEmulator
from pipeline.tracing.timeline import PacketCounts
from pipeline.transport import protocol
from pipeline.transport.protocol import ChannelGone, ProtocolError
from pipeline.transport.udp import PacketCrypto, PacketError, SequenceCheck

_END = object()


class DeviceError(RuntimeError):
    """The server could not be reached, refused the device, or broke the protocol."""


@dataclass(frozen=True, slots=True)
class LinkSettings:
    url: str  # ws://HOST:PORT/xiaozhi/v1/ or mqtt://BROKER:PORT/PREFIX
    token: str = field(default="", repr=False)
    protocol_version: int = 1  # WebSocket binary framing
    device_id: str = "02:00:00:00:00:01"
    connect_timeout_s: float = 10.0
    profile: NetProfile | None = None  # the link emulator between device and server (M14); None: direct


class WebSocketLink:
    transport = "websocket"

    def __init__(self, settings: LinkSettings) -> None:
        self.settings = settings
        self.ws: ClientConnection | None = None
        self.session_id = ""
        self.proxy: LinkEmulator | None = None
        self.label = f"xiaozhi server at {settings.url} (websocket, protocol {settings.protocol_version})"
        if settings.profile is not None:
            self.label += f"; link profile {settings.profile.name}"

    @property
    def is_open(self) -> bool:
        return self.ws is not None and self.ws.state is State.OPEN

    async def open(self) -> None:
        s = self.settings
        headers = {
            "Protocol-Version": str(s.protocol_version),
            "Device-Id": s.device_id,
            "Client-Id": str(uuid.uuid4()),
        }
        if s.token:
            headers["Authorization"] = f"Bearer {s.token}"
        try:
            async with asyncio.timeout(s.connect_timeout_s):
                url = await self._through_profile(s.url)
                self.ws = await connect(url, additional_headers=headers, compression=None, max_size=2**20)
                await self.send_json(protocol.hello())
                answer = await _next_control(self)
        except (OSError, TimeoutError, ChannelGone, ProtocolError) as exc:
            await self.close()
            raise DeviceError(f"{s.url}: no session ({type(exc).__name__}: {exc})") from None
        except Exception as exc:  # the handshake refused: websockets.InvalidStatus names the HTTP status
            await self.close()
            raise DeviceError(f"{s.url}: refused ({exc})") from None
        self.session_id = await _hello_answer(self, answer)

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
        if self.proxy is not None:
            await self.proxy.stop()
            self.proxy = None

    async def send_json(self, message: dict[str, Any]) -> None:
        if self.ws is None:
            raise ChannelGone("not connected")
        try:
            await self.ws.send(protocol.dump(message))
        except ConnectionClosed as exc:
            raise ChannelGone(f"the server closed the connection ({exc})") from None

    async def send_audio(self, opus: bytes, timestamp_ms: int) -> None:
        if self.ws is None:
            raise ChannelGone("not connected")
        try:
            await self.ws.send(protocol.pack(self.settings.protocol_version, opus, timestamp_ms))
        except ConnectionClosed as exc:
            raise ChannelGone(f"the server closed the connection ({exc})") from None

    async def recv(self) -> str | protocol.Packet:
        if self.ws is None:
            raise ChannelGone("not connected")
        try:
            message = await self.ws.recv()
        except ConnectionClosed as exc:
            raise ChannelGone(f"the server closed the connection ({exc})") from None
        return message if isinstance(message, str) else protocol.unpack(self.settings.protocol_version, message)

    def turn_started(self) -> None:
        pass

    def packet_counts(self) -> PacketCounts | None:
        return None


class _Downlink(asyncio.DatagramProtocol):
    def __init__(self, link: MqttUdpLink) -> None:
        self.link = link

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        self.link.datagram(data)


class MqttUdpLink:
    """Control JSON through the broker on ``PREFIX/up|down/DEVICE_ID``; audio over UDP, AES-CTR sealed."""

    transport = "udp"

    def __init__(self, settings: LinkSettings) -> None:
        self.settings = settings
        parts = urlsplit(settings.url)
        self.broker = (parts.hostname or "127.0.0.1", parts.port or 1883)
        self.prefix = parts.path.strip("/") or "xiaozhi"
        self.label = f"xiaozhi server through MQTT {self.broker[0]}:{self.broker[1]} + UDP"
        if settings.profile is not None:
            self.label += f"; link profile {settings.profile.name}"
        self.proxy: LinkEmulator | None = None
        self.relay: UdpRelay | None = None
        self.session_id = ""
        self.queue: asyncio.Queue[object] = asyncio.Queue()
        self.client: aiomqtt.Client | None = None
        self.udp: asyncio.DatagramTransport | None = None
        self.crypto: PacketCrypto | None = None
        self.check = SequenceCheck()
        self.sequence = 0
        self.rejected = 0
        self._reader: asyncio.Task[None] | None = None
        self._closed = False

    @property
    def is_open(self) -> bool:
        return self.client is not None and not self._closed

    async def open(self) -> None:
        s = self.settings
        try:
            async with asyncio.timeout(s.connect_timeout_s):
                broker = self.broker
                if s.profile is not None:  # the control channel goes through the TCP link emulator
                    self.proxy = LinkEmulator(s.profile, *self.broker)
                    broker = ("127.0.0.1", await self.proxy.start())
                self.client = aiomqtt.Client(*broker, identifier=f"lab-device-{uuid.uuid4().hex[:12]}")
                await self.client.__aenter__()
                await self.client.subscribe(f"{self.prefix}/down/{s.device_id}")
                self._reader = asyncio.create_task(self._read())
                await self.send_json({**protocol.hello("udp"), "version": 3})
                answer = await _next_control(self)
                self.session_id = await _hello_answer(self, answer)
                await self._open_udp(answer.get("udp"))
        except DeviceError:
            await self.close()
            raise
        except (OSError, TimeoutError, ChannelGone, ProtocolError, aiomqtt.MqttError, PacketError) as exc:
            await self.close()
            raise DeviceError(f"{s.url}: no session ({type(exc).__name__}: {exc})") from None

    async def _open_udp(self, udp: object) -> None:
        if not isinstance(udp, dict):
            raise ProtocolError("the server's hello has no udp object")
        try:
            key, nonce = bytes.fromhex(str(udp["key"])), bytes.fromhex(str(udp["nonce"]))
            address = (str(udp["server"]), int(udp["port"]))
        except (KeyError, ValueError, TypeError) as exc:
            raise ProtocolError(f"the hello's udp object is unusable: {exc}") from None
        self.crypto = PacketCrypto(key, nonce)
        if self.settings.profile is not None:  # audio through the UDP relay: delayed, reordered, lost
            self.relay = await UdpRelay(self.settings.profile, address).__aenter__()
            address = self.relay.address
        loop = asyncio.get_running_loop()
        self.udp, _ = await loop.create_datagram_endpoint(lambda: _Downlink(self), remote_addr=address)

    async def _read(self) -> None:
        assert self.client is not None
        try:
            async for message in self.client.messages:
                payload = message.payload
                if isinstance(payload, bytes | bytearray):
                    text = bytes(payload).decode("utf-8", "replace")
                    self.queue.put_nowait(text)
        except aiomqtt.MqttError:
            pass
        finally:
            self.queue.put_nowait(_END)

    def datagram(self, data: bytes) -> None:
        if self.crypto is None:
            return
        try:
            packet = self.crypto.open(data)
        except PacketError:
            self.rejected += 1
            return
        if self.check.accept(packet.sequence):
            self.queue.put_nowait(protocol.Packet(protocol.TYPE_OPUS, packet.payload, packet.timestamp))

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self.client is not None and self.session_id:
            with contextlib.suppress(aiomqtt.MqttError):
                await self.send_json({"type": "goodbye", "session_id": self.session_id})
        if self._reader is not None:
            self._reader.cancel()
            await asyncio.gather(self._reader, return_exceptions=True)
        if self.client is not None:
            with contextlib.suppress(aiomqtt.MqttError):
                await self.client.__aexit__(None, None, None)
        if self.udp is not None:
            self.udp.close()
        if self.relay is not None:
            await self.relay.__aexit__(None, None, None)
        if self.proxy is not None:
            await self.proxy.stop()

    async def send_json(self, message: dict[str, Any]) -> None:
        if self.client is None or (self._closed and message.get("type") != "goodbye"):
            raise ChannelGone("not connected")
        try:
            await self.client.publish(f"{self.prefix}/up/{self.settings.device_id}", protocol.dump(message))
        except aiomqtt.MqttError as exc:
            raise ChannelGone(f"the broker is gone ({exc})") from None

    async def send_audio(self, opus: bytes, timestamp_ms: int) -> None:
        if self.udp is None or self.crypto is None or self._closed:
            raise ChannelGone("no audio channel")
        self.sequence += 1
        self.udp.sendto(self.crypto.seal(opus, timestamp_ms, self.sequence))

    async def recv(self) -> str | protocol.Packet:
        item = await self.queue.get()
        if item is _END:
            self.queue.put_nowait(_END)  # every later call is told too
            raise ChannelGone("the broker connection is gone")
        if isinstance(item, str):
            message = protocol.parse(item)
            if message.get("type") == "goodbye":
                raise ChannelGone(f"the server ended the session: {message.get('reason', 'goodbye')}")
        return item  # type: ignore[return-value]

    def turn_started(self) -> None:
        self.check = self.check.next_turn()

    def packet_counts(self) -> PacketCounts | None:
        return PacketCounts(self.check.received, self.check.lost, self.check.late)


DeviceLink = WebSocketLink | MqttUdpLink


async def _next_control(link: DeviceLink) -> dict[str, Any]:
    while True:
        message = await link.recv()
        if isinstance(message, str):
            return protocol.parse(message)


async def _hello_answer(link: DeviceLink, answer: dict[str, Any]) -> str:
    if answer.get("type") != "hello":
        await link.close()
        raise DeviceError(f"{link.settings.url}: answered hello with {answer.get('type')!r}")
    return str(answer.get("session_id", ""))


def open_link(settings: LinkSettings) -> DeviceLink:
    """The link a server URL names: ws:// or wss:// (WebSocket), mqtt:// (MQTT + UDP)."""
    scheme = urlsplit(settings.url).scheme
    if scheme in ("ws", "wss"):
        return WebSocketLink(settings)
    if scheme == "mqtt":
        return MqttUdpLink(settings)
    raise ValueError(f"{settings.url!r}: a ws://, wss:// or mqtt:// URL is expected")
