"""Twilio Media Streams as the wire carries them: G.711 mu-law from tables (held to the reference, sample for
sample), each event typed and decoded once at the edge, and everything a peer can send read or refused with a
reason, never raised, its audio bounded (hypothesis)."""

from __future__ import annotations

import base64
import importlib
import json
import warnings
from types import ModuleType

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.transport.wire import g711
from pipeline.transport.wire import twilio as tw
from pipeline.transport.wire.failures import ProtocolError
from pipeline.transport.wire.messages import Malformed
from pipeline.transport.wire.twilio_order import FromBot, FromCaller

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
EVERY_SAMPLE = np.arange(-32768, 32768, dtype=np.int16)


def audioop() -> ModuleType | None:
    """The standard library's reference codec, where this Python still has it (it was removed in 3.13)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            return importlib.import_module("audioop")
        except ImportError:
            return None


def test_mu_law_is_the_reference_codec_for_every_sample_and_every_byte() -> None:
    reference = audioop()
    if reference is None:
        pytest.skip("this Python has no audioop to compare with")
    assert g711.encode(EVERY_SAMPLE) == reference.lin2ulaw(EVERY_SAMPLE.tobytes(), 2)
    codes = bytes(range(256))
    assert g711.decode(codes).tobytes() == reference.ulaw2lin(codes, 2)


def test_mu_law_s_fixed_points_and_its_error_bound() -> None:
    assert g711.encode(np.array([0, 32767, -32768], dtype=np.int16)) == b"\xff\x80\x00"
    assert g711.decode(b"\xff\x7f\x80\x00").tolist() == [0, 0, 32124, -32124]
    # a round trip's error grows with the sample, as the law's steps do (they double per segment): under the
    # largest code (32124), within a sixteenth of the biased magnitude (measured: at most 1/19, and 515 at the top)
    wide = EVERY_SAMPLE.astype(np.int32)
    error = np.abs(g711.decode(g711.encode(EVERY_SAMPLE)).astype(np.int32) - wide)
    inside = np.abs(wide) <= 32124
    assert (16 * error[inside] <= np.abs(wide[inside]) + g711.BIAS).all() and int(error[inside].max()) == 515
    # a re-encoded decoded byte is the same byte, except +0/-0 (0x7f decodes to 0, which encodes as 0xff)
    codes = np.arange(256, dtype=np.uint8)
    again = np.frombuffer(g711.encode(g711.decode(codes.tobytes())), dtype=np.uint8)
    assert (again == codes).sum() == 255 and again[0x7F] == 0xFF


CALLER = [
    '{"event":"connected","protocol":"Call","version":"1.0.0"}',
    '{"event":"start","sequenceNumber":"1","start":{"accountSid":"AC0","streamSid":"MZ0","callSid":"CA0",'
    '"tracks":["inbound"],"customParameters":{"lab":"1"},"mediaFormat":{"encoding":"audio/x-mulaw",'
    '"sampleRate":8000,"channels":1}},"streamSid":"MZ0"}',
    '{"event":"media","sequenceNumber":"3","media":{"track":"inbound","chunk":"1","timestamp":"5",'
    '"payload":"/////w=="},"streamSid":"MZ0"}',
    '{"event":"dtmf","streamSid":"MZ0","sequenceNumber":"5","dtmf":{"track":"inbound_track","digit":"1"}}',
    '{"event":"mark","sequenceNumber":"4","streamSid":"MZ0","mark":{"name":"turn-1"}}',
    '{"event":"stop","sequenceNumber":"5","streamSid":"MZ0","stop":{"accountSid":"AC0","callSid":"CA0"}}',
]


def test_what_a_caller_sends_reads_as_typed_events() -> None:
    connected, start, sound, dtmf, mark, stop = (tw.read(m) for m in CALLER)
    assert connected == tw.ConnectedEvent()
    assert isinstance(start, tw.StartEvent) and start.start.call_sid == "CA0" and start.stream_sid == "MZ0"
    assert start.start.media_format == tw.MediaFormat() and start.start.custom_parameters == {"lab": "1"}
    assert sound == tw.Sound(b"\xff\xff\xff\xff", "MZ0", "inbound", 1, 5, 3)
    assert isinstance(dtmf, tw.DtmfEvent) and dtmf.dtmf.digit == "1"
    assert isinstance(mark, tw.MarkEvent) and mark.mark.name == "turn-1"
    assert isinstance(stop, tw.StopEvent) and stop.stop.call_sid == "CA0"


def test_what_a_bot_sends_is_encoded_as_its_serializer_writes_it() -> None:
    """The three events a bot sends: media (no numbers), mark and clear; a field that is None is not sent."""
    assert json.loads(tw.encode(tw.media("MZ0", b"\x00\x01"))) == {
        "event": "media",
        "media": {"payload": "AAE="},
        "streamSid": "MZ0",
    }
    assert (
        tw.encode(tw.MarkEvent(tw.MarkBody("m1"), "MZ0")) == '{"event":"mark","mark":{"name":"m1"},"streamSid":"MZ0"}'
    )
    assert tw.encode(tw.ClearEvent("MZ0")) == '{"event":"clear","streamSid":"MZ0"}'
    for message in CALLER:  # every caller event survives a round trip through the lab's own encoder
        event = tw.read(message)
        if isinstance(event, tw.Sound):
            again = tw.media("MZ0", event.ulaw, event.chunk, event.timestamp_ms, event.sequence)
            assert tw.read(tw.encode(again)) == event
        else:
            assert not isinstance(event, tw.OtherEvent | Malformed)
            assert tw.read(tw.encode(event)) == event


@pytest.mark.parametrize(
    ("message", "what"),
    [
        ("{not json", "malformed JSON"),
        ("[1, 2]", "not a JSON object with a string 'event'"),
        ('{"event": 3}', "not a JSON object with a string 'event'"),
        ('{"event":"media","media":{"payload":"%%%"}}', "a media payload that is not base64"),
        ('{"event":"media","media":{"payload":"AA=="},"chunk":"x"}', None),  # a stray top-level field: ignored
        ('{"event":"media","media":{"payload":"AA==","chunk":"-1"}}', "a media chunk that is not a whole number"),
        ('{"event":"media","media":{"payload":"AA==","timestamp":"1e3"}}', "a media timestamp that is not"),
        ('{"event":"media","media":{}}', "a media message that does not read"),
        ('{"event":"media","sequenceNumber":"x1","media":{"payload":"AA=="}}', "a media sequence number that is not"),
        ('{"event":"mark","mark":{"name":7}}', "a mark message that does not read"),
        ('{"event":"start"}', "a start message that does not read"),
    ],
)
def test_a_message_that_does_not_read_is_malformed_with_a_reason(message: str, what: str | None) -> None:
    read = tw.read(message)
    if what is None:
        assert isinstance(read, tw.Sound)
    else:
        assert isinstance(read, Malformed) and read.reason.startswith(what), read


def test_an_unknown_event_is_other_and_a_binary_message_malformed() -> None:
    assert tw.read('{"event":"playedStream","name":"x"}') == tw.OtherEvent("playedStream")
    binary = tw.read(b'{"event":"connected"}')
    assert isinstance(binary, Malformed) and binary.what == "a binary message"


def test_audio_is_bounded_before_it_is_decoded() -> None:
    """A peer cannot grow the caller's memory with one message: past the bound nothing is parsed or decoded."""
    most = tw.media("MZ0", b"\xff" * tw.MOST_AUDIO_BYTES)
    assert isinstance(tw.read(tw.encode(most)), tw.Sound)
    over = tw.encode(tw.media("MZ0", b"\xff" * (tw.MOST_AUDIO_BYTES + 3)))
    refused = tw.read(over)
    assert isinstance(refused, Malformed) and refused.what == "too much audio in a media message"
    huge = '{"event":"media","media":{"payload":"' + "A" * (tw.MOST_CHARS + 1) + '"}}'
    refused = tw.read(huge)
    assert isinstance(refused, Malformed) and refused.what == "too large a message"


scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)
FIELDS = ("media", "mark", "dtmf", "start", "stop", "streamSid", "sequenceNumber", "protocol", "version")
BODY_FIELDS = ("payload", "track", "chunk", "timestamp", "name", "digit", "callSid", "mediaFormat", "tracks")
bodies = st.dictionaries(
    st.sampled_from(BODY_FIELDS),
    json_values | st.binary(max_size=64).map(lambda b: base64.b64encode(b).decode()) | st.integers(-5, 10**6).map(str),
    max_size=5,
)
event_shaped = st.builds(
    lambda event, fields, body, into: {"event": event, **fields, **({into: body} if into else {})},
    st.sampled_from(sorted(tw.KNOWN_EVENTS)) | st.text(max_size=10),
    st.dictionaries(st.sampled_from(FIELDS), json_values, max_size=4),
    bodies,
    st.sampled_from(("media", "mark", "dtmf", "start", "stop", None)),
)
anything = st.text(max_size=300) | json_values.map(json.dumps) | event_shaped.map(json.dumps) | st.binary(max_size=64)


@FUZZ
@given(anything)
def test_anything_a_peer_sends_is_read_or_refused_with_a_reason(data: str | bytes) -> None:
    try:
        event = tw.decode(data)
    except ProtocolError as exc:
        assert tw.read(data) == Malformed.of(exc)
    else:
        assert tw.read(data) == event
        if isinstance(event, tw.Sound):
            assert len(event.ulaw) <= tw.MOST_AUDIO_BYTES


