"""A device against a hostile server: audio metered in audio time, control messages by count, each message
capped in size, what waits unread capped; a server past them is hung up on and the turn fails ``flooded``.

The replays are the attacks issue 42 measured (an audio flood: 604 MB; endless ``tts start``: 1.1 GB; a
250 MB MQTT packet): each ends in a failed turn or a refused session and the device's inbox stays bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
import json

import pytest
from websockets.exceptions import ConnectionClosed

from pipeline.clock import VirtualClock
from pipeline.tracing.timeline import TurnTimeline
from pipeline.transport.device.device import DeviceSettings, EmulatedDevice
from pipeline.transport.device.device_settings import DownlinkLimits, LinkSettings
from pipeline.transport.device.downlink_guard import LONGEST_PACKET_MS, DownlinkFlood, DownlinkGuard, packet_ms
from pipeline.transport.device.link import DeviceError
from pipeline.transport.device.mqtt_udp_link import MqttUdpLink
from pipeline.transport.wire import mqtt_packets as mp
from pipeline.transport.wire.udp import PacketCrypto
from tests.server_harness import virtual
from tests.transport.device.test_device_firmware import CLOCK, PACKETS, Conn, ask, scripted, settings
from tests.transport.server.test_websocket import real

CAPS = DownlinkLimits()


def test_an_opus_packet_is_metered_by_what_its_toc_says_it_holds() -> None:
    assert packet_ms(PACKETS[0]) == 60.0  # the lab's encoder: one 60 ms frame
    assert packet_ms(bytes([(1 << 3) | 0, 0])) == 20.0  # SILK 20 ms, one frame
    assert packet_ms(bytes([(16 << 3) | 1, 0])) == 5.0  # CELT 2.5 ms, two frames
    assert packet_ms(bytes([(31 << 3) | 3, 6])) == 120.0  # CELT 20 ms, six frames
    assert packet_ms(bytes([(31 << 3) | 3, 48])) == LONGEST_PACKET_MS  # claims 48 frames: no more than a packet holds
    assert packet_ms(b"") == packet_ms(bytes([(31 << 3) | 3])) == LONGEST_PACKET_MS  # unreadable: charged the most


def test_the_guard_takes_real_time_plus_the_backlog_and_a_burst_of_control_messages_and_no_more() -> None:
    async def scenario() -> list[str]:
        guard = DownlinkGuard(DownlinkLimits(max_backlog_s=1.2, max_control_per_s=2, control_burst=3), VirtualClock())
        seen = []
        for _ in range(20):  # 60 ms packets in real time: forever
            guard.audio(PACKETS[0])
            await asyncio.sleep(0.06)
        for _ in range(20):  # the 1.2 s backlog at once: 20 packets
            guard.audio(PACKETS[0])
        with pytest.raises(DownlinkFlood, match=r"more audio than real time plus a 1\.2 s backlog"):
            guard.audio(PACKETS[0])
        await asyncio.sleep(0.12)  # 120 ms later: two packets more
        guard.audio(PACKETS[0])
        guard.audio(PACKETS[0])
        for _ in range(3):
            guard.control()
        with pytest.raises(DownlinkFlood, match=r"more than 2 control messages a second \(burst 3\)"):
            guard.control()
        await asyncio.sleep(0.5)
        guard.control()
        seen.append("ok")
        return seen

    assert virtual(scenario()) == ["ok"]


def _udp_link(limits: DownlinkLimits = CAPS) -> tuple[MqttUdpLink, PacketCrypto]:
    link = MqttUdpLink(LinkSettings("mqtt://127.0.0.1:1", limits=limits), VirtualClock())
    key, nonce = bytes(range(16)), bytes([1, 0, 0, 0, 0, 0, 0, 42]) + bytes(8)
    link.crypto = PacketCrypto(key, nonce)
    return link, PacketCrypto(key, nonce)


def test_a_udp_audio_flood_is_hung_up_on_after_the_backlog_and_the_inbox_stays_bounded() -> None:
    async def scenario() -> tuple[int, str, str]:
        link, server = _udp_link()
        for sequence in range(1, 10_001):  # 600 s of audio at one moment
            link.datagram(server.seal(PACKETS[0], 0, sequence))
        why = link.lost()
        return link.inbox.queue.qsize(), why.kind if why else "", str(why)

    waiting, kind, reason = virtual(scenario())
    assert waiting <= 1  # what was kept was thrown away on hanging up: the end alone is left
    assert kind == "flooded" and "more audio than real time plus a 30 s backlog" in reason


def test_what_waits_unread_is_capped_whatever_the_pace() -> None:
    async def scenario() -> tuple[int, str]:
        link, server = _udp_link(DownlinkLimits(max_waiting=50))
        for sequence in range(1, 200):  # within the backlog, but no turn reads it
            link.datagram(server.seal(PACKETS[0], 0, sequence))
            await asyncio.sleep(0.06)
        why = link.lost()
        return link.inbox.queue.qsize(), str(why)

    waiting, reason = virtual(scenario())
    assert waiting <= 1 and "more than 50 messages" in reason


@pytest.mark.transport
def test_an_audio_flood_fails_the_turn_flooded_at_once_not_at_the_turn_limit() -> None:
    async def script(conn: Conn) -> None:
        await conn.next_json("listen")
        await conn.send({"type": "stt", "text": "question"})
        await conn.send({"type": "tts", "state": "start"})
        with contextlib.suppress(ConnectionClosed):
            while True:
                await conn.ws.send(PACKETS[0])

    async def scenario() -> tuple[TurnTimeline, float]:
        async with scripted(script) as (url, _), EmulatedDevice(settings(url, turn_timeout_s=8.0), CLOCK) as device:
            start = asyncio.get_running_loop().time()
            turn = await device.turn(ask("q1"))
            return turn, asyncio.get_running_loop().time() - start

    turn, took = real(scenario)
    assert turn.error_type == "flooded", turn.error_message
    assert "the device hung up: the server sent more audio than real time plus a 30 s backlog" in turn.error_message
    assert took < 4.0  # 30 s of audio arrives in well under a second on loopback; the turn limit is 8 s


@pytest.mark.transport
def test_endless_tts_start_to_an_idle_device_is_hung_up_on_and_nothing_piles_up() -> None:
    async def script(conn: Conn) -> None:
        flood = json.dumps({"type": "tts", "state": "start", "session_id": conn.session_id, "text": "x" * 1000})
        with contextlib.suppress(ConnectionClosed):
            while True:
                await conn.ws.send(flood)

    async def scenario() -> tuple[int, TurnTimeline]:
        async with scripted(script) as (url, _), EmulatedDevice(settings(url, turn_timeout_s=3.0), CLOCK) as device:
            await asyncio.sleep(1.0)  # idle: no turn reads what comes
            waiting = device.link.inbox.queue.qsize()  # type: ignore[attr-defined]
            return waiting, await device.turn(ask("q1"))

    waiting, turn = real(scenario)
    assert waiting <= 1
    assert turn.error_type == "flooded" and "control messages a second" in turn.error_message


@pytest.mark.transport
def test_an_mqtt_packet_over_the_cap_is_refused_before_its_body_is_read() -> None:
    announced = 64 * 2**20

    async def broker(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(1024)  # CONNECT
        writer.write(mp.connack(mp.ACCEPTED))
        header = mp.publish("devices/p2p/x", b"x")[:1] + _remaining_length(announced)
        writer.write(header + b"x" * 65536)  # the start of a 64 MiB PUBLISH
        with contextlib.suppress(ConnectionError):
            await writer.drain()
            await reader.read()
        writer.close()

    async def scenario() -> str:
        server = await asyncio.start_server(broker, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            async with EmulatedDevice(DeviceSettings(url=f"mqtt://127.0.0.1:{port}", connect_timeout_s=5), CLOCK):
                return "connected"
        except DeviceError as exc:
            return str(exc)
        finally:
            server.close()

    said = real(scenario)
    assert f"the device hung up: the server sent an MQTT packet of {announced} bytes (over 1048576)" in said


def _remaining_length(n: int) -> bytes:
    out = bytearray()
    while True:
        n, byte = divmod(n, 128)
        out.append(byte | (128 if n else 0))
        if not n:
            return bytes(out)
