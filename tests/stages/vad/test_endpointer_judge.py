"""The lab's end-pointer with what the end-of-turn detectors add to it, on scripted probabilities: a judge asked at
each pause (Smart Turn's place), the decisions it records, and a classifier that meters its own CPU (TEN's place).
Without either, the end-pointer yields what it always did; the recorder files each decision on the VAD span.

Frames are 60 ms. The script: frames 0-4 silence, 5-14 speech, silence after. Speech is confirmed at frame 6 (two
frames of speech, ``min_speech_ms`` 120): it started at 300 ms and ends at 900 ms (the end of frame 14).
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from pipeline.events import (
    FRAME_BYTES,
    VERDICT_END,
    VERDICT_END_OF_INPUT,
    VERDICT_FINISHED,
    VERDICT_MAX_SILENCE,
    VERDICT_WAIT,
    AudioFrame,
    Event,
    SpeechEnd,
    SpeechStart,
    VadDecision,
    thread_cpu_ns,
)
from pipeline.tracing import names
from pipeline.tracing.records import SpanIds
from pipeline.tracing.spans import build_turn_spans
from stages.vad.endpointer import FrameVad, MeteredClassifier
from tests.harness import run_stage

SPEECH = [0.0] * 5 + [0.9] * 10


class Scripted:
    """Frame k's probability is ``probs[k]``, silence after the script."""

    name = "scripted"

    def __init__(self, probs: Sequence[float]) -> None:
        self.probs = list(probs)
        self.calls = 0

    def reset(self) -> None:
        self.calls = 0

    async def speech_probability(self, pcm: bytes) -> float:
        self.calls += 1
        return self.probs[self.calls - 1] if self.calls <= len(self.probs) else 0.0


class Metered(Scripted):
    """A scripted classifier that says it spent 1 ms of CPU on every frame."""

    def __init__(self, probs: Sequence[float]) -> None:
        super().__init__(probs)
        self.reset()

    def reset(self) -> None:
        super().reset()
        self.cpu_ns = 0
        self.frames = 0

    async def speech_probability(self, pcm: bytes) -> float:
        self.cpu_ns += 1_000_000
        self.frames += 1
        return await super().speech_probability(pcm)


class Judge:
    """Says each verdict of ``verdicts`` in turn (then "finished"), writing down what it was asked and heard."""

    name = "judged"
    attributes: tuple[tuple[str, str | int | float | bool], ...] = (("vad.turn_threshold", 0.5),)

    def __init__(self, verdicts: Sequence[str], max_silence_ms: int = 1000) -> None:
        self.verdicts = list(verdicts)
        self.max_silence_ms = max_silence_ms
        self.asked: list[tuple[int, int, int]] = []
        self.heard = 0

    def reset(self) -> None:
        self.heard = 0

    def hear(self, pcm: bytes) -> None:
        assert len(pcm) == FRAME_BYTES
        self.heard += 1

    async def judge(self, speech_start_ms: int, speech_end_ms: int, at_ms: int) -> VadDecision:
        self.asked.append((speech_start_ms, speech_end_ms, at_ms))
        verdict = self.verdicts.pop(0) if self.verdicts else VERDICT_FINISHED
        return VadDecision(verdict, at_ms, speech_end_ms, probability=0.9 if verdict == VERDICT_FINISHED else 0.1)


def frames(n: int) -> list[AudioFrame]:
    return [AudioFrame(seq=i, pcm=bytes(FRAME_BYTES)) for i in range(n)]


def outline(events: list[Event]) -> list[object]:
    """Everything but the frames, and how many frames were passed on."""
    return [e for e in events if not isinstance(e, AudioFrame)] + [sum(isinstance(e, AudioFrame) for e in events)]


def test_without_a_judge_or_a_meter_the_end_pointer_records_nothing_new() -> None:
    events = run_stage(FrameVad(Scripted(SPEECH), silence_ms=200), frames(30)).events
    assert outline(events) == [SpeechStart(300), SpeechEnd(900), 15]  # frames 4-18: pre-roll, speech, the silence
    assert isinstance(events[-2], AudioFrame)  # the end-point comes right after the frame it was decided on


def test_a_metered_classifier_has_its_end_point_recorded_with_the_cpu_of_every_frame() -> None:
    classifier = Metered(SPEECH)
    assert isinstance(classifier, MeteredClassifier) and not isinstance(Scripted(SPEECH), MeteredClassifier)
    events = run_stage(FrameVad(classifier, silence_ms=200), frames(30)).events
    # 200 ms of silence is complete on frame 18 (ending at 1140 ms); 19 frames classified by then
    end = VadDecision(VERDICT_END, 1140, 900, cpu_ns=19_000_000, frames=19)
    assert outline(events) == [SpeechStart(300), end, SpeechEnd(900), 15]


def test_a_metered_classifier_records_the_end_of_input_when_the_audio_runs_out_mid_utterance() -> None:
    events = run_stage(FrameVad(Metered(SPEECH), silence_ms=200), frames(12)).events
    assert outline(events)[1:3] == [
        VadDecision(VERDICT_END_OF_INPUT, 720, 720, cpu_ns=12_000_000, frames=12),
        SpeechEnd(720),
    ]