# --- what each end keeps, in what order -------------------------------------------------------------------

START = tw.StartEvent(tw.StartInfo("MZ0", "AC0", "CA0"), "MZ0", "1")


def test_a_caller_keeps_a_bots_media_mark_and_clear_of_its_stream_and_counts_the_rest() -> None:
    side = FromBot("MZ0")
    audio = tw.read(tw.encode(tw.media("MZ0", b"\xff" * 160)))
    assert side.take(audio) == audio
    assert side.take(tw.ClearEvent("MZ0")) == tw.ClearEvent("MZ0")
    assert side.take(tw.MarkEvent(tw.MarkBody("m"), None)) is not None  # a mark without a stream id: this one's
    for stray in (
        START,
        tw.StopEvent(stream_sid="MZ0"),
        tw.read(tw.encode(tw.media("MZ9", b"\xff"))),
        tw.read('{"event":"hello"}'),
        tw.read("{"),
    ):
        assert side.take(stray) is None
    assert side.dropped == {
        "start from the bot": 1,
        "stop from the bot": 1,
        "media of another stream": 1,
        "an unknown event from the bot": 1,
        "malformed JSON": 1,
    }


def test_a_bot_keeps_the_callers_events_in_the_protocols_order() -> None:
    side = FromCaller()
    media = tw.read(tw.encode(tw.media("MZ0", b"\xff", chunk=1, timestamp_ms=0)))
    assert side.take(media) is None  # before the start: whose stream is it?
    assert side.take(tw.ConnectedEvent()) == tw.ConnectedEvent()
    assert side.take(START) == START and side.stream_sid == "MZ0"
    assert side.take(START) is None
    assert side.take(media) == media
    assert side.take(tw.ClearEvent("MZ0")) is None  # a bot's event, not the caller's
    assert side.take(tw.StopEvent(stream_sid="MZ0")) is not None and side.ended
    assert side.take(media) is None
    assert side.dropped == {
        "media before the start": 1,
        "a second start": 1,
        "clear from the caller": 1,
        "media after the stop": 1,
    }


@FUZZ
@given(st.lists(anything | st.sampled_from([tw.encode(START), tw.encode(tw.StopEvent(stream_sid="MZ0"))]), max_size=40))
def test_any_sequence_is_kept_or_counted_never_raised_and_the_counts_stay_bounded(messages: list[str | bytes]) -> None:
    bot, caller = FromBot("MZ0"), FromCaller()
    for data in messages:
        item = tw.read(data)
        kept = (bot.take(item) is not None) + (caller.take(item) is not None)
        assert kept <= 2
    # a drop is counted by a reason from a fixed set (event names, the decoder's kinds), never by the peer's words
    assert len(bot.dropped) + len(caller.dropped) <= 2 * (len(tw.KNOWN_EVENTS) + 20)
    assert all(count > 0 for count in (bot.dropped + caller.dropped).values())
