"""A device's end of each transport: WebSocket, and MQTT (control) + UDP (encrypted audio).

Each link connects, says hello as the firmware does (protocol version, ``features: {"mcp": true}``)
and keeps the session id. A reader runs for the whole connection, as the firmware's network task
does: MCP requests go to the device's handler the moment they arrive, whether a turn runs or not;
everything else waits in an inbox, stamped on arrival, for the turn that reads it. A link that is gone
raises ``ChannelGone``; a session that cannot be opened, ``DeviceError``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import ssl
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit, urlunsplit

import aiohttp
import aiomqtt
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed
from websockets.protocol import State

from pipeline.clock import Clock
from pipeline.endpoints.link.datagrams import UdpRelay
from pipeline.endpoints.link.profiles import NetProfile
from pipeline.endpoints.link.proxy import LinkEmulator
from pipeline.tracing.timeline import PacketCounts
from pipeline.transport import mqtt_auth, protocol
from pipeline.transport.mqtt_auth import MqttConfig
from pipeline.transport.protocol import ChannelGone, ProtocolError
from pipeline.transport.udp import PacketCrypto, PacketError, SequenceCheck

_END = object()
MQTT_HELLO_VERSION = 3  # mqtt_protocol.cc GetHelloMessage: always 3, whatever the WebSocket version
OTA_APP_VERSION = "1.6.0"  # the application version the emulator tells an OTA endpoint it runs

McpHandler = Callable[[dict[str, Any]], Awaitable[None]]


class DeviceError(RuntimeError):
    """The server could not be reached, refused the device, or broke the protocol."""


def stable_client_id(device_id: str) -> str:
    """The device's Client-Id: the same on every connection (the firmware sends its board UUID, kept in
    NVS; xiaozhi-sdk derives it as uuid5 of the MAC), so a token issued for it keeps working."""
    return str(uuid.uuid5(uuid.NAMESPACE_DNS, device_id))


@dataclass(frozen=True, slots=True)
class LinkSettings:
    url: str  # ws://HOST:PORT/xiaozhi/v1/, mqtt://HOST:PORT[/TOPIC] or an OTA URL (MqttUdpLink)
    token: str = field(default="", repr=False)
    protocol_version: int = 1  # WebSocket binary framing
    device_id: str = "02:00:00:00:00:01"
    connect_timeout_s: float = 10.0
    profile: NetProfile | None = None  # the link emulator between device and server (M14); None: direct
    client_id: str = ""  # "": stable_client_id(device_id)
    mqtt_signature_key: str = field(default="", repr=False)  # signs an mqtt:// device's password

    def __post_init__(self) -> None:
        if not self.client_id:
            object.__setattr__(self, "client_id", stable_client_id(self.device_id))


def device_hello(transport: str, version: int) -> dict[str, Any]:
    """The firmware's hello (websocket_protocol.cc / mqtt_protocol.cc GetHelloMessage)."""
    return {**protocol.hello(transport), "version": version, "features": {"mcp": True}}


