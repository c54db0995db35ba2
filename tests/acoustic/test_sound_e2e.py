"""The whole path by ear: the emulator's user and speaker into a real sound server, the room recorded, the
silence measured from sound and checked against the traces.

``pipeline.serve`` (the stub stages) answers an emulated device (``replay --server``); the device
voices each question (``--voice``) and plays each answer (``--speaker``) into a PulseAudio null
sink; the test records the sink's monitor as a microphone beside the device would. From that
recording alone (and the question clips), per turn: where the clip was said (cross-correlation)
and the answer's first audible sample (the clip taken out: on a clean sink the rest is the answer).
The traces say the same interval: the device's first frame was captured from 60 ms before it was
sent (the device span's start) to the first audible frame (``first_audible_played``). Both agree
within 20 ms on every turn. The reading of the recording and the traces is ``labtools.heard``, which
``scripts/bench_sound.py`` measures with too.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import soundfile

from labtools.heard import answer_onset, clip_pcm, find, traced
from pipeline import replay
from pipeline.acoustic.measure import measure_recording
from pipeline.acoustic.questions import load_questions as acoustic_questions
from pipeline.acoustic.sound import Pcm, Recorder
from pipeline.acoustic.sound_server import PulseServer
from pipeline.analysis.read import read_traces
from pipeline.analysis.traces import trace_files
from pipeline.events import SAMPLE_RATE
from pipeline.report.acoustic_match import match
from pipeline.settings.config import load_config
from pipeline.settings.fixtures import load_questions
from tests.sound_server import pulse
from tests.transport.test_device_server_e2e import FIXTURES, SIMULATOR, start_server, stop

pytestmark = [pytest.mark.sound, pytest.mark.realtime, pytest.mark.transport]
__all__ = ["pulse"]  # the fixture, used by name


def heard_through_the_sink(tmp_path: Path) -> tuple[Pcm, Recorder]:
    """Two questions of an emulated device voicing them and playing its answers into the sink, against
    ``pipeline.serve``; the sink's monitor as recorded (also written to ``room.wav``), and its recorder."""
    server, url = start_server(tmp_path / "server")
    common = [str(FIXTURES), "--config", str(SIMULATOR), "--limit", "2", "--rounds", "1", "--quiet"]
    try:
        with Recorder("pulse") as room:
            code = replay.main(
                [*common, "--server", url, "--speaker", "pulse", "--voice", "pulse", "--out", str(tmp_path / "dev")],
                env={},
            )
            heard = room.samples()
    finally:
        stop(server)
    assert code == 0
    soundfile.write(tmp_path / "room.wav", heard, SAMPLE_RATE, subtype="PCM_16")  # kept for a failing run's reader
    return heard, room


def test_the_emulator_heard_through_a_sound_server_agrees_with_its_traces(pulse: PulseServer, tmp_path: Path) -> None:
    heard, room = heard_through_the_sink(tmp_path)
    assert room.overflows == 0 and room.gaps_s == 0.0
    questions = {q.id: q for q in load_questions(FIXTURES).questions}
    trace = traced(tmp_path / "dev")
    assert len(trace) == 2
    differences = {}
    for qid, (trace_ms, _silence) in trace.items():
        clip = clip_pcm(questions[qid].audio)
        at = find(heard, clip)
        onset = answer_onset(heard, clip, at)
        assert onset is not None, f"{qid}: no answer heard in {tmp_path / 'room.wav'}"
        differences[qid] = round((onset - at) * 1000 / SAMPLE_RATE - trace_ms, 1)
    print(f"heard - traced, question start -> first audible (ms): {differences}")
    assert all(abs(d) <= 20 for d in differences.values()), differences


def test_the_acoustic_measurement_of_the_sink_agrees_with_the_traces(pulse: PulseServer, tmp_path: Path) -> None:
    """Each turn's silence against the traces' from the same end of speech, as the report pairs them
    (``acoustic_match``): the fixtures carry a truth, so the silence from the true end on both sides."""
    heard_through_the_sink(tmp_path)
    wav = tmp_path / "room.wav"
    rows = measure_recording(wav, acoustic_questions(FIXTURES, load_config([SIMULATOR])), layout="mono")
    assert all(r.ok and r.speech_end_from == "truth" for r in rows), [r.error for r in rows if not r.ok]
    turns = read_traces(trace_files(tmp_path / "dev" / "traces"), workers=1).rows
    matches, unmatched = match(turns, rows)
    assert len(matches) == 2 and not unmatched, unmatched
    assert {m.compared for m in matches} == {"true_end_first_audible_ms"}
    differences = {m.row.question_id: round(-(m.difference_ms or float("nan")), 1) for m in matches}
    print(f"acoustic - trace silence from the true end (ms): {differences}")
    assert all(abs(d) <= 20 for d in differences.values()), differences
