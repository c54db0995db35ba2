"""The end-point scored against the truth, on the virtual clock: every number exact.

The question: a tone standing in for speech from 600 to 1800 ms, a pause of 480 ms, speech again until 2880 ms,
then silence (60 ms frames). Its truth says so. A VAD that waits 300 ms ends inside the pause; one that waits
600 ms holds the question together and ends 600 ms after the user really finished.
"""

from __future__ import annotations

from pathlib import Path

from pipeline.analysis.read import rows_from_spans
from pipeline.analysis.traces import ReadProblems, read_trace_file
from pipeline.clock import VirtualClock, run_on_clock
from pipeline.events import AudioFrame
from pipeline.records.truth import Pause, Truth
from pipeline.records.turn_row import TRUTH_COLUMNS, TurnRow
from pipeline.run.device_side import mark_true_end, utterances_in
from pipeline.run.turn import run_turn
from pipeline.settings.fixtures import Question
from pipeline.tracing import names
from pipeline.tracing.export import Tracing
from pipeline.tracing.timeline import DeviceTiming, TurnTimeline
from stages.llm.scripted import ScriptedReply
from stages.vad.endpointer import FrameVad
from stages.vad.energy import EnergyClassifier
from tests.scenario import SILENCE, TONE, ms, stages
from tests.tracing.test_export_roundtrip import ATTRS

PAUSED = [SILENCE] * 10 + [TONE] * 20 + [SILENCE] * 8 + [TONE] * 10 + [SILENCE] * 20
TRUTH = Truth("q1.wav", 600.0, 2880.0, (Pause(1800.0, 2280.0),))
QUESTION = Question("q1", "en", "knowledge", "Question?", Path("q1.wav"), truth=TRUTH)
REPLY = ScriptedReply("Hi. Fine.")


def frames() -> list[AudioFrame]:
    return [AudioFrame(seq=i, pcm=pcm) for i, pcm in enumerate(PAUSED)]


def turn(silence_ms: int) -> TurnTimeline:
    clock = VirtualClock()
    tl = run_on_clock(run_turn(frames(), stages(REPLY, silence_ms=silence_ms), clock), clock)
    mark_true_end(tl, QUESTION)
    return tl


def row_of(tl: TurnTimeline, tmp_path: Path, truth: bool = True, utterances: int = 1) -> TurnRow:
    attrs = dict(ATTRS)
    if truth:
        attrs[names.TRUTH_SPEECH_END_MS] = TRUTH.speech_end_ms
        attrs[names.TRUTH_PAUSES] = "1800-2280"
        attrs[names.TRUTH_UTTERANCES] = utterances
    else:
        tl.vad.true_end_ns = None
    tracing = Tracing(tmp_path / "t.jsonl", "test")
    tracing.emit_turn(tl, attrs)
    tracing.shutdown()
    problems = ReadProblems()
    [row] = rows_from_spans(read_trace_file(tmp_path / "t.jsonl", problems), problems)
    return row


def test_a_detector_that_ends_inside_a_pause_cuts_the_user_off_and_answers_before_they_finish(tmp_path: Path) -> None:
    tl = turn(silence_ms=300)
    assert tl.ok, tl.error_message
    # the last speech frame (47, ending at 2880 ms) arrives at 2880 ms; the VAD declared after frame 34
    assert (ms(tl, tl.vad.true_end_ns), ms(tl, tl.vad.end_ns), tl.vad.declared_at_ms) == (2880, 2100, 2100)
    row = row_of(tl, tmp_path, utterances=2)
    assert (row.cut_off, row.cut_off_by, row.utterances, row.endpoint_delay_ms) == (1, "declared", 2, -780.0)
    # from its own end-point the answer came after 1 s; from the true end, 80 ms before the user finished
    assert (row.first_audio_ms, row.true_end_first_audio_ms) == (1000.0, -80.0)