class _Inbox:
    """What the server sent, in arrival order, each stamped when it arrived, for the turn to read."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.queue: asyncio.Queue[tuple[int, object]] = asyncio.Queue()
        self.gone = ""  # why the connection ended; "": it has not

    def put(self, item: object) -> None:
        self.queue.put_nowait((self.clock.now_ns(), item))

    def end(self, reason: str) -> None:
        if not self.gone:
            self.gone = reason
            self.queue.put_nowait((self.clock.now_ns(), _END))

    async def get(self) -> tuple[int, object]:
        at, item = await self.queue.get()
        if item is _END:
            self.queue.put_nowait((at, item))  # every later call is told too
            raise ChannelGone(self.gone)
        return at, item

    def drain(self) -> list[object]:
        """Everything waiting, taken out; the end of the connection stays."""
        items: list[object] = []
        while not self.queue.empty():
            at, item = self.queue.get_nowait()
            if item is _END:
                self.queue.put_nowait((at, item))
                break
            items.append(item)
        return items


def _peek(text: str) -> dict[str, Any] | None:
    with contextlib.suppress(ProtocolError):
        return protocol.parse(text)
    return None


class WebSocketLink:
    transport = "websocket"

    def __init__(self, settings: LinkSettings, clock: Clock) -> None:
        self.settings = settings
        self.ws: ClientConnection | None = None
        self.session_id = ""
        self.proxy: LinkEmulator | None = None
        self.inbox = _Inbox(clock)
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
                self.ws = await connect(url, additional_headers=headers, compression=None, max_size=2**20)
                self._reader = asyncio.create_task(self._read(self.ws))
                await self.send_json(device_hello("websocket", s.protocol_version))
                answer = await _next_control(self)
        except (OSError, TimeoutError, ChannelGone, ProtocolError) as exc:
            await self.close()
            raise DeviceError(f"{s.url}: no session ({type(exc).__name__}: {exc})") from None
        except Exception as exc:  # the handshake refused: websockets.InvalidStatus names the HTTP status
            await self.close()
            raise DeviceError(f"{s.url}: refused ({exc})") from None
        self.session_id = await _hello_answer(self, answer)

    async def _read(self, ws: ClientConnection) -> None:
        try:
            while True:
                message = await ws.recv()
                if isinstance(message, str):
                    await self._text(message)
                else:
                    self.inbox.put(message)
        except ConnectionClosed as exc:
            self.inbox.end(f"the server closed the connection ({exc})")
        finally:
            self.inbox.end("the connection is closed")

    async def _text(self, text: str) -> None:
        message = _peek(text)
        if message is not None and message["type"] == "mcp" and self.on_mcp is not None:
            await self.on_mcp(message)
            return
        if message is not None and message["type"] == "hello" and not self.session_id:
            self.session_id = str(message.get("session_id", ""))  # MCP answers right after it need it
        self.inbox.put(text)

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

    async def recv_at(self) -> tuple[int, str | protocol.Packet]:
        """The next message and when it arrived."""
        at, item = await self.inbox.get()
        if isinstance(item, str):
            return at, item
        assert isinstance(item, bytes)
        return at, protocol.unpack(self.settings.protocol_version, item)

    async def recv(self) -> str | protocol.Packet:
        return (await self.recv_at())[1]

    def turn_started(self, drain: bool = True) -> int:
        """A new turn: what is still waiting belongs to none (``drain``); the audio frames thrown away."""
        return sum(1 for item in self.inbox.drain() if isinstance(item, bytes)) if drain else 0

    def packet_counts(self) -> PacketCounts | None:
        return None


class _Downlink(asyncio.DatagramProtocol):
    def __init__(self, link: MqttUdpLink) -> None:
        self.link = link

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        self.link.datagram(data)


class MqttUdpLink:
    """Control JSON over MQTT as a stock firmware speaks it to the xiaozhi MQTT gateway; audio over UDP.

    The device connects with the client id ``GROUP@@@MAC@@@UUID``, a base64 JSON username and the
    password signed with the gateway's key (``mqtt_auth``), publishes every message to one topic
    (``device-server``), and subscribes to nothing: the server pushes its messages to
    ``devices/p2p/MAC`` regardless. Where those come from depends on the URL:

    - ``mqtt://HOST:PORT[/PUBLISH_TOPIC][?group=GROUP]``: made here as the gateway's OTA makes them,
      the password signed with ``LinkSettings.mqtt_signature_key`` (none: an unsigned one, which a
      gateway without a key accepts);
    - ``http(s)://HOST:PORT/xiaozhi/ota/``: asked of that OTA endpoint as the firmware asks at boot,
      and taken from its answer's ``mqtt`` section (endpoint, client id, username, password, topic).
    """

    transport = "udp"

    def __init__(self, settings: LinkSettings, clock: Clock) -> None:
        self.settings = settings
        parts = urlsplit(settings.url)
        self.ota = parts.scheme in ("http", "https")
        where = f"MQTT as the OTA at {settings.url} says" if self.ota else f"MQTT {parts.hostname}:{parts.port or 1883}"
        self.label = f"xiaozhi server through {where} + UDP"
        if settings.profile is not None:
            self.label += f"; link profile {settings.profile.name}"
        self.config: MqttConfig | None = None
        self.proxy: LinkEmulator | None = None
        self.relay: UdpRelay | None = None
        self.session_id = ""
        self.inbox = _Inbox(clock)
        self.on_mcp: McpHandler | None = None
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
        return self.client is not None and not self._closed and not self.inbox.gone

    async def open(self) -> None:
        s = self.settings
        try:
            async with asyncio.timeout(s.connect_timeout_s):
                self.config = await self._ota_config() if self.ota else mqtt_url_config(s)
                host, port = self.config.host_port()
                tls = ssl.create_default_context() if port == 8883 else None  # the firmware's rule for a bare host
                if s.profile is not None:  # the control channel goes through the TCP link emulator
                    self.proxy = LinkEmulator(s.profile, host, port)
                    host, port = "127.0.0.1", await self.proxy.start()
                self.client = aiomqtt.Client(
                    host,
                    port,
                    identifier=self.config.client_id,
                    username=self.config.username or None,
                    password=self.config.password or None,
                    keepalive=self.config.keepalive_s,
                    tls_context=tls,
                )
                await self.client.__aenter__()
                self._reader = asyncio.create_task(self._read(self.client))  # no SUBSCRIBE: replies are pushed
                await self.send_json(device_hello("udp", MQTT_HELLO_VERSION))
                answer = await _next_control(self)
                self.session_id = await _hello_answer(self, answer)
                await self._open_udp(answer.get("udp"))
        except DeviceError:
            await self.close()
            raise
        except (OSError, TimeoutError, ChannelGone, ProtocolError, aiomqtt.MqttError, PacketError, ValueError) as exc:
            await self.close()
            raise DeviceError(f"{s.url}: no session ({type(exc).__name__}: {exc})") from None

    async def _ota_config(self) -> MqttConfig:
        """The ``mqtt`` section of the OTA's answer to this device (firmware ``ota.cc`` ``CheckVersion``)."""
        s = self.settings
        headers = {"Device-Id": s.device_id, "Client-Id": s.client_id, "Content-Type": "application/json"}
        body = {"application": {"name": "xiaozhi", "version": OTA_APP_VERSION}, "mac_address": s.device_id}
        async with (
            aiohttp.ClientSession() as http,
            http.post(s.url, json={**body, "uuid": s.client_id}, headers=headers) as response,
        ):
            if response.status != 200:
                raise DeviceError(f"{s.url}: the OTA answered HTTP {response.status}")
            answer = await response.json(content_type=None)
        section = answer.get("mqtt") if isinstance(answer, dict) else None
        if not isinstance(section, dict):
            told = answer.get("websocket", {}).get("url", "") if isinstance(answer, dict) else ""
            hint = f"; it offers WebSocket: --server {told}" if told else ""
            raise DeviceError(f"{s.url}: the OTA's answer has no mqtt section{hint}")
        return MqttConfig.of(section)

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

    async def _read(self, client: aiomqtt.Client) -> None:
        try:
            async for message in client.messages:  # whatever the server pushes, on whatever topic
                payload = message.payload
                if isinstance(payload, bytes | bytearray):
                    await self._text(bytes(payload).decode("utf-8", "replace"))
        except aiomqtt.MqttError:
            pass
        finally:
            self.inbox.end("the MQTT connection is gone")

    async def _text(self, text: str) -> None:
        message = _peek(text)
        kind = message["type"] if message is not None else ""
        if message is not None and kind == "mcp" and self.on_mcp is not None:
            await self.on_mcp(message)
            return
        if message is not None and kind == "hello" and not self.session_id:
            self.session_id = str(message.get("session_id", ""))  # MCP answers right after it need it
        self.inbox.put(text)
        if message is not None and kind == "goodbye" and self._ours(message):
            # mqtt_protocol.cc: the channel closes; the next question opens a new one with a new hello
            self.inbox.end(f"the server ended the session: {message.get('reason', 'goodbye')}")

    def _ours(self, goodbye: dict[str, Any]) -> bool:
        """The firmware closes only on a goodbye naming its session; one naming none is taken too."""
        named = goodbye.get("session_id")
        return named is None or named == self.session_id

    def datagram(self, data: bytes) -> None:
        if self.crypto is None:
            return
        try:
            packet = self.crypto.open(data)
        except PacketError:
            self.rejected += 1
            return
        if self.check.accept(packet.sequence):
            self.inbox.put(protocol.Packet(protocol.TYPE_OPUS, packet.payload, packet.timestamp))

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self.client is not None and self.session_id and not self.inbox.gone:
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
        if self.client is None or self.config is None or (self._closed and message.get("type") != "goodbye"):
            raise ChannelGone("not connected")
        try:
            await self.client.publish(self.config.publish_topic, protocol.dump(message), qos=0)
        except aiomqtt.MqttError as exc:
            raise ChannelGone(f"the MQTT connection is gone ({exc})") from None

    async def send_audio(self, opus: bytes, timestamp_ms: int) -> None:
        if self.udp is None or self.crypto is None or self._closed:
            raise ChannelGone("no audio channel")
        self.sequence += 1
        self.udp.sendto(self.crypto.seal(opus, timestamp_ms, self.sequence))

    async def recv_at(self) -> tuple[int, str | protocol.Packet]:
        """The next message and when it arrived."""
        at, item = await self.inbox.get()
        if isinstance(item, str):
            message = protocol.parse(item)
            if message.get("type") == "goodbye" and self._ours(message):
                raise ChannelGone(f"the server ended the session: {message.get('reason', 'goodbye')}")
        return at, item  # type: ignore[return-value]

    async def recv(self) -> str | protocol.Packet:
        return (await self.recv_at())[1]

    def turn_started(self, drain: bool = True) -> int:
        """A new turn: the sequence counts start again; what is still waiting belongs to none (``drain``),
        such as UDP frames that came after the last ``tts stop`` overtook them; the audio frames thrown away."""
        self.check = self.check.next_turn()
        return sum(1 for item in self.inbox.drain() if isinstance(item, protocol.Packet)) if drain else 0

    def packet_counts(self) -> PacketCounts | None:
        return PacketCounts(self.check.received, self.check.lost, self.check.late)


