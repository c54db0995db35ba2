"""MQTT + UDP: the packet format and its sequence checks, and the emulator's turns through the lab's MQTT
front end with AES-CTR audio over loopback UDP, lost and reordered packets counted per turn."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import pytest

from pipeline.clock import RealClock
from pipeline.endpoints.link.profiles import NetProfile
from pipeline.run.device_side import Ask
from pipeline.tracing.timeline import TurnTimeline
from pipeline.transport.device.device import DeviceSettings, EmulatedDevice
from pipeline.transport.device.mqtt_udp_link import MqttUdpLink
from pipeline.transport.server.mqtt_front import MqttFrontEnd, MqttFrontSettings
from pipeline.transport.wire import mqtt_identity
from pipeline.transport.wire.udp import HEADER, PacketCrypto, PacketError, SequenceCheck
from tests.scenario import run_virtual
from tests.transport.server.test_mqtt_front import HELLO, RawDevice
from tests.transport.server.test_websocket import SPEECH_END_MS, ScriptedTurns, clip, device_rows, quick_stages, real

KEY, NONCE = bytes(range(16)), bytes([1, 0, 0, 0, 0xDE, 0xAD, 0xBE, 0xEF]) + bytes(8)


def test_a_packet_is_the_documented_header_then_the_encrypted_payload() -> None:
    crypto = PacketCrypto(KEY, NONCE)
    packet = crypto.seal(b"opus frame", timestamp=120, sequence=7)
    assert packet[:16] == struct.pack(">BBHIII", 1, 0, 10, 0xDEADBEEF, 120, 7)
    assert packet[16:] != b"opus frame"  # sealed
    opened = crypto.open(packet)
    assert (opened.payload, opened.timestamp, opened.sequence, opened.ssrc) == (b"opus frame", 120, 7, 0xDEADBEEF)
    # the header is the counter block: the same payload at another sequence seals differently
    assert crypto.seal(b"opus frame", 120, 8)[16:] != packet[16:]


@pytest.mark.parametrize(
    ("datagram", "problem"),
    [
        (b"\x01\x00", "shorter than the 16-byte header"),
        (HEADER.pack(2, 0, 0, 0xDEADBEEF, 0, 1), "not audio"),
        (HEADER.pack(1, 0, 0, 0x12345678, 0, 1), "not this session's"),
        (HEADER.pack(1, 0, 9, 0xDEADBEEF, 0, 1) + b"ab", "header says 9 payload bytes"),
    ],
)
def test_a_datagram_that_is_not_this_sessions_audio_is_named(datagram: bytes, problem: str) -> None:
    with pytest.raises(PacketError, match=problem):
        PacketCrypto(KEY, NONCE).open(datagram)


def test_sequence_checks_count_lost_late_and_duplicate_packets() -> None:
    check = SequenceCheck()
    played = [check.accept(s) for s in (1, 2, 4, 3, 5, 5, 8)]
    assert played == [True, True, True, False, True, False, True]
    assert (check.received, check.lost, check.late, check.duplicate) == (5, 2, 1, 1)  # 6 and 7 never came
    after = check.next_turn()
    assert (after.received, after.lost) == (0, 0) and after.accept(9) and not after.accept(8)


class Lossy:
    """A UDP transport that drops and swaps the device's packets by sequence number."""

    def __init__(self, inner: Any, drop: set[int], swap: int) -> None:
        self.inner, self.drop, self.swap, self.held = inner, drop, swap, b""

    def sendto(self, data: bytes, *args: Any) -> None:
        sequence = struct.unpack_from(">I", data, 12)[0]
        if sequence in self.drop:
            return
        if sequence == self.swap:  # sent after the next one
            self.held = data
            return
        self.inner.sendto(data, *args)
        if self.held and sequence == self.swap + 1:
            self.inner.sendto(self.held, *args)
            self.held = b""

    def close(self) -> None:
        self.inner.close()


SIGNATURE_KEY = "Lab-signature-Key9"


def _turn_over_mqtt(lossy: bool) -> tuple[TurnTimeline, ScriptedTurns]:
    turns = ScriptedTurns()

    async def scenario() -> TurnTimeline:
        settings = MqttFrontSettings(port=0, signature_key=SIGNATURE_KEY)
        async with MqttFrontEnd(settings, turns, RealClock()) as lab:
            url = f"mqtt://127.0.0.1:{lab.mqtt_address[1]}"
            device = EmulatedDevice(DeviceSettings(url=url, mqtt_signature_key=SIGNATURE_KEY), RealClock())
            async with device:
                if lossy:
                    link = device.link
                    assert isinstance(link, MqttUdpLink) and link.udp is not None
                    link.udp = Lossy(link.udp, drop={5, 6}, swap=10)  # type: ignore[assignment]
                timeline = await device.turn(Ask(clip(), SPEECH_END_MS, "q1", 1, ""))
            await turns.settled(1)
        return timeline

    return real(scenario), turns


