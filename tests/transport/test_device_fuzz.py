"""Everything a hostile server can send a device, fuzzed (hypothesis): nothing escapes the device, memory stays bounded.

The server side is fuzzed in ``test_wire_fuzz``; this is the other end. A device's WebSocket reader gets any
sequence of text and binary messages; a whole question runs against a server that answers it with any
sequence, floods included; the MQTT link takes any control payloads and datagrams; the OTA answer is any
bytes, any JSON, any nesting. Each may end the turn (failed, with its kind) or refuse the session with a
``DeviceError``; none may raise anything else, and what the device keeps has a bound.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from hypothesis import event, given
from hypothesis import strategies as st

from pipeline.clock import VirtualClock
from pipeline.run.device_side import Ask
from pipeline.tracing.timeline import TurnTimeline
from pipeline.transport.device.device import DeviceSettings, EmulatedDevice
from pipeline.transport.device.device_settings import DownlinkLimits, LinkSettings
from pipeline.transport.device.downlink_guard import MAX_TEXT_CHARS, DownlinkFlood, DownlinkGuard, packet_ms
from pipeline.transport.device.link import DeviceError
from pipeline.transport.device.mqtt_udp_link import MqttUdpLink
from pipeline.transport.device.ota_client import json_depth, read_answer
from pipeline.transport.device.websocket_link import WebSocketLink
from pipeline.transport.wire import ota
from pipeline.transport.wire.udp import PacketCrypto
from tests.scenario import utterance
from tests.server_harness import virtual
from tests.transport.device.far_end import ANSWER, TONE_PACKET, Dialer, FarEnd, FarEndLink
from tests.transport.test_wire_fuzz import FUZZ, SLOW_FUZZ, control_text, json_values, message_shaped

SMALL = DownlinkLimits(max_backlog_s=2.0, control_burst=20, max_waiting=40, max_waiting_bytes=4096)
GONE_KINDS = ("disconnected", "flooded")

# what a server sends: its messages, shaped like the real ones or not, any binary, real audio, floods
answer_like = st.sampled_from(
    [
        ("text", json.dumps({"type": "stt", "text": "question"})),
        ("text", json.dumps({"type": "tts", "state": "start"})),
        ("text", json.dumps({"type": "tts", "state": "sentence_start", "text": "An answer."})),
        ("text", json.dumps({"type": "tts", "state": "stop"})),
        ("text", json.dumps({"type": "tts", "state": "sentence_start", "text": "y" * 50_000})),
        ("text", json.dumps({"type": "stt", "text": "z" * 50_000})),
    ]
)
server_items = st.lists(
    message_shaped.map(lambda m: ("text", json.dumps(m)))
    | control_text.map(lambda t: ("text", t))
    | st.binary(max_size=40).map(lambda b: ("binary", b))
    | st.just(("binary", TONE_PACKET))
    | answer_like
    | st.tuples(st.just("flood"), st.sampled_from([TONE_PACKET, json.dumps({"type": "tts", "state": "start"})])),
    max_size=25,
)


def _bounded(link: WebSocketLink | MqttUdpLink, limits: DownlinkLimits) -> None:
    assert link.inbox.queue.qsize() <= limits.max_waiting + 1  # and the end of the connection
    assert 0 <= link.inbox.waiting_bytes <= limits.max_waiting_bytes


@FUZZ
@given(server_items)
def test_any_server_messages_are_read_or_hung_up_on_by_the_websocket_reader(items: list[tuple[str, Any]]) -> None:
    async def read() -> WebSocketLink:
        far = FarEnd([items], close=True)
        far.listened.set()
        link = FarEndLink(LinkSettings("ws://127.0.0.1:1/", limits=SMALL), VirtualClock(), far)
        await link._read(far)  # type: ignore[arg-type]
        return link

    link = virtual(read())
    _bounded(link, SMALL)
    why = link.lost()
    assert why is not None and why.kind in GONE_KINDS


CLIP = utterance(lead_frames=1, speech_frames=3, tail_frames=1)


@SLOW_FUZZ
@given(server_items, st.booleans())
def test_no_server_gets_an_exception_past_a_devices_question(items: list[tuple[str, Any]], close: bool) -> None:
    """Whatever a server answers a question with, the device ends the turn (failed with a kind, or answered)."""
    failures: list[dict[str, Any]] = []
    dial = Dialer([FarEnd([items], close)])

    async def device() -> tuple[TurnTimeline, WebSocketLink]:
        asyncio.get_running_loop().set_exception_handler(lambda _loop, context: failures.append(context))
        changes: dict[str, Any] = {"mcp_wait_s": 0.0, "turn_timeout_s": 5.0, "answer_timeout_s": 1.0, "tail_ms": 300}
        settings = DeviceSettings(url="ws://127.0.0.1:1/", limits=SMALL, **changes)
        async with EmulatedDevice(settings, VirtualClock(), dial=dial) as emulated:
            turn = await emulated.turn(Ask(CLIP, 240, "q1", 1, ""))
            link = emulated.link
            assert isinstance(link, WebSocketLink)
            return turn, link

    turn, link = virtual(device())
    assert not failures, failures
    _bounded(link, SMALL)
    device_side = turn.device
    assert device_side is not None
    assert len(device_side.transcript) <= MAX_TEXT_CHARS
    assert all(len(text) <= MAX_TEXT_CHARS for _at, text in device_side.sentence_starts)
    event(turn.error_type or "ok")
    assert turn.ok or turn.error_type


@FUZZ
@given(st.lists(control_text.map(str.encode) | st.binary(max_size=60), max_size=30), st.lists(st.binary(max_size=80)))
def test_the_mqtt_link_takes_any_payloads_and_datagrams_and_holds_at_most_its_caps(
    payloads: list[bytes], datagrams: list[bytes]
) -> None:
    async def feed() -> MqttUdpLink:
        link = MqttUdpLink(LinkSettings("mqtt://127.0.0.1:1", limits=SMALL), VirtualClock())
        key, nonce = bytes(range(16)), bytes([1, 0, 0, 0, 0, 0, 0, 42]) + bytes(8)
        link.crypto, server = PacketCrypto(key, nonce), PacketCrypto(key, nonce)
        for index, payload in enumerate(payloads):
            await link._control(payload)
            link.datagram(server.seal(TONE_PACKET, 0, index + 1))
            _bounded(link, SMALL)
        for data in datagrams:
            link.datagram(data)
            _bounded(link, SMALL)
        return link

    virtual(feed())


@FUZZ
@given(
    st.lists(st.tuples(st.integers(0, 200), st.sampled_from([TONE_PACKET, b"", bytes([0x80 | 3, 0x3F])])), max_size=80)
)
def test_the_guard_never_takes_more_audio_than_real_time_plus_the_backlog(sends: list[tuple[int, bytes]]) -> None:
    async def send() -> tuple[float, float]:
        guard, taken, start = DownlinkGuard(SMALL, VirtualClock()), 0.0, asyncio.get_running_loop().time()
        for gap_ms, packet in sends:
            await asyncio.sleep(gap_ms / 1000)
            try:
                guard.audio(packet)
                taken += packet_ms(packet)
            except DownlinkFlood:
                pass
        return taken, (asyncio.get_running_loop().time() - start) * 1000

    taken, elapsed = virtual(send())
    assert taken <= SMALL.max_backlog_s * 1000 + elapsed + 1e-6


# --- the OTA answer -----------------------------------------------------------------------------------------

OTA = LinkSettings("http://127.0.0.1:1/xiaozhi/ota/")
OTA_KEYS = ("endpoint", "client_id", "username", "password", "port", "keepalive", "url", "token", "timestamp")
ota_answers = st.dictionaries(
    st.sampled_from(("server_time", "firmware", "activation", "mqtt", "websocket")) | st.text(max_size=6),
    json_values | st.dictionaries(st.sampled_from(OTA_KEYS), json_values),
)
nested = st.builds(
    lambda depth, opener, key: (b'{"%s":' % key.encode() if opener == "{" else b"[") * depth,
    st.integers(1, 3000),
    st.sampled_from("{["),
    st.sampled_from(["mqtt", "x", "server_time"]),
).map(lambda head: head + b"1" + b"".join(b"}" if c == ord("{") else b"]" for c in reversed(head) if c in b"{["))


@FUZZ
@given(st.binary(max_size=300) | (json_values | ota_answers).map(lambda v: json.dumps(v).encode()) | nested)
def test_any_bytes_as_an_ota_answer_are_an_answer_or_a_device_error_naming_what(body: bytes) -> None:
    try:
        answer = read_answer(OTA, body)
    except DeviceError as exc:
        assert str(exc).startswith(f"{OTA.url}: the OTA's answer")
        return
    assert isinstance(answer, ota.OtaAnswer)
    assert json_depth(body) <= OTA.limits.max_ota_depth


def _depth(value: Any) -> int:
    if isinstance(value, list):
        return 1 + max(map(_depth, value), default=0)
    if isinstance(value, dict):
        return 1 + max(map(_depth, value.values()), default=0)
    return 0


@FUZZ
@given(json_values | ota_answers)
def test_json_depth_is_the_nesting_a_parser_finds(value: Any) -> None:
    assert json_depth(json.dumps(value).encode()) == _depth(value)


def test_the_fuzzers_reach_an_answered_question() -> None:
    """A control: the fuzzed server's answer shaped as the real one is a whole turn, so a pass is not an empty fuzz."""

    async def device() -> TurnTimeline:
        settings = DeviceSettings(url="ws://127.0.0.1:1/", mcp_wait_s=0.0, limits=SMALL)
        async with EmulatedDevice(settings, VirtualClock(), dial=Dialer([FarEnd([ANSWER])])) as emulated:
            return await emulated.turn(Ask(CLIP, 240, "q1", 1, ""))

    turn = virtual(device())
    assert turn.ok, turn.error_message
