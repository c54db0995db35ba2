"""One MQTT + UDP device session as a ``ServerChannel``: control over the device's MQTT connection, audio over UDP.

The datagram rules, stricter than the gateway's where the gateway lets a stranger in. AES-CTR gives the
packets no integrity and every header carries the session's ssrc in clear, so a forger can send a packet
with any sequence from any address; the rules make a forged packet cost that packet:

- a datagram must open as this session's packet (type, ssrc, length: ``wire.udp``), be Opus of the
  shape the hello announced (``wire.opus_shape``: a forger's random payload passes about 1.2 % of the
  time), and be plausible in sequence (``SequenceCheck``: a jump of more than ``MAX_GAP`` moves nothing);
- a packet that would name or move the session's peer (the address the answer's audio goes to), or
  skip more than ``JUMP_PACKETS`` ahead, moves nothing until ``CONFIRM_PACKETS`` in a row from its
  address have all passed: they are held, then played in order. One forged packet with a sequence
  4,096 ahead silenced the device for minutes, and one from another port took its downlink;
- a packet from another address than the peer is dropped and counted, unless the peer has been silent
  for ``udp_rebind_after_s`` (a NAT that gave the device a new port). The gateway moves the peer on
  every packet and plays any sequence not behind the newest (app.js onUdpMessage);
- what waits for the session is bounded (``queue_limit``): past it, audio is dropped and counted,
  and the MQTT connection's reader waits, so a device that floods holds no more memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Protocol

from pipeline.clock import Clock
from pipeline.tracing.timeline import PacketCounts
from pipeline.transport.server.flood import FloodGuard
from pipeline.transport.wire.failures import ChannelGone
from pipeline.transport.wire.framing import Audio
from pipeline.transport.wire.inbound import Inbound
from pipeline.transport.wire.messages import Goodbye, Hello, Message, UdpParams
from pipeline.transport.wire.opus_shape import OpusShape
from pipeline.transport.wire.udp import MAX_GAP, AudioPacket, PacketCrypto, PacketError, SequenceCheck

HELLO_VERSION = 3  # the gateway closes on any other (app.js handlePublish)
ENCRYPTION = "aes-128-ctr"
# Four packets in a row that pass the Opus check come from a forger about once in 50 million tries,
# where one alone comes once in 86. The device pays three packets of delay (180 ms at 60 ms), nothing
# lost, when its address changes, when its first packets name it, or when its stream resumes after a gap.
CONFIRM_PACKETS = 4
# The longest run of lost packets taken on one packet's word: a forged packet that passes by chance
# costs the device at most this many of its own (half a second at 60 ms); a longer run is an outage.
JUMP_PACKETS = 8
_END = object()
Address = tuple[str, int]


class _Confirming:
    """Packets from one address that would move the session, held until ``CONFIRM_PACKETS`` came in a row."""

    def __init__(self, drop: Callable[[str, int], None]) -> None:
        self.drop = drop
        self.address: Address | None = None
        self.held: list[AudioPacket] = []

    def offer(self, packet: AudioPacket, address: Address) -> list[AudioPacket]:
        """The packets this one confirms: none yet, or all those held, in order."""
        run = self.held if address == self.address else []
        step = packet.sequence - run[-1].sequence if run else JUMP_PACKETS + 1  # none: a new run
        if 0 < step <= JUMP_PACKETS:
            self.held.append(packet)
        elif -JUMP_PACKETS <= step <= 0:
            # reordered or repeated within the run: not played, as no packet behind the newest is; the run goes
            # on (a forger's packet a little ahead of the device's costs it at most that much, as anywhere)
            self.drop("behind a run of packets being confirmed", 1)
            return []
        else:  # the run broke: what its packets claimed is not believed
            if self.held:
                self.drop("a new address or a jump ahead that too few packets confirmed", len(self.held))
            self.address, self.held = address, [packet]
        if len(self.held) < CONFIRM_PACKETS:
            return []
        confirmed, self.held = self.held, []
        return confirmed


class MqttFrontDoor(Protocol):
    """What a session's channel needs of the MQTT front end: where devices send audio, and its UDP socket."""

    public_host: str
    rejected_datagrams: int

    @property
    def udp_port(self) -> int: ...

    def sendto(self, data: bytes, address: tuple[str, int]) -> None: ...

    def forget(self, channel: MqttUdpChannel) -> None: ...


