"""Attacks on the lab's front doors, each replayed as its test says, and what each costs the server now.

The attacks come from the security review of the front ends (docs/reference/xiaozhi-protocol.md): a
forged UDP datagram that froze the server, one that took a session's downlink, idle and unbounded
connections, clients that stop reading, a rate limit refilled by saying hello again, credentials any web
page could read (tests/transport/server/test_ota_endpoint.py), nesting that raised past the handlers, a plain
listener on the TLS port, and a flood guard that cut honest clients after a stall.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import tracemalloc
from typing import Any

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from pipeline import serve
from pipeline.clock import RealClock, VirtualClock
from pipeline.transport.server.flood import Flooded, FloodGuard
from pipeline.transport.server.mqtt_channel import CONFIRM_PACKETS
from pipeline.transport.server.mqtt_connection import MqttConnection
from pipeline.transport.server.mqtt_front import MqttFrontSettings
from pipeline.transport.server.server_settings import DoorSettings, FloodSettings, SessionSettings
from pipeline.transport.server.websocket import WebSocketChannel, WebSocketSettings
from pipeline.transport.wire import mqtt_identity
from pipeline.transport.wire import mqtt_packets as mp
from pipeline.transport.wire.failures import ChannelGone
from pipeline.transport.wire.framing import Audio
from pipeline.transport.wire.messages import Tts
from pipeline.transport.wire.udp import MAX_GAP, WINDOW, PacketCrypto, SequenceCheck
from tests.scenario import SILENCE, TONE
from tests.server_harness import FakeChannel, Turns, say_hello, session, virtual
from tests.transport.server import udp_channel
from tests.transport.server.test_mqtt_front import HELLO, front_end, raw
from tests.transport.server.test_websocket import ScriptedTurns, gateway, real
from tests.wire_helpers import dump, hello, parse

KEY, NONCE = bytes(range(16)), bytes([1, 0, 0, 0, 0, 0, 0, 42]) + bytes(8)
OPUS_60MS = b"\x58\x00\x01"  # a 60 ms wideband SILK frame, mono: what the firmware's encoder sends


# --- UDP: one datagram ---------------------------------------------------------------------------


@pytest.mark.parametrize("forged", [2_000_000, 0xFFFFFFFF])
def test_a_datagram_claiming_a_huge_sequence_costs_no_memory_and_moves_nothing(forged: int) -> None:
    """Attack: one datagram with the session's ssrc (sent in clear) and sequence 0xFFFFFFFF. The old check put
    the whole gap in a set: four billion integers, minutes of a blocked loop (a 2-million gap: 0.17 s, 100 MB)."""
    check = SequenceCheck()
    assert all(check.accept(s) for s in (1, 2, 3))
    tracemalloc.start()
    try:
        assert not check.accept(forged)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 * 1024
    assert (check.implausible, check.lost) == (1, 0)
    assert check.accept(4) and check.accept(6)  # the device's own packets play on
    assert (check.received, check.lost) == (5, 1)


def test_the_sequence_checks_memory_is_a_window_whatever_arrives() -> None:
    check = SequenceCheck()
    for sequence in (1, MAX_GAP, 2 * MAX_GAP, 3 * MAX_GAP, 5, 3 * MAX_GAP - 3):
        check.accept(sequence)
    assert check._missing.bit_length() <= WINDOW
    assert (check.late, check.stale) == (1, 1)  # 3*MAX_GAP-3 was counted lost and came late; 5 is long gone


def test_a_datagram_from_anyone_but_the_sessions_peer_does_not_take_its_downlink() -> None:
    """Attack: a forged datagram (the ssrc is in every header, in clear) from another address. The old front end
    moved the session's downlink to whoever sent the last datagram that opened. A peer silent for the rebind
    time may move (a NAT that gave the device a new port), as the gateway's devices need, once its new
    address has sent ``CONFIRM_PACKETS`` in a row (tests/transport/server/test_mqtt_channel_forgery.py)."""
    channel, front, clock = udp_channel.channel()
    device = PacketCrypto(channel.crypto.key, channel.crypto.nonce)
    peer, stranger = ("192.0.2.1", 5000), ("198.51.100.9", 6000)

    async def scenario() -> list[tuple[str, int]]:
        for sequence in range(1, CONFIRM_PACKETS + 1):  # the device's first packets name it
            channel.datagram(device.seal(OPUS_60MS, 0, sequence), peer)
        clock.ns += 1_000_000_000
        channel.datagram(device.seal(OPUS_60MS, 60, 5), stranger)  # forged: moves nothing
        channel.datagram(device.seal(OPUS_60MS, 60, 0xFFFFFFFF), stranger)
        await channel.send_audio(b"answer", 0)
        clock.ns += 6_000_000_000  # the peer silent past the rebind time: a new address is the device's now
        for sequence in range(5, 5 + CONFIRM_PACKETS):
            channel.datagram(device.seal(OPUS_60MS, 120, sequence), ("192.0.2.1", 5001))
        await channel.send_audio(b"answer", 60)
        return [address for _, address in front.sent]

    assert real(scenario) == [peer, ("192.0.2.1", 5001)]
    assert channel.dropped == {"from another address than the session's peer": 2}
    assert channel.check.received == 2 * CONFIRM_PACKETS and channel.check.implausible == 0


@pytest.mark.transport
def test_a_forged_datagram_mid_turn_leaves_the_device_its_turn_and_its_answer() -> None:
    """The same attack against the MQTT front end over loopback, while the emulator asks a question."""
    from pipeline.run.device_side import Ask
    from pipeline.transport.device.device import DeviceSettings, EmulatedDevice
    from tests.transport.server.test_websocket import SPEECH_END_MS, clip

    turns = ScriptedTurns()

    async def scenario() -> tuple[bool, int, int]:
        async with front_end(turns, signature_key="") as lab:
            url = f"mqtt://127.0.0.1:{lab.mqtt_address[1]}"
            async with EmulatedDevice(DeviceSettings(url=url), RealClock()) as device:
                (channel,) = lab.sessions.values()
                loop = asyncio.get_running_loop()
                forger, _ = await loop.create_datagram_endpoint(asyncio.DatagramProtocol, remote_addr=lab.udp_address)
                crypto = PacketCrypto(bytes(16), channel.crypto.nonce)  # the ssrc is all it knows

                async def forge() -> None:
                    await asyncio.sleep(0.4)
                    for sequence in (0xFFFFFFFF, 7, 8):
                        forger.sendto(crypto.seal(b"junk", 0, sequence))

                forging = asyncio.create_task(forge())
                timeline = await device.turn(Ask(clip(), SPEECH_END_MS, "q", 1, ""))
                await forging
                forger.close()
                assert timeline.device is not None
                return timeline.ok, timeline.device.downlink_frames, sum(channel.dropped.values())

    ok, downlink, dropped = real(scenario)
    assert ok and downlink > 0 and dropped == 3


# --- floods and backlogs -----------------------------------------------------------------------------


def _stream(backlog: list[bytes], then: list[bytes], gap_s: float) -> Any:
    async def device(channel: FakeChannel) -> None:
        say_hello(channel)
        channel.say({"type": "listen", "state": "start", "mode": "auto"})
        await asyncio.sleep(gap_s)  # the network stalls: nothing arrives
        for pcm in backlog:  # then everything it held, at once
            channel.frame(pcm)
        await asyncio.sleep(0)
        for pcm in then:
            if channel.closed:
                return
            channel.frame(pcm)
            await asyncio.sleep(0.06)
        while not channel.closed and not channel.messages("tts", "stop"):  # the answer, then the device leaves
            channel.frame(SILENCE)
            await asyncio.sleep(0.06)

    return device


def test_a_backlog_after_a_stall_is_heard_and_a_flood_is_closed() -> None:
    """Attack, and its honest twin: 20 s of audio held back by a 20 s stall arrives at once (a device recovering
    from a network stall: the old guard cut it above 100 messages a second), against a device that sends three
    times faster than it could record for as long as it likes (closed once past real time plus 30 s)."""
    settings = SessionSettings(idle_goodbye_s=0, idle_close_s=0)
    clip = [SILENCE] * 3 + [TONE] * 10 + [SILENCE] * 12

    async def both() -> tuple[FakeChannel, Turns, FakeChannel]:
        honest, turns = FakeChannel(settings, VirtualClock()), Turns()
        await session(_stream([SILENCE] * 330 + clip, [SILENCE] * 40, 20.0)(honest), honest, turns, settings)
        flooder = FakeChannel(settings, VirtualClock())

        async def flood(channel: FakeChannel) -> None:
            say_hello(channel)
            while channel.closed is None:
                for _ in range(3):
                    channel.frame(SILENCE)
                await asyncio.sleep(0.06)

        await session(flood(flooder), flooder, Turns(), settings)
        return honest, turns, flooder

    honest, turns, flooder = virtual(both())
    assert honest.closed is None and [(tl.ok, tl.error_message) for _, tl in turns.done] == [(True, "")]
    assert flooder.closed is not None and flooder.closed[0] == 1008
    assert "more audio than real time plus a 30 s backlog" in flooder.closed[1]
    assert 14_500 <= flooder.closed_at <= 15_500  # 2 s of audio a second over: the 30 s bucket empties at 15 s


def test_the_control_bucket_holds_a_burst_and_refills_at_its_rate() -> None:
    clock = udp_channel.StepClock()
    guard = FloodGuard(FloodSettings(max_control_per_s=20, control_burst=200), clock)
    for _ in range(200):
        guard.control()
    with pytest.raises(Flooded, match="more than 20 control messages a second"):
        guard.control()
    clock.ns += 1_000_000_000
    for _ in range(20):
        guard.control()


def test_saying_hello_again_over_mqtt_does_not_refill_the_connections_bucket() -> None:
    """Attack: the old front end gave every hello a session with a fresh bucket, so a flood that said hello
    every 100 messages was never metered. The bucket is the connection's now."""

    async def scenario() -> dict[str, Any]:
        async with front_end() as lab, raw(lab) as device:
            await device.connect()
            for _ in range(2):
                await device.publish(HELLO)
                for _ in range(150):
                    await device.publish({"type": "iot", "descriptors": []})
            while (message := (await device.message())[1])["type"] != "goodbye" or "code" not in message:
                pass
            return message

    goodbye = real(scenario)
    assert goodbye["code"] == 1008 and "control messages" in goodbye["reason"]