def mqtt_url_config(settings: LinkSettings) -> MqttConfig:
    """``mqtt://HOST:PORT[/PUBLISH_TOPIC][?group=GROUP]`` as the gateway's OTA would configure this device."""
    parts = urlsplit(settings.url)
    if not parts.hostname:
        raise ValueError(f"{settings.url!r}: mqtt://HOST:PORT is expected")
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    group = parse_qs(parts.query).get("group", [mqtt_auth.GROUP])[0]
    config = mqtt_auth.device_config(
        f"{host}:{parts.port or 1883}", settings.device_id, settings.client_id, settings.mqtt_signature_key, group
    )
    topic = parts.path.strip("/")
    return dataclasses.replace(config, publish_topic=topic) if topic else config


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


def open_link(settings: LinkSettings, clock: Clock) -> DeviceLink:
    """The link a server URL names: ws:// or wss:// (WebSocket), mqtt:// or an http(s):// OTA URL (MQTT + UDP)."""
    scheme = urlsplit(settings.url).scheme
    if scheme in ("ws", "wss"):
        return WebSocketLink(settings, clock)
    if scheme in ("mqtt", "http", "https"):
        return MqttUdpLink(settings, clock)
    raise ValueError(f"{settings.url!r}: a ws://, wss://, mqtt:// or http(s):// OTA URL is expected")