class MqttUdpChannel:
    """One device's session: its MQTT connection's messages and its UDP packets, as a session's channel."""

    transport = "udp"

    def __init__(
        self,
        front: MqttFrontDoor,
        publish: Callable[[Message], Awaitable[None]],
        device_id: str,
        guard: FloodGuard,
        clock: Clock,
        rebind_after_s: float = 5.0,
        queue_limit: int = 256,
    ) -> None:
        self.front, self.publish, self.device_id, self.guard, self.clock = front, publish, device_id, guard, clock
        self.rebind_after_ns = int(rebind_after_s * 1e9)
        self.queue: asyncio.Queue[object] = asyncio.Queue(queue_limit)
        # the nonce is a header template: type 0x01, flags, length, a random ssrc, timestamp and sequence
        self.crypto = PacketCrypto(os.urandom(16), bytes([0x01, 0, 0, 0]) + os.urandom(4) + bytes(8))
        self.peer: Address | None = None
        self.peer_heard_ns = 0
        self.sequence = 0
        self.check = SequenceCheck()
        self.shape = OpusShape(60)  # until the hello's answer says the frame duration
        self.confirming = _Confirming(self._drop)
        self.closed = False
        self.dropped: dict[str, int] = {}  # datagrams that moved nothing, by why
        # the id the device was told in our hello; before that "", which is what firmware waiting
        # for its hello holds (mqtt_protocol.cc OpenAudioChannel), so it acts on that goodbye too
        self.session_id = ""

    # --- fed by the connection and the UDP socket ------------------------------

    async def control(self, message: Inbound) -> None:
        """A control message from the MQTT connection; its reader waits while the session is behind."""
        if not self.closed:
            await self.queue.put(message)

    def datagram(self, data: bytes, address: Address) -> None:
        try:
            packet = self.crypto.open(data)
        except PacketError:
            self.front.rejected_datagrams += 1
            return
        now = self.clock.now_ns()
        moves_peer = address != self.peer
        if moves_peer and self.peer is not None and now - self.peer_heard_ns < self.rebind_after_ns:
            self._drop("from another address than the session's peer")
            return
        if not self.shape.fits(packet.payload):
            self._drop("not Opus of the shape the hello announced")
            return
        ahead = self.check.ahead(packet.sequence)
        if ahead is not None and ahead > MAX_GAP:
            self.check.accept(packet.sequence)  # counted implausible: it moves nothing, confirmed or not
            return
        if not moves_peer and ahead is not None and ahead <= JUMP_PACKETS:
            self._play(packet, now)
            return
        confirmed = self.confirming.offer(packet, address)
        if confirmed:
            self.peer = address
            for held in confirmed:
                self._play(held, now)

    def _play(self, packet: AudioPacket, now: int) -> None:
        if not self.check.accept(packet.sequence):
            return  # late, duplicate or implausible: counted by the check
        self.peer_heard_ns = now
        if self.queue.full():
            self._drop("the session is behind (queue full)")
            return
        self.queue.put_nowait(Audio(packet.payload, packet.timestamp))

    def _drop(self, why: str, count: int = 1) -> None:
        self.dropped[why] = self.dropped.get(why, 0) + count

    # --- the session's side ---------------------------------------------------

    async def incoming(self) -> AsyncIterator[Inbound]:
        while True:
            item = await self.queue.get()
            if item is _END:
                return
            yield item  # type: ignore[misc]

    async def send(self, message: Message) -> None:
        if self.closed:
            raise ChannelGone(f"session of {self.device_id} is closed")
        await self.publish(message)

    async def send_audio(self, opus: bytes, timestamp_ms: int) -> None:
        if self.closed:
            raise ChannelGone(f"session of {self.device_id} is closed")
        if self.peer is None:  # the device has not sent a packet yet: it cannot be reached
            return
        self.sequence += 1
        self.front.sendto(self.crypto.seal(opus, timestamp_ms, self.sequence), self.peer)

    async def close(self, code: int, reason: str) -> None:
        if not self.closed:
            with contextlib.suppress(ChannelGone):
                await self.publish(Goodbye(session_id=self.session_id, code=code, reason=reason))
        self.end()

    def end(self) -> None:
        """The session is over: its reader stops once it has what came before."""
        if not self.closed:
            self.closed = True
            while self.queue.full():  # the end must fit: what the session has not read is of no use now
                self.queue.get_nowait()
            self.queue.put_nowait(_END)
            self.front.forget(self)

    def answer_hello(self, answer: Hello) -> Hello:
        self.session_id = answer.session_id or ""
        if answer.audio_params is not None:
            self.shape = OpusShape(answer.audio_params.frame_duration)
        udp = UdpParams(
            server=self.front.public_host,
            port=self.front.udp_port,
            encryption=ENCRYPTION,
            key=self.crypto.key.hex(),
            nonce=self.crypto.nonce.hex(),
        )
        return Hello(
            version=HELLO_VERSION,
            transport=answer.transport,
            audio_params=answer.audio_params,
            session_id=answer.session_id,
            udp=udp,
        )

    def turn_started(self) -> None:
        self.check = self.check.next_turn()

    def packet_counts(self) -> PacketCounts | None:
        return PacketCounts(self.check.received, self.check.lost, self.check.late)
