"""The wire: typed messages and framing, from transcripts of what firmware and servers send."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from pipeline.events import FRAME_BYTES
from pipeline.transport.wire import framing, mcp, messages
from pipeline.transport.wire.failures import ProtocolError
from pipeline.transport.wire.messages import (
    AudioParams,
    Features,
    Hello,
    LabTag,
    Listen,
    Llm,
    Mcp,
    Other,
    Stt,
    Tts,
    UdpParams,
    check_audio_params,
    decode,
    encode,
)
from pipeline.transport.wire.opus import CodecError, OpusDecoder, OpusEncoder, audible
from tests.scenario import TONE

# What a device sends (firmware 1.x, docs/websocket.md), fields we do not use included.
FIRMWARE_HELLO = {
    "type": "hello",
    "version": 1,
    "features": {"mcp": True},
    "transport": "websocket",
    "audio_params": {"format": "opus", "sample_rate": 16000, "channels": 1, "frame_duration": 60},
}
# What a server sends (xiaozhi-esp32-server), fields and types we do not use included.
SERVER_TRANSCRIPT = [
    {"type": "hello", "version": 1, "transport": "websocket", "session_id": "abc", "audio_params": {}},
    {"type": "stt", "text": "打开客厅的灯", "session_id": "abc"},
    {"type": "llm", "text": "😊", "emotion": "happy", "session_id": "abc"},
    {"type": "tts", "state": "start", "session_id": "abc", "sample_rate": 24000},
    {"type": "mcp", "session_id": "abc", "payload": {"jsonrpc": "2.0", "method": "tools/list", "id": 1}},
    {"type": "tts", "state": "sentence_start", "text": "好的，", "session_id": "abc"},
    {"type": "alert", "status": "warning", "message": "x", "emotion": "sad"},
    {"type": "tts", "state": "sentence_end", "text": "好的，", "session_id": "abc"},
    {"type": "tts", "state": "stop", "session_id": "abc"},
]


@pytest.mark.parametrize("version", framing.VERSIONS)
def test_audio_framing_round_trips_in_every_version(version: int) -> None:
    packet = framing.unpack(version, framing.pack(version, b"opus-bytes", timestamp_ms=1234))
    assert packet.payload == b"opus-bytes"
    assert packet.kind == framing.TYPE_OPUS
    assert packet.timestamp_ms == (1234 if version == 2 else 0)


def test_the_headers_are_the_documented_layouts() -> None:
    assert framing.pack(2, b"ab", 7) == struct.pack(">HHIII", 2, 0, 0, 7, 2) + b"ab"
    assert framing.pack(3, b"ab") == bytes([0, 0, 0, 2]) + b"ab"
    assert framing.pack(1, b"ab") == b"ab"


@pytest.mark.parametrize(
    ("version", "data", "problem"),
    [
        (2, b"\x00\x02", "shorter than the version 2 header"),
        (3, bytes([0, 0, 0, 9]) + b"ab", "header says 9 payload bytes, the message holds 2"),
        (3, bytes([7, 0, 0, 1]) + b"a", "type 7"),
        (4, b"x", "protocol version 4"),
    ],
)
def test_a_header_that_disagrees_with_its_data_is_named(version: int, data: bytes, problem: str) -> None:
    with pytest.raises(ProtocolError, match=problem):
        framing.unpack(version, data)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("{not json", "malformed JSON"),
        ("[1, 2]", "not a JSON object with a string 'type'"),
        ('{"state": "start"}', "string 'type'"),
        ('{"type": 5}', "string 'type'"),
        ('{"type": "listen"}', "a listen message that does not read"),  # no state
        ('{"type": "listen", "state": "start", "mode": 3}', "a listen message that does not read"),
        ("[" * 100_000, "not a JSON object"),  # deeper than any decoder follows: no RecursionError gets out
        ('{"type": "mcp", "payload": ' + "[" * 100_000 + "]" * 100_000 + "}", "malformed JSON"),
    ],
)
def test_malformed_control_messages_are_protocol_errors(text: str, problem: str) -> None:
    with pytest.raises(ProtocolError, match=problem):
        decode(text)
    assert isinstance(messages.read(text), messages.Malformed)


def test_the_firmware_hello_is_accepted_with_fields_we_do_not_use() -> None:
    message = decode(json.dumps(FIRMWARE_HELLO))
    assert isinstance(message, Hello)
    assert check_audio_params(message) == AudioParams()
    assert message.features == Features(mcp=True)


def test_audio_we_cannot_decode_is_refused_at_hello() -> None:
    hello = {**FIRMWARE_HELLO, "audio_params": {**FIRMWARE_HELLO["audio_params"], "sample_rate": 24000}}  # type: ignore[dict-item]
    message = decode(json.dumps(hello))
    assert isinstance(message, Hello)
    with pytest.raises(ProtocolError, match="sample_rate = 24000"):
        check_audio_params(message)


def test_a_servers_transcript_decodes_to_its_messages_and_unknown_types_are_tolerated() -> None:
    decoded = [decode(json.dumps(m, ensure_ascii=False)) for m in SERVER_TRANSCRIPT]
    assert [type(m) for m in decoded] == [Hello, Stt, Llm, Tts, Mcp, Tts, Other, Tts, Tts]
    assert decoded[1] == Stt(text="打开客厅的灯", session_id="abc")
    assert decoded[3] == Tts("start", session_id="abc")  # sample_rate: a field we do not use
    assert decoded[6] == Other("alert")
    assert isinstance(decoded[4], Mcp) and isinstance(decoded[4].payload, mcp.Request)
    assert decoded[4].payload.method == "tools/list"


def test_what_the_lab_sends_is_what_the_real_parts_send() -> None:
    """Field names and values as the firmware and server write them; a field the lab leaves unset is absent."""
    listen = Listen("start", mode="auto", session_id="s", lab=LabTag("en01", 2))
    assert json.loads(encode(listen)) == {
        "type": "listen",
        "state": "start",
        "mode": "auto",
        "session_id": "s",
        "lab": {"question_id": "en01", "round": 2},
    }
    assert encode(Stt(text="你好", session_id="s")) == '{"type":"stt","text":"你好","session_id":"s"}'
    hello = Hello(
        version=3,
        transport="udp",
        audio_params=AudioParams(),
        session_id="s",
        udp=UdpParams(server="127.0.0.1", port=9, key="00", nonce="01"),
    )
    assert json.loads(encode(hello))["udp"] == {
        "server": "127.0.0.1",
        "port": 9,
        "encryption": "aes-128-ctr",
        "key": "00",
        "nonce": "01",
    }
    assert json.loads(encode(Tts("stop", session_id=""))) == {"type": "tts", "state": "stop", "session_id": ""}


def test_opus_round_trip_keeps_the_frame_and_its_loudness() -> None:
    encoder, decoder = OpusEncoder(), OpusDecoder()
    packets = [encoder.encode(TONE) for _ in range(5)]
    assert all(len(p) < 400 for p in packets)  # 60 ms of speech-band audio, well under the message limit
    decoded = [decoder.decode(p) for p in packets]
    assert all(len(pcm) == FRAME_BYTES for pcm in decoded)
    assert audible(decoded[-1])
    after = [decoder.decode(encoder.encode(bytes(FRAME_BYTES))) for _ in range(3)]
    assert not audible(after[-1])  # the first silent frame still carries the tone's decay


def test_a_corrupt_opus_packet_is_a_codec_error() -> None:
    with pytest.raises(CodecError, match="undecodable Opus packet of 6 bytes"):
        OpusDecoder().decode(b"\xff\xfe\x00bad")


def test_a_short_last_frame_is_padded_and_an_oversized_one_refused() -> None:
    encoder = OpusEncoder()
    assert len(OpusDecoder().decode(encoder.encode(TONE[:100]))) == FRAME_BYTES
    with pytest.raises(CodecError, match="at most"):
        encoder.encode(TONE + b"\0\0")


def test_a_reserved_turn_span_id_is_the_turn_spans_and_a_server_turn_joins_it(tmp_path: Path) -> None:
    from pipeline.analysis.traces import spans_from_traces_data
    from pipeline.tracing.export import Tracing
    from pipeline.tracing.timeline import TurnTimeline

    device, server = Tracing(tmp_path / "d.jsonl", "device"), Tracing(tmp_path / "s.jsonl", "server")
    device.start_session({}, 1_000)
    traceparent, other = device.reserve_turn(), device.reserve_turn()  # two devices' turns in flight
    _, trace_id, span_id, _ = traceparent.split("-")
    other_line = device.emit_turn(TurnTimeline(start_ns=1_500, end_ns=2_500), {}, reserved=other)
    assert next(s for s in spans_from_traces_data(other_line) if s.name == "turn").span_id == other.split("-")[2]
    mine = spans_from_traces_data(
        device.emit_turn(TurnTimeline(start_ns=2_000, end_ns=3_000), {}, reserved=traceparent)
    )
    turn = next(s for s in mine if s.name == "turn")
    assert (turn.trace_id, turn.span_id) == (trace_id, span_id)
    theirs = spans_from_traces_data(server.emit_turn(TurnTimeline(start_ns=2_100, end_ns=2_900), {}, traceparent))
    assert [(s.trace_id, s.parent_span_id) for s in theirs if s.name == "turn"] == [(trace_id, span_id)]
    # the next turn gets a fresh id; a malformed traceparent leaves the server's own trace
    again = spans_from_traces_data(device.emit_turn(TurnTimeline(start_ns=4_000, end_ns=5_000), {}))
    assert next(s for s in again if s.name == "turn").span_id != span_id
    own = spans_from_traces_data(server.emit_turn(TurnTimeline(start_ns=1, end_ns=2), {}, "00-zz-01"))
    assert next(s for s in own if s.name == "turn").trace_id != trace_id
    device.shutdown()
    server.shutdown()
