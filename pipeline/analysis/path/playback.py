"""The end of a turn's graph: its answer played, in one process or by a device over the wire.

In one process each sentence's audio plays after its first frame and after the previous sentence's
audio (one speaker). A device's first frame is sent once synthesised, crosses the wire, waits in the
device's buffer and plays; its last sample plays once the last frame has come and everything before
it has played.
"""

from __future__ import annotations

from collections.abc import Sequence

from pipeline.analysis.path.builder import Builder, SentenceTts, attr_int
from pipeline.analysis.path.graph import PathError
from pipeline.analysis.traces import ReadSpan
from pipeline.analysis.turns import TurnSpans
from pipeline.analysis.wire_segment import buffered
from pipeline.records.path import DEVICE_BUFFER, DOWNLINK, HANDOFF, PLAYBACK
from pipeline.tracing import names


def played(b: Builder, tts: Sequence[SentenceTts], playback: ReadSpan, where: str) -> tuple[int, int]:
    """In one process: each sentence's audio plays after its first frame and after the previous sentence's
    audio (one speaker); returns (first audible point, last played point)."""
    starts = {
        attr_int(e.attributes.get(names.SENTENCE_INDEX)): e.time_ns
        for e in playback.events
        if e.name == names.EV_SENTENCE_AUDIO
    }
    previous_audio: int | None = None
    first_audible = -1
    for n, s in enumerate(tts):
        last = n == len(tts) - 1
        plays = playback.start_ns if n == 0 else starts.get(s.sentence)
        if plays is None:  # no start of its own recorded: it played on from the previous sentence's
            continue
        waits = [(s.first_frame, DEVICE_BUFFER)] + ([(previous_audio, HANDOFF)] if previous_audio is not None else [])
        # no work of its own: the wait for the first frame (device_buffer) or the speaker (handoff) is its lag
        audible = b.add(f"sentence {s.sentence} plays", HANDOFF, plays, plays, waits, sentence=s.sentence)
        ends = playback.end_ns if last else plays + s.audio_ms * 1_000_000
        previous_audio = b.add(
            f"sentence {s.sentence} played", PLAYBACK, plays, ends, [(audible, HANDOFF)], sentence=s.sentence
        )
        if n == 0:
            first_audible = audible
    if previous_audio is None or first_audible < 0:
        raise PathError(f"{where}: the playback span records no audio starting")
    if b.at[previous_audio] != playback.end_ns:  # the last sentence's start went unrecorded
        previous_audio = b.add(
            "played to the end", PLAYBACK, b.at[previous_audio], playback.end_ns, [(previous_audio, HANDOFF)]
        )
    return first_audible, previous_audio


def over_the_wire(
    b: Builder, server: TurnSpans, device: ReadSpan, tts: Sequence[SentenceTts], playback: ReadSpan, where: str
) -> tuple[int, int]:
    """A device's turn: the server sends the first frame once synthesised, it crosses the wire, the device
    buffers and plays it; the last sample plays once the last frame has come and everything before it
    has played. Returns (first audible point, last played point)."""
    downlink = server.first(names.DOWNLINK)
    received, audible_ns = buffered(device)  # the device's buffer, as a row's device_buffer_ms
    last_received = device.event_ns(names.EV_LAST_AUDIO_RECEIVED)
    missing = [
        what
        for what, found in (
            (f"a server {names.DOWNLINK} span", downlink),
            (f"the device's {names.EV_FIRST_AUDIO_RECEIVED} event", received),
            (f"the device's {names.EV_FIRST_AUDIBLE} event", audible_ns),
            (f"the device's {names.EV_LAST_AUDIO_RECEIVED} event", last_received),
        )
        if found is None
    ]
    if missing:
        raise PathError(f"{where}: no {', no '.join(missing)}: a device's path needs them")
    assert downlink is not None and received is not None and audible_ns is not None and last_received is not None
    sent = b.add("first frame sent", HANDOFF, downlink.start_ns, downlink.start_ns, [(tts[0].first_frame, HANDOFF)])
    arrived = b.add("first frame received", DOWNLINK, downlink.start_ns, received, [(sent, HANDOFF)])
    audible = b.add("first sound", DEVICE_BUFFER, received, audible_ns, [(arrived, HANDOFF)])
    last_sent = b.add("last frame sent", HANDOFF, downlink.end_ns, downlink.end_ns, [(tts[-1].done, HANDOFF)])
    last_arrived = b.add("last frame received", DOWNLINK, downlink.end_ns, last_received, [(last_sent, HANDOFF)])
    audio_ns = attr_int(playback.attributes.get(names.AUDIO_MS)) * 1_000_000
    back_to_back = b.add("the answer played", PLAYBACK, audible_ns, audible_ns + audio_ns, [(audible, HANDOFF)])
    # the last sample plays when everything before it has (gaps: the device waited for audio) or once the
    # last frame, come late, has played out of the buffer
    last = b.add(
        "last sample played",
        HANDOFF,
        playback.end_ns,
        playback.end_ns,
        [(back_to_back, HANDOFF), (last_arrived, PLAYBACK)],
    )
    return audible, last
