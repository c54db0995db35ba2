"""Forged UDP datagrams against one MQTT + UDP session: each costs that packet, and the device's turn goes on.

A forger knows the session's ssrc (in clear in every header) but not its key, so its payload decrypts to
random bytes: 98.8 % of the time no Opus of the hello's shape (``NOT_OPUS`` here), else by chance a packet
that passes (``LUCKY``, sealed here with the session's key, the forger's best case). The attacks are the
outside review's: a sequence up to 4,096 ahead from the device's own address (spoofed), which silenced the
device for minutes; one datagram from another port after 5 s of device silence, which took its downlink.
"""

from __future__ import annotations

import asyncio

import pytest

from pipeline.clock import RealClock
from pipeline.run.device_side import Ask
from pipeline.transport.device.device import DeviceSettings, EmulatedDevice
from pipeline.transport.server.mqtt_channel import CONFIRM_PACKETS, JUMP_PACKETS
from pipeline.transport.wire.framing import Audio
from pipeline.transport.wire.udp import PacketCrypto
from tests.transport.server.test_mqtt_front import front_end
from tests.transport.server.test_websocket import SPEECH_END_MS, ScriptedTurns, clip, real
from tests.transport.server.udp_channel import channel

PEER, NEW_PORT, STRANGER = ("192.0.2.1", 5000), ("192.0.2.1", 5001), ("198.51.100.9", 6000)
SPEECH = b"\x58" + bytes(40)  # a 60 ms wideband SILK frame, mono: what the firmware's encoder sends
LUCKY = b"\x58\xde\xad"  # random bytes that happen to be such a frame: about one forgery in 86
NOT_OPUS = b"\xff" * 41  # what the rest decrypt to (here: 20 ms full-band stereo CELT, no device's encoder)
FRAME_NS = 60_000_000


class Session:
    """One session's channel, the device that streams into it, and a forger with its ssrc."""

    def __init__(self) -> None:
        self.channel, self.front, self.clock = channel()
        self.crypto = PacketCrypto(self.channel.crypto.key, self.channel.crypto.nonce)
        self.sequence = 0

    def speak(self, packets: int, address: tuple[str, int] = PEER) -> None:
        """The device's next packets, one each 60 ms, stamped with their sequence."""
        for _ in range(packets):
            self.sequence += 1
            self.clock.ns += FRAME_NS
            self.channel.datagram(self.crypto.seal(SPEECH, self.sequence, self.sequence), address)

    def forge(self, sequence: int, payload: bytes, address: tuple[str, int] = PEER) -> None:
        self.channel.datagram(self.crypto.seal(payload, 0, sequence), address)

    def played(self) -> list[int]:
        """The sequences of what reached the session, in order."""
        out = []
        while not self.channel.queue.empty():
            item = self.channel.queue.get_nowait()
            assert isinstance(item, Audio)
            out.append(item.timestamp_ms)
        return out

    def downlink(self) -> tuple[str, int]:
        asyncio.run(self.channel.send_audio(b"answer", 0))
        return self.front.sent[-1][1]


def test_a_forged_packet_far_ahead_from_the_devices_own_address_costs_that_packet() -> None:
    """The attack: the old check jumped to any sequence up to 4,096 ahead, and every packet the device
    sent after it was 'late' and never played (four minutes of its audio at 60 ms)."""
    s = Session()
    s.speak(10)
    assert s.played() == list(range(1, 11))
    s.forge(s.sequence + 4000, NOT_OPUS)
    for k in range(CONFIRM_PACKETS - 1):  # the forger's best case: all but one of the run it needs
        s.forge(s.sequence + 2000 + k, LUCKY)
    s.speak(20)
    assert s.played() == list(range(11, 31))  # every packet the device sent after the attack
    assert (s.channel.check.late, s.channel.check.stale, s.channel.check.lost) == (0, 0, 0)
    assert s.channel.dropped == {"not Opus of the shape the hello announced": 1}


def test_one_forged_datagram_from_another_port_after_silence_does_not_take_the_downlink() -> None:
    """The attack: after 5 s of device silence (between two questions), the old channel moved the answer's
    audio to the address of the next datagram that opened, and dropped the device's own from then on."""
    s = Session()
    s.speak(10)
    s.played()
    s.clock.ns += 5_500_000_000
    s.forge(s.sequence + 100, NOT_OPUS, STRANGER)
    for k in range(CONFIRM_PACKETS - 1):
        s.forge(s.sequence + 100 + k, LUCKY, STRANGER)
    assert s.downlink() == PEER
    s.speak(20)
    assert s.played() == list(range(11, 31)) and s.downlink() == PEER