# --- connections: how many, how idle, how slow to read ---------------------------------------------


def test_the_mqtt_front_end_takes_no_more_connections_than_its_caps() -> None:
    """Attack: connections piled up without limit (with no key every client id is accepted)."""

    async def scenario() -> list[int]:
        door = DoorSettings(max_connections=2, max_per_address=0)
        async with front_end(signature_key="", door=door) as lab:
            codes = []
            devices = [await _raw(lab) for _ in range(3)]
            for i, device in enumerate(devices):
                client = f"GID_test@@@02_00_00_00_00_{i:02x}@@@d{i}"
                codes.append(await device.connect(client, mqtt_identity.username({}), password=""))
            for device in devices:
                device.close()
        return codes

    assert real(scenario) == [mp.ACCEPTED, mp.ACCEPTED, mp.SERVER_UNAVAILABLE]


async def _raw(lab: Any) -> Any:
    from tests.transport.server.test_mqtt_front import RawDevice

    return await RawDevice.to(lab)


def test_an_mqtt_client_that_asks_for_no_keep_alive_is_closed_when_idle() -> None:
    """Attack: keep-alive 0 turned the idle check off, so idle connections stayed for ever."""

    async def scenario() -> bool:
        door = DoorSettings(max_idle_s=0.3)
        async with front_end(door=door) as lab, raw(lab) as device:
            assert await device.connect(keep_alive=0) == mp.ACCEPTED
            return await device.closed(3)

    assert real(scenario)


