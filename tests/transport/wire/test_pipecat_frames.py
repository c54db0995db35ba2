"""Pipecat's protobuf wire as it crosses: the frames built here are the bytes Pipecat's schema gives (field for
field, proto3's encoding written out by hand), every kind of frame a bot sends is read into its struct, and
anything a peer can send is read or refused with a reason, never raised, its audio bounded (hypothesis)."""

from __future__ import annotations

import json

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.transport.wire import pipecat_frames as pf
from pipeline.transport.wire.messages import Malformed

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def field(number: int, wire_type: int) -> bytes:
    return bytes([number << 3 | wire_type])


def varint(value: int) -> bytes:
    out = bytearray()
    while True:
        low, value = value & 0x7F, value >> 7
        out.append(low | (0x80 if value else 0))
        if not value:
            return bytes(out)


def length(number: int, payload: bytes) -> bytes:
    return field(number, 2) + varint(len(payload)) + payload


def test_the_callers_audio_is_the_frame_pipecats_schema_makes() -> None:
    # Frame.audio (2) = AudioRawFrame { audio (3): the bytes, sample_rate (4): 16000, num_channels (5): 1 }
    inner = length(3, b"\x01\x00\xff\x7f") + field(4, 0) + varint(16000) + field(5, 0) + varint(1)
    assert pf.audio(b"\x01\x00\xff\x7f", 16000) == length(2, inner)


def test_an_rtvi_message_is_a_message_frame_holding_its_json() -> None:
    data = pf.message("client-ready", {"version": "1.0.0"}, "m1")
    body = json.dumps({"label": "rtvi-ai", "type": "client-ready", "id": "m1", "data": {"version": "1.0.0"}})
    assert data == length(4, length(1, body.encode()))


def test_each_kind_of_frame_a_bot_sends_is_read() -> None:
    pcm = np.array([0, 1000, -1000], dtype="<i2")
    audio = pf.read(length(2, length(3, pcm.tobytes()) + field(4, 0) + varint(24000) + field(5, 0) + varint(1)))
    assert isinstance(audio, pf.BotAudio) and audio.rate == 24000 and audio.pcm.tolist() == [0, 1000, -1000]
    started = json.dumps({"label": "rtvi-ai", "type": "bot-started-speaking"})
    assert pf.read(length(4, length(1, started.encode()))) == pf.RtviEvent("bot-started-speaking", {})
    said = json.dumps({"label": "rtvi-ai", "type": "user-transcription", "data": {"text": "hi", "final": True}})
    assert pf.read(length(4, length(1, said.encode()))) == pf.RtviEvent(
        "user-transcription", {"text": "hi", "final": True}
    )
    assert pf.read(length(1, length(3, b"hello"))) == pf.BotText("hello", transcription=False)
    assert pf.read(length(3, length(3, b"hello"))) == pf.BotText("hello", transcription=True)
    assert pf.read(length(5, b"")) == pf.Interruption()


def test_what_a_bot_must_not_send_is_refused_with_a_reason() -> None:
    def audio(raw: bytes, rate: int, channels: int = 1) -> bytes:
        return length(2, length(3, raw) + field(4, 0) + varint(rate) + field(5, 0) + varint(channels))

    cases: dict[str, bytes | str] = {
        "text_message": "a text frame",
        "too_large": b"\x00" * (pf.MOST_BYTES + 1),
        "bad_protobuf": b"\x12\x05\x01",  # a length past the end
        "empty_frame": b"",
        "bad_json": length(4, length(1, b"{not json")),
        "bad_message": length(4, length(1, b'["bot-started-speaking"]')),
    }
    for what, data in cases.items():
        found = pf.read(data)
        assert isinstance(found, Malformed) and found.what == what, (what, found)
    for bad in (audio(b"\x00", 16000), audio(b"\x00\x00", 11025), audio(b"\x00\x00", 16000, channels=2)):
        found = pf.read(bad)
        assert isinstance(found, Malformed) and found.what == "bad_audio"
    too_long = audio(b"\x00\x00" * (pf.MOST_AUDIO_SECONDS * 8000 + 1), 8000)
    assert isinstance(pf.read(too_long), Malformed)


@FUZZ
@given(st.binary(max_size=4096))
def test_any_bytes_are_read_or_refused_never_raised(data: bytes) -> None:
    found = pf.read(data)
    assert isinstance(found, (pf.BotAudio, pf.RtviEvent, pf.BotText, pf.Interruption, Malformed))
    if isinstance(found, pf.BotAudio):
        assert len(found.pcm) <= pf.MOST_AUDIO_SECONDS * found.rate


@FUZZ
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(), lambda c: st.lists(c) | st.dictionaries(st.text(), c)
    )
)
def test_any_json_in_a_message_frame_is_read_or_refused(item: object) -> None:
    found = pf.read(length(4, length(1, json.dumps(item).encode())))
    assert isinstance(found, (pf.RtviEvent, Malformed))