def test_a_forged_packet_that_passes_by_chance_costs_at_most_the_jump_it_claims() -> None:
    """What no check without a key can refuse: a lucky forgery a few packets ahead. It is played (60 ms of
    noise) in place of the device's packet of that sequence, and the device's packets it skipped are late: at
    most ``JUMP_PACKETS`` of them."""
    s = Session()
    s.speak(10)
    s.played()
    s.forge(s.sequence + 1 + JUMP_PACKETS, LUCKY)
    s.speak(20)
    assert s.played() == [0, *range(12 + JUMP_PACKETS, 31)]
    assert (s.channel.check.late, s.channel.check.duplicate) == (JUMP_PACKETS, 1)


def test_a_forger_racing_the_devices_first_packets_does_not_become_its_peer() -> None:
    s = Session()
    for k in range(CONFIRM_PACKETS - 1):
        s.forge(1 + k, LUCKY, STRANGER)
    s.speak(CONFIRM_PACKETS)
    assert s.downlink() == PEER and s.played() == list(range(1, 1 + CONFIRM_PACKETS))
    assert s.channel.dropped == {"a new address or a jump ahead that too few packets confirmed": CONFIRM_PACKETS - 1}


def test_the_device_loses_nothing_when_its_address_changes_or_its_stream_resumes_after_an_outage() -> None:
    """What the confirmation costs the device: ``CONFIRM_PACKETS - 1`` packets of delay, each then played."""
    s = Session()
    s.speak(10)
    s.played()
    s.clock.ns += 5_500_000_000  # a NAT gave the device a new port while it was silent
    s.speak(CONFIRM_PACKETS - 1, NEW_PORT)
    assert s.played() == [] and s.downlink() == PEER
    s.speak(1, NEW_PORT)
    assert s.played() == list(range(11, 11 + CONFIRM_PACKETS)) and s.downlink() == NEW_PORT
    s.sequence += 100  # an outage: 100 packets lost on the way
    s.speak(CONFIRM_PACKETS + 2, NEW_PORT)
    start = 11 + CONFIRM_PACKETS + 100
    assert s.played() == list(range(start, start + CONFIRM_PACKETS + 2))
    assert s.channel.check.lost == 100 and s.channel.dropped == {}


def test_a_packet_reordered_while_the_first_ones_are_confirmed_is_the_only_one_lost() -> None:
    s = Session()
    for sequence in (1, 2, 4, 3, 5):
        s.channel.datagram(s.crypto.seal(SPEECH, sequence, sequence), PEER)
    assert s.played() == [1, 2, 4, 5]  # 3 came after 4: not played, as anywhere
    assert s.channel.dropped == {"behind a run of packets being confirmed": 1}


def test_a_lucky_forgery_from_the_devices_new_address_does_not_hold_up_its_move() -> None:
    """A forged packet far ahead, held for confirmation from the address the device moves to: the device's
    own packets, far behind it, break that run and make their own."""
    s = Session()
    s.speak(10)
    s.played()
    s.clock.ns += 5_500_000_000
    s.forge(s.sequence + 1000, LUCKY, NEW_PORT)
    s.speak(CONFIRM_PACKETS, NEW_PORT)
    assert s.played() == list(range(11, 11 + CONFIRM_PACKETS)) and s.downlink() == NEW_PORT


@pytest.mark.transport
def test_the_devices_next_turn_is_answered_after_a_forger_tried_to_take_its_downlink() -> None:
    """Over loopback: the emulator asks, falls silent past the rebind time, a forger sends from another port
    (its random bytes, then three lucky ones far ahead), and the emulator asks again."""
    turns = ScriptedTurns()

    async def scenario() -> tuple[bool, bool, int, int]:
        async with front_end(turns, signature_key="", udp_rebind_after_s=0.3) as lab:
            url = f"mqtt://127.0.0.1:{lab.mqtt_address[1]}"
            async with EmulatedDevice(DeviceSettings(url=url), RealClock()) as device:
                first = await device.turn(Ask(clip(), SPEECH_END_MS, "q1", 1, ""))
                (channel,) = lab.sessions.values()
                stolen: list[bytes] = []
                loop = asyncio.get_running_loop()
                forger, _ = await loop.create_datagram_endpoint(lambda: _Collect(stolen), remote_addr=lab.udp_address)
                await asyncio.sleep(0.5)
                session = PacketCrypto(channel.crypto.key, channel.crypto.nonce)
                ahead = 2000 - (channel.check.ahead(0) or 0)  # 2,000 past the next packet the device sends
                forger.sendto(session.seal(NOT_OPUS, 0, ahead))
                for k in range(CONFIRM_PACKETS - 1):
                    forger.sendto(session.seal(LUCKY, 0, ahead + 1 + k))
                second = await device.turn(Ask(clip(), SPEECH_END_MS, "q2", 1, ""))
                await asyncio.sleep(0.2)
                forger.close()
                heard = second.device.downlink_frames if second.device is not None else 0
                return first.ok, second.ok, heard, len(stolen)

    first_ok, second_ok, heard, stolen = real(scenario)
    assert first_ok and second_ok and heard > 0 and stolen == 0


class _Collect(asyncio.DatagramProtocol):
    def __init__(self, into: list[bytes]) -> None:
        self.into = into

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        self.into.append(data)