class _StalledWriter:
    """A connection whose peer stopped reading: nothing drains."""

    def __init__(self) -> None:
        self.aborted = False
        self.transport = self

    def write(self, data: bytes) -> None:
        pass

    async def drain(self) -> None:
        await asyncio.Event().wait()

    def abort(self) -> None:
        self.aborted = True

    def close(self) -> None:
        pass

    def get_extra_info(self, name: str) -> Any:
        return ("203.0.113.5", 1)


class _Door:
    max_packet_bytes, connect_timeout_s, signature_key = 8192, 1.0, ""
    door = DoorSettings(write_timeout_s=0.5)
    session = SessionSettings()
    clock = VirtualClock()

    def left(self, connection: MqttConnection) -> None:
        pass


def test_a_write_the_mqtt_peer_never_reads_ends_its_connection_at_the_write_timeout() -> None:
    """Attack: a client that stops reading held its connection for ever (drain() without a limit)."""
    writer = _StalledWriter()

    async def scenario() -> tuple[float, bool]:
        connection = MqttConnection(_Door(), asyncio.StreamReader(), writer)  # type: ignore[arg-type]
        connection.open = True
        start = asyncio.get_running_loop().time()
        with pytest.raises(ChannelGone, match="gone"):
            await connection.publish(Tts("stop", session_id="s"))
        return asyncio.get_running_loop().time() - start, connection.open

    took, still_open = virtual(scenario())
    assert took == pytest.approx(0.5) and not still_open and writer.aborted