@pytest.mark.transport
def test_a_turn_through_the_front_end_and_udp_hears_and_says_what_the_in_process_turn_does(tmp_path: Path) -> None:
    timeline, turns = _turn_over_mqtt(lossy=False)
    in_process = run_virtual(quick_stages(), clip())
    assert timeline.ok, timeline.error_message
    assert timeline.device is not None and timeline.device.transport == "udp"
    assert timeline.device.transcript == in_process.asr.text
    assert [text for _, text in timeline.device.sentence_starts] == [s.text for s in in_process.sentences]
    assert timeline.packets is not None and timeline.packets.received == timeline.device.downlink_frames
    assert (timeline.packets.lost, timeline.packets.late) == (0, 0)
    _, server = turns.done[0]
    # the turn's packets: those up to its end-point (600 ms after the speech); what follows is the next listener's
    assert server.ok and server.packets is not None and server.packets.received >= 3 + 10 + 600 // 60
    row = device_rows(timeline, tmp_path)[0]
    assert row.transport == "udp" and row.packets_lost == 0
    assert row.first_audible_ms is not None and row.first_audible_ms > 0


@pytest.mark.transport
def test_lost_and_reordered_uplink_packets_are_counted_on_the_servers_turn() -> None:
    timeline, turns = _turn_over_mqtt(lossy=True)
    _, server = turns.done[0]
    assert server.packets is not None
    assert (server.packets.lost, server.packets.late) == (2, 1)  # 5 and 6 dropped; 10 came after 11
    assert server.ok and timeline.ok  # a few lost frames of speech do not stop a turn


@pytest.mark.transport
def test_a_device_that_breaks_the_protocol_is_told_goodbye_and_others_are_served() -> None:
    turns = ScriptedTurns()

    async def scenario() -> tuple[dict[str, Any], TurnTimeline]:
        async with MqttFrontEnd(MqttFrontSettings(port=0), turns, RealClock()) as lab:
            rogue = await RawDevice.to(lab)
            try:
                await rogue.connect("GID_test@@@02_00_00_00_00_0f@@@rogue", mqtt_identity.username({}), password="")
                await rogue.publish(HELLO)
                await rogue.message()
                for _ in range(300):  # at once: past the control bucket's burst of 200
                    await rogue.publish({"type": "iot", "descriptors": []})
                url = f"mqtt://127.0.0.1:{lab.mqtt_address[1]}"
                async with EmulatedDevice(DeviceSettings(url=url, device_id="02:00:00:00:00:02"), RealClock()) as good:
                    timeline = await good.turn(Ask(clip(), SPEECH_END_MS, "q", 1, ""))
                _, told = await rogue.message()
            finally:
                rogue.close()
        return told, timeline

    goodbye, timeline = real(scenario)
    assert goodbye["type"] == "goodbye" and goodbye["code"] == 1008 and "control messages" in goodbye["reason"]
    assert goodbye["session_id"] and timeline.ok


@pytest.mark.transport
def test_a_lossy_link_profile_between_device_and_server_loses_udp_packets_both_ways() -> None:
    # 20 % loss over ~60-80 packets each way: no loss at all would have odds below 1e-5
    profile = NetProfile("test-lossy", rtt_ms=10.0, loss=0.2, handshake=False, seed=5)
    turns = ScriptedTurns()

    async def scenario() -> TurnTimeline:
        async with MqttFrontEnd(MqttFrontSettings(port=0), turns, RealClock()) as lab:
            settings = DeviceSettings(url=f"mqtt://127.0.0.1:{lab.mqtt_address[1]}", profile=profile)
            async with EmulatedDevice(settings, RealClock()) as device:
                timeline = await device.turn(Ask(clip(), SPEECH_END_MS, "q", 1, ""))
            await turns.settled(1)
        return timeline

    timeline = real(scenario)
    _, server = turns.done[0]
    assert server.packets is not None and server.packets.lost > 0  # uplink datagrams the relay dropped
    assert timeline.packets is not None and timeline.packets.lost > 0  # and downlink ones
    assert timeline.device is not None and timeline.device.transcript  # the turn itself went on