def test_a_judge_that_says_finished_ends_the_utterance_at_the_first_pause() -> None:
    judge = Judge([VERDICT_FINISHED])
    vad = FrameVad(Scripted(SPEECH), silence_ms=200, judge=judge)
    events = run_stage(vad, frames(30)).events
    assert judge.asked == [(300, 900, 1140)] and judge.heard == 19  # every frame heard, speech or not
    assert outline(events) == [SpeechStart(300), VadDecision(VERDICT_FINISHED, 1140, 900, 0.9), SpeechEnd(900), 15]
    assert vad.info.impl == "judged"
    assert dict(vad.info.attributes) == {
        "vad.inner": "scripted",
        "vad.silence_ms": 200,
        "vad.threshold": 0.5,
        "vad.turn_threshold": 0.5,
    }


def test_after_a_wait_the_pause_grows_to_the_judges_limit_and_ends_the_turn_all_the_same() -> None:
    judge = Judge([VERDICT_WAIT], max_silence_ms=1000)
    events = run_stage(FrameVad(Scripted(SPEECH), silence_ms=200, judge=judge), frames(60)).events
    # asked once only; 1000 ms of silence after 900 ms is complete on frame 31 (ending at 1920 ms)
    assert judge.asked == [(300, 900, 1140)]
    assert outline(events) == [
        SpeechStart(300),
        VadDecision(VERDICT_WAIT, 1140, 900, 0.1),
        VadDecision(VERDICT_MAX_SILENCE, 1920, 900),
        SpeechEnd(900),
        28,  # frames 4-31
    ]


def test_after_a_wait_speech_that_resumes_continues_the_same_utterance_and_its_next_pause_is_judged() -> None:
    script = [*SPEECH, *[0.0] * 6, *[0.9] * 5]  # a pause of 360 ms (frames 15-20), speech again (21-25)
    judge = Judge([VERDICT_WAIT, VERDICT_FINISHED])
    events = run_stage(FrameVad(Scripted(script), silence_ms=200, judge=judge), frames(60)).events
    assert judge.asked == [(300, 900, 1140), (300, 1560, 1800)]
    assert outline(events) == [
        SpeechStart(300),
        VadDecision(VERDICT_WAIT, 1140, 900, 0.1),
        VadDecision(VERDICT_FINISHED, 1800, 1560, 0.9),
        SpeechEnd(1560),
        26,  # frames 4-29: one utterance, the pause inside it
    ]


def test_with_a_judge_the_end_of_input_is_recorded_too() -> None:
    events = run_stage(FrameVad(Scripted(SPEECH), silence_ms=200, judge=Judge([VERDICT_WAIT])), frames(25)).events
    assert outline(events)[2:4] == [VadDecision(VERDICT_END_OF_INPUT, 1500, 900), SpeechEnd(900)]


def test_the_recorder_files_each_decision_and_the_vad_span_carries_it_as_an_event() -> None:
    judge = Judge([VERDICT_WAIT], max_silence_ms=1000)
    run = run_stage(FrameVad(Scripted(SPEECH), silence_ms=200, judge=judge), frames(60))
    decisions = run.timeline.vad.decisions
    assert [d.verdict for _, d in decisions] == [VERDICT_WAIT, VERDICT_MAX_SILENCE]
    assert decisions[-1][0] == run.timeline.vad.end_ns  # stamped as it passed, just before the end-point
    run.timeline.end_ns = run.timeline.vad.end_ns
    [vad] = [s for s in build_turn_spans(SpanIds(), None, run.timeline, {}) if s.name == names.VAD]
    events = [e for e in vad.events if e.name == names.EV_VAD_DECISION]
    assert [e.time_ns for e in events] == [t for t, _ in decisions]
    assert [dict(e.attributes or {}) for e in events] == [
        {
            names.DECISION_VERDICT: VERDICT_WAIT,
            names.DECISION_AT_MS: 1140,
            names.SPEECH_END_MS: 900,
            names.DECISION_PROBABILITY: 0.1,
        },
        {names.DECISION_VERDICT: VERDICT_MAX_SILENCE, names.DECISION_AT_MS: 1920, names.SPEECH_END_MS: 900},
    ]
    assert vad.attributes[names.STAGE_IMPL] == "judged"


def test_a_metered_decision_carries_its_cpu_in_ms_and_its_frames_on_the_span() -> None:
    run = run_stage(FrameVad(Metered(SPEECH), silence_ms=200), frames(30))
    run.timeline.end_ns = run.timeline.vad.end_ns
    [vad] = [s for s in build_turn_spans(SpanIds(), None, run.timeline, {}) if s.name == names.VAD]
    [event] = [e for e in vad.events if e.name == names.EV_VAD_DECISION]
    assert event.attributes is not None
    assert (event.attributes[names.DECISION_CPU_MS], event.attributes[names.DECISION_FRAMES]) == (19.0, 19)


def test_the_thread_cpu_clock_counts_work_done_and_not_time_waited() -> None:
    start = thread_cpu_ns()
    total = sum(i * i for i in range(300_000))
    worked = thread_cpu_ns() - start
    assert total > 0 and worked > 0
    import threading

    done = threading.Event()
    start = thread_cpu_ns()
    done.wait(0.2)  # 200 ms asleep
    assert thread_cpu_ns() - start < 50_000_000


@pytest.mark.parametrize("verdict", [VERDICT_FINISHED, VERDICT_WAIT])
def test_a_judge_is_asked_once_per_pause_not_on_every_quiet_frame(verdict: str) -> None:
    judge = Judge([verdict], max_silence_ms=5000)
    run_stage(FrameVad(Scripted(SPEECH), silence_ms=200, judge=judge), frames(40))
    assert len(judge.asked) == 1