def test_a_detector_that_waits_out_the_pause_gives_the_exact_end_point_delay(tmp_path: Path) -> None:
    tl = turn(silence_ms=600)
    assert tl.ok, tl.error_message
    assert (ms(tl, tl.vad.true_end_ns), ms(tl, tl.vad.end_ns), tl.vad.declared_at_ms) == (2880, 3480, 3480)
    row = row_of(tl, tmp_path)
    assert (row.cut_off, row.cut_off_by, row.utterances, row.endpoint_delay_ms) == (0, "declared", 1, 600.0)
    assert (row.first_audio_ms, row.true_end_first_audio_ms) == (1300.0, 1300.0)


def test_a_question_without_truth_leaves_every_truth_column_empty_never_zero(tmp_path: Path) -> None:
    row = row_of(turn(silence_ms=300), tmp_path, truth=False)
    assert [getattr(row, c) for c in TRUTH_COLUMNS] == [None, "", None, None, None, None]
    assert row.first_audio_ms == 1000.0


def test_the_utterances_a_detector_makes_of_the_whole_question() -> None:
    clock = VirtualClock()

    def count(silence_ms: int) -> int:
        return run_on_clock(utterances_in(lambda: FrameVad(EnergyClassifier(), silence_ms=silence_ms), frames()), clock)

    assert (count(300), count(600)) == (2, 1)
    silent = [AudioFrame(seq=i, pcm=SILENCE) for i in range(20)]
    assert run_on_clock(utterances_in(lambda: FrameVad(EnergyClassifier(), silence_ms=300), silent), clock) == 0


def device_alone(tmp_path: Path, stt_at_ms: tuple[int, ...]) -> TurnRow:
    """A device's turn read without its server's spans (a server that writes none): its VAD span declares
    nothing, the server's stt messages came at ``stt_at_ms`` (turn ms); the user paused at 1800 ms and really
    finished at 2880 ms."""
    tmp_path.mkdir(exist_ok=True)
    tl = turn(silence_ms=600)
    tl.vad.declared_at_ms = None
    at = [tl.start_ns + t * 1_000_000 for t in stt_at_ms]
    tl.device = DeviceTiming("websocket", 1, tl.start_ns, tl.start_ns + 3_000_000_000)
    tl.device.stt_ns, tl.device.stt_at = max(at, default=None), at
    return row_of(tl, tmp_path, utterances=1)


def test_a_device_alone_sees_a_cut_when_the_servers_text_comes_before_the_user_finished(tmp_path: Path) -> None:
    row = device_alone(tmp_path, (2500,))
    # the device cannot say what its server's detector makes of the question, nor when it declared the end
    assert (row.cut_off, row.cut_off_by, row.utterances, row.endpoint_delay_ms) == (1, "stt", None, None)


def test_a_device_alone_sees_a_cut_when_the_server_recognised_two_utterances(tmp_path: Path) -> None:
    twice, once = (device_alone(tmp_path / n, at) for n, at in (("a", (3000, 4200)), ("b", (3000,))))
    assert (twice.cut_off, once.cut_off) == (1, 0)


def test_a_turn_answered_and_ended_before_the_user_finished_was_cut(tmp_path: Path) -> None:
    tmp_path.mkdir(exist_ok=True)
    tl = turn(silence_ms=600)
    tl.vad.declared_at_ms, tl.vad.true_end_ns = None, None  # the device stopped before sending the true end
    tl.device = DeviceTiming("websocket", 1, tl.start_ns, tl.start_ns + 2_000_000_000)
    tl.device.stt_ns = tl.start_ns + 1_900_000_000
    tl.device.stt_at = [tl.device.stt_ns]
    row = row_of(tl, tmp_path)
    assert (row.cut_off, row.cut_off_by, row.true_end_first_audible_ms) == (1, "stt", None)


def test_a_device_alone_without_any_recognised_text_has_nothing_to_judge_by(tmp_path: Path) -> None:
    row = device_alone(tmp_path, ())
    assert (row.cut_off, row.cut_off_by) == (None, "")