class _StalledSocket:
    request = None

    def __init__(self) -> None:
        self.transport = _StalledWriter()

    async def send(self, data: str | bytes) -> None:
        await asyncio.Event().wait()


def test_a_websocket_send_the_peer_never_reads_ends_its_connection_at_the_write_timeout() -> None:
    settings = WebSocketSettings(door=DoorSettings(write_timeout_s=0.5))

    async def scenario() -> bool:
        ws = _StalledSocket()
        channel = WebSocketChannel(ws, settings, VirtualClock())  # type: ignore[arg-type]
        with pytest.raises(ChannelGone, match=r"could not go out within 0\.5 s"):
            await channel.send_audio(b"opus", 0)
        return ws.transport.aborted

    assert virtual(scenario())


def test_the_websocket_door_refuses_connections_past_its_cap() -> None:
    async def scenario() -> str:
        async with gateway(ScriptedTurns(), door=DoorSettings(max_connections=1)) as url, connect(url) as first:
            await first.send(dump(hello()))
            assert parse(await first.recv())["type"] == "hello"
            with pytest.raises(InvalidStatus) as refused:
                async with connect(url):
                    pass
            return str(refused.value)

    assert "503" in real(scenario)


# --- what does not parse -------------------------------------------------------------------------------


def test_nesting_deeper_than_any_decoder_follows_is_a_counted_drop_over_websocket(caplog: Any) -> None:
    """Attack: json.loads("[" * 9000) raises RecursionError, which got past ``except ValueError``: the
    connection closed with 1011. Now it is a message that does not read, counted, and the session goes on."""

    async def scenario() -> dict[str, Any]:
        async with gateway(ScriptedTurns()) as url, connect(url) as ws:
            await ws.send(dump(hello()))
            await ws.recv()
            await ws.send("[" * 100_000)
            await ws.send('{"type": "mcp", "payload": ' + "[" * 100_000 + "]" * 100_000 + "}")
            await ws.send(dump(hello()))
            return parse(await ws.recv())

    with caplog.at_level(logging.ERROR):
        assert real(scenario)["type"] == "hello"
    assert not [r for r in caplog.records if r.exc_info]


def test_nesting_deeper_than_any_decoder_follows_closes_an_mqtt_connection_with_a_reason(caplog: Any) -> None:
    """Over MQTT a payload that is no JSON message closes the connection, as in the gateway; it used to be an
    exception no handler caught."""

    async def scenario() -> bool:
        async with front_end() as lab, raw(lab) as device:
            await device.connect()
            await device.send(mp.publish("device-server", b"[" * 7000))
            return await device.closed(3)

    with caplog.at_level(logging.ERROR):
        assert real(scenario)
    assert not [r for r in caplog.records if r.exc_info]


def test_a_plain_mqtt_listener_on_the_tls_port_is_refused(tmp_path: Any, capsys: Any) -> None:
    """Attack on the user, not the server: on 8883 the firmware and py-xiaozhi start TLS, so every device would
    fail against the lab's plain listener, with nothing said. The lab refuses the port before it starts."""
    with pytest.raises(ValueError, match="8883 is MQTT over TLS"):
        MqttFrontSettings(port=8883)
    assert serve.main(["--mqtt-port", "8883", "--port", "0", "--out", str(tmp_path)], env={}) == 2
    assert "8883 is MQTT over TLS" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_audio_before_it_is_decoded_is_metered_by_its_announced_length() -> None:
    """A flood of packets that do not decode costs the guard what the hello announced, so garbage is no way past it."""
    settings = SessionSettings(idle_goodbye_s=0, idle_close_s=0, flood=FloodSettings(max_backlog_s=1.0))

    async def device(channel: FakeChannel) -> None:
        say_hello(channel)
        while channel.closed is None:
            channel.inbox.put_nowait(Audio(b"\xff\xfe\x00 not opus"))
            await asyncio.sleep(0.01)

    async def main() -> FakeChannel:
        channel = FakeChannel(settings, VirtualClock())
        await session(device(channel), channel, Turns(), settings)
        return channel

    channel = virtual(main())
    assert channel.closed is not None and channel.closed[0] == 1008
    assert dataclasses.asdict(settings.flood)["max_backlog_s"] == 1.0
    assert json.dumps(channel.closed[1])
