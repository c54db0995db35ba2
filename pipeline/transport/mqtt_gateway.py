"""The xiaozhi MQTT + UDP transport's server end: control JSON through an MQTT broker, audio over UDP.

A device publishes its messages to ``PREFIX/up/DEVICE_ID`` and reads ours on
``PREFIX/down/DEVICE_ID``. Its hello (``transport: udp``) opens a session; our hello answers
with the UDP address and a fresh AES-128 key and nonce for it, whose ssrc routes the
session's datagrams; the hello names the UDP server by ``udp_public_host``, the address
devices reach this machine at, never a wildcard bind address. The device's address is
learned from its first packet that opens with the session's key. A session ends with
``goodbye`` (either way), ours always naming the session, since firmware ignores any other;
what a device does wrong ends only its session, told in a goodbye with the close code and
reason. A ``hello`` from a device whose session is open ends that session and opens a new
one, as the xiaozhi MQTT gateway does: firmware says hello again, without a goodbye, when
its channel timed out.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import aiomqtt

from pipeline.clock import Clock
from pipeline.tracing.timeline import PacketCounts
from pipeline.transport import protocol
from pipeline.transport.protocol import ChannelGone, ProtocolError
from pipeline.transport.session import DeviceSession, SessionSettings, Turns
from pipeline.transport.udp import PacketCrypto, PacketError, SequenceCheck, ssrc_of

_END = object()


@dataclass(frozen=True, slots=True)
class MqttGatewaySettings:
    broker_host: str = "127.0.0.1"
    broker_port: int = 1883
    prefix: str = "xiaozhi"
    udp_host: str = "127.0.0.1"  # where the UDP socket binds
    udp_port: int = 0  # 0: any free port
    udp_public_host: str = ""  # what the hello tells devices; "": udp_host, which must then not be 0.0.0.0 or ::
    max_message_bytes: int = 16 * 1024
    session: SessionSettings = field(default_factory=SessionSettings)


class MqttUdpChannel:
    """One device's session: its MQTT topics and its UDP packets, as a session's channel."""

    transport = "udp"

    def __init__(self, gateway: MqttGateway, device_id: str) -> None:
        self.gateway, self.device_id = gateway, device_id
        self.queue: asyncio.Queue[object] = asyncio.Queue()
        # the nonce is a header template: type 0x01, flags, length, a random ssrc, timestamp and sequence
        self.crypto = PacketCrypto(os.urandom(16), bytes([0x01, 0, 0, 0]) + os.urandom(4) + bytes(8))
        self.address: tuple[str, int] | None = None
        self.sequence = 0
        self.check = SequenceCheck()
        self.closed = False
        # the id the device was told in our hello; before that "", which is what firmware waiting
        # for its hello holds (mqtt_protocol.cc OpenAudioChannel), so it acts on that goodbye too
        self.session_id = ""

    # --- fed by the gateway ---------------------------------------------------

    def control(self, text: str) -> None:
        self.queue.put_nowait(text)

    def datagram(self, data: bytes, address: tuple[str, int]) -> None:
        try:
            packet = self.crypto.open(data)
        except PacketError:
            self.gateway.rejected_datagrams += 1
            return
        self.address = address
        if self.check.accept(packet.sequence):
            self.queue.put_nowait(protocol.Packet(protocol.TYPE_OPUS, packet.payload, packet.timestamp))

    # --- the session's side ---------------------------------------------------

    async def incoming(self) -> AsyncIterator[str | protocol.Packet]:
        while True:
            item = await self.queue.get()
            if item is _END:
                return
            yield item  # type: ignore[misc]

    async def send_json(self, message: dict[str, Any]) -> None:
        if self.closed:
            raise ChannelGone(f"session of {self.device_id} is closed")
        await self.gateway.publish(self.device_id, message)

    async def send_audio(self, opus: bytes, timestamp_ms: int) -> None:
        if self.closed:
            raise ChannelGone(f"session of {self.device_id} is closed")
        if self.address is None:  # the device has not sent a packet yet: it cannot be reached
            return
        self.sequence += 1
        self.gateway.sendto(self.crypto.seal(opus, timestamp_ms, self.sequence), self.address)

    async def close(self, code: int, reason: str) -> None:
        if not self.closed:
            with contextlib.suppress(aiomqtt.MqttError):
                goodbye = {"type": "goodbye", "session_id": self.session_id, "code": code, "reason": reason}
                await self.gateway.publish(self.device_id, goodbye)
        self.end()

    def end(self) -> None:
        if not self.closed:
            self.closed = True
            self.queue.put_nowait(_END)
            self.gateway.forget(self)

    def hello_extra(self, session_id: str) -> dict[str, Any]:
        self.session_id = session_id
        host, port = self.gateway.public_host, self.gateway.udp_address[1]
        return {"udp": {"server": host, "port": port, "key": self.crypto.key.hex(), "nonce": self.crypto.nonce.hex()}}

    def turn_started(self) -> None:
        self.check = self.check.next_turn()

    def packet_counts(self) -> PacketCounts | None:
        return PacketCounts(self.check.received, self.check.lost, self.check.late)


class _Datagrams(asyncio.DatagramProtocol):
    def __init__(self, gateway: MqttGateway) -> None:
        self.gateway = gateway

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        self.gateway.route(data, addr)


class MqttGateway:
    """The broker client, the UDP socket, and the sessions they feed; ``async with`` runs it."""

    def __init__(self, settings: MqttGatewaySettings, turns: Turns, clock: Clock) -> None:
        self.settings, self.turns, self.clock = settings, turns, clock
        self.sessions: dict[str, MqttUdpChannel] = {}
        self.by_ssrc: dict[int, MqttUdpChannel] = {}
        self.tasks: set[asyncio.Task[None]] = set()
        self.rejected_datagrams = 0
        self.udp_address = (settings.udp_host, settings.udp_port)
        self.public_host = public_udp_host(settings)
        self._client: aiomqtt.Client | None = None
        self._udp: asyncio.DatagramTransport | None = None
        self._reader: asyncio.Task[None] | None = None

    async def __aenter__(self) -> MqttGateway:
        s = self.settings
        loop = asyncio.get_running_loop()
        transport, _ = await loop.create_datagram_endpoint(
            lambda: _Datagrams(self), local_addr=(s.udp_host, s.udp_port)
        )
        self._udp = transport
        self.udp_address = transport.get_extra_info("sockname")[:2]
        self._client = aiomqtt.Client(s.broker_host, s.broker_port, identifier=f"xiaozhi-lab-{os.getpid()}")
        try:
            await self._client.__aenter__()
            await self._client.subscribe(f"{s.prefix}/up/+")
        except BaseException:
            transport.close()
            raise
        self._reader = asyncio.create_task(self._read())
        return self

    async def __aexit__(self, *exc: object) -> None:
        for channel in list(self.sessions.values()):
            channel.end()
        if self.tasks:
            await asyncio.gather(*self.tasks, return_exceptions=True)
        if self._reader is not None:
            self._reader.cancel()
            await asyncio.gather(self._reader, return_exceptions=True)
        if self._client is not None:
            await self._client.__aexit__(None, None, None)
        if self._udp is not None:
            self._udp.close()

    async def _read(self) -> None:
        assert self._client is not None
        async for message in self._client.messages:
            device_id = str(message.topic).rsplit("/", 1)[-1]
            payload = message.payload
            if not isinstance(payload, bytes | bytearray) or len(payload) > self.settings.max_message_bytes:
                continue  # an oversized or non-binary payload is nobody's message
            try:
                text = bytes(payload).decode("utf-8")
            except UnicodeDecodeError:
                text = "\ufffd"  # the session answers it as malformed JSON
            channel = self.sessions.get(device_id)
            if channel is not None and not channel.closed and _is_hello(text):
                # the device gave up on that session: it is told nothing (firmware cleared its session id
                # before this hello, so it would ignore a goodbye naming the old one), and the new session
                # gets a fresh key and sequence check, as the gateway gives each hello; the firmware's
                # packet sequence starts again at each server hello (mqtt_protocol.cc ParseServerHello)
                channel.end()
                channel = None
            if channel is None or channel.closed:
                channel = self._open(device_id)
            channel.control(text)

    def _open(self, device_id: str) -> MqttUdpChannel:
        channel = MqttUdpChannel(self, device_id)
        self.sessions[device_id] = channel
        self.by_ssrc[channel.crypto.ssrc] = channel
        task = asyncio.create_task(self._serve(channel))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return channel

    async def _serve(self, channel: MqttUdpChannel) -> None:
        try:
            await DeviceSession(channel, self.settings.session, self.turns, self.clock).serve()
        finally:
            channel.end()

    def forget(self, channel: MqttUdpChannel) -> None:
        if self.sessions.get(channel.device_id) is channel:
            del self.sessions[channel.device_id]
        self.by_ssrc.pop(channel.crypto.ssrc, None)

    def route(self, data: bytes, address: tuple[str, int]) -> None:
        ssrc = ssrc_of(data)
        channel = self.by_ssrc.get(ssrc) if ssrc is not None else None
        if channel is None:
            self.rejected_datagrams += 1
            return
        channel.datagram(data, address)

    async def publish(self, device_id: str, message: dict[str, Any]) -> None:
        if self._client is None:
            raise ChannelGone("the gateway is not connected to its broker")
        await self._client.publish(f"{self.settings.prefix}/down/{device_id}", protocol.dump(message))

    def sendto(self, data: bytes, address: tuple[str, int]) -> None:
        if self._udp is not None:
            self._udp.sendto(data, address)


def public_udp_host(settings: MqttGatewaySettings) -> str:
    """The UDP server's address as devices are told it; a wildcard bind address is no address to send to."""
    host = settings.udp_public_host or settings.udp_host
    if is_wildcard(host):
        raise ValueError(
            f"the UDP socket binds {settings.udp_host}, which devices cannot send to: "
            "give the address devices reach this machine at (pipeline.serve --public-host HOST)"
        )
    return host


def is_wildcard(host: str) -> bool:
    """0.0.0.0, :: and their spellings: every address of this machine, none a device can reach it at."""
    try:
        return ipaddress.ip_address(host).is_unspecified
    except ValueError:
        return host == ""  # a name: the resolver's business


def _is_hello(text: str) -> bool:
    try:
        return bool(protocol.parse(text)["type"] == "hello")
    except ProtocolError:
        return False
