"""A run: rounds x questions, in the same order every round, first round marked warm-up.

Each finished turn becomes spans, the spans one trace line written to the trace
file, and the line goes to the sink the entry point passed in (which turns it into a
bench.csv row), all before the next turn starts, so a run killed mid-way keeps every
finished turn. The run never computes a row itself: every number comes from the trace.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from pipeline.clock import Clock
from pipeline.endpoints.load import LoadProbe, TurnLoad
from pipeline.endpoints.thermal import read_temp_c
from pipeline.events import AudioFrame
from pipeline.run.assembly import Engines, build_stages, build_vad, open_chat
from pipeline.run.device import speech_end_ms
from pipeline.run.turn import run_turn
from pipeline.settings.audio import BadAudio, LoadedAudio, load_audio
from pipeline.settings.config import Config
from pipeline.settings.fixtures import Question, QuestionSet
from pipeline.tracing import names
from pipeline.tracing.export import Tracing
from pipeline.tracing.spans import Attributes
from pipeline.tracing.timeline import TurnTimeline
from stages.llm import Message

Progress = Callable[[str], None]
TraceSink = Callable[[dict[str, Any]], None]  # takes each finished turn's trace line (OTLP JSON)


class RemoteTurns(Protocol):
    """A server reached over a real transport, as a device reaches it (``async with`` holds the session)."""

    async def __aenter__(self) -> Any: ...

    async def __aexit__(self, *exc: object) -> None: ...

    async def turn(
        self, frames: Sequence[AudioFrame], speech_end_ms: int | None, question_id: str, round_no: int, traceparent: str
    ) -> TurnTimeline: ...


@dataclass(frozen=True, slots=True)
class Run:
    run_id: str
    config: Config
    config_id: str
    questions: QuestionSet
    clock: Clock
    engines: Engines
    api_key: str | None = field(default=None, repr=False)  # for the cloud LLM only; never traced or written
    remote: RemoteTurns | None = None  # the server across a transport; None: the pipeline runs in this process

    @property
    def config_json(self) -> str:
        return json.dumps(self.config.as_dict(), sort_keys=True, separators=(",", ":"))

    def selected(self) -> tuple[Question, ...]:
        limit = self.config.run.limit
        return self.questions.questions[:limit] if limit else self.questions.questions


def turn_attributes(run: Run, question: Question, round_no: int, note: str, load: TurnLoad | None) -> Attributes:
    attrs: Attributes = {
        names.SCHEMA: names.SCHEMA_VERSION,
        names.RUN_ID: run.run_id,
        names.CONDITION: run.config.run.condition,
        names.CONFIG_ID: run.config_id,
        names.CLOCK: run.clock.kind,
        names.QUESTION_ID: question.id,
        names.QUESTION_COUNT: len(run.selected()),
        names.ROUND: round_no,
        names.WARMUP: round_no == 1,
        names.LANGUAGE: question.language,
        names.CATEGORY: question.category,
        names.REFERENCE_TEXT: question.text,
        names.EXPECTED_KEYWORDS: question.keywords,
        names.CONFIG_JSON: run.config_json,
        names.LLM_ENDPOINT: run.engines.endpoint,
        names.NOTE: note,
    }
    temp = read_temp_c() if run.clock.kind == "real" else None
    if temp is not None:
        attrs[names.TEMP_C] = temp
    if load is not None:
        attrs[names.HOST_OTHER_CPU_MS] = load.other_cpu_ms
        if load.load_avg_1m is not None:
            attrs[names.HOST_LOAD_AVG_1M] = load.load_avg_1m
    return attrs


def _load_all(questions: tuple[Question, ...]) -> dict[str, LoadedAudio | BadAudio]:
    loaded: dict[str, LoadedAudio | BadAudio] = {}
    for q in questions:
        try:
            loaded[q.id] = load_audio(q.audio)
        except BadAudio as exc:
            loaded[q.id] = exc
    return loaded


async def run_session(run: Run, tracing: Tracing, sink: TraceSink, progress: Progress) -> None:
    cfg = run.config
    questions = run.selected()
    audio = _load_all(questions)
    for q in questions:
        if isinstance(audio[q.id], BadAudio):
            progress(f"bad audio: {audio[q.id]}")
    tracing.start_session(
        {
            names.SCHEMA: names.SCHEMA_VERSION,
            names.RUN_ID: run.run_id,
            names.CONDITION: cfg.run.condition,
            names.CONFIG_ID: run.config_id,
            names.CLOCK: run.clock.kind,
            names.CONFIG_JSON: run.config_json,
        },
        run.clock.now_ns(),
    )
    answers = {q.text: q.answer for q in questions if q.answer}
    try:
        if run.remote is not None:
            async with run.remote:
                await _rounds(run, questions, audio, tracing, sink)
        else:
            async with open_chat(cfg, run.engines, run.api_key, answers):
                await _rounds(run, questions, audio, tracing, sink)
    finally:
        tracing.end_session(run.clock.now_ns())


async def _rounds(
    run: Run,
    questions: tuple[Question, ...],
    audio: dict[str, LoadedAudio | BadAudio],
    tracing: Tracing,
    sink: TraceSink,
) -> None:
    cfg = run.config
    history: list[Message] = []
    speech_ends: dict[str, int | None] = {}  # a device's clips, by question: where the VAD ends the speech
    probe = LoadProbe() if run.clock.kind == "real" else None  # other load means nothing in simulated time
    for round_no in range(1, cfg.run.rounds + 1):
        for index, q in enumerate(questions):
            clip = audio[q.id]
            before = probe.sample() if probe else None
            if isinstance(clip, BadAudio):
                timeline = _failed_timeline(run.clock, "bad_audio", str(clip))
                note = str(clip)
            elif run.remote is not None:  # the server keeps the conversation's history
                if q.id not in speech_ends:  # the same clip every round: found once
                    speech_ends[q.id] = await speech_end_ms(build_vad(cfg, run.engines, q), clip.frames)
                # the turn span's id, drawn now, goes to the server: its spans join this turn's trace
                traceparent = tracing.reserve_turn()
                timeline = await run.remote.turn(clip.frames, speech_ends[q.id], q.id, round_no, traceparent)
                note = clip.note
            else:
                context = tuple(history)
                stages = build_stages(cfg, run.engines, q, round_no * 1000 + index, context)
                timeline = await run_turn(
                    clip.frames,
                    stages,
                    run.clock,
                    realtime=cfg.run.pacing == "realtime",
                    timeout_s=cfg.run.turn_timeout_s,
                )
                note = clip.note
                if timeline.ok:
                    history = keep_history(history + exchange(timeline), cfg.llm.history_rounds)
            load = probe.between(before, probe.sample()) if probe else None
            sink(tracing.emit_turn(timeline, turn_attributes(run, q, round_no, note, load)))


def keep_history(history: list[Message], rounds: int) -> list[Message]:
    """The last ``rounds`` exchanges: only those are ever sent, so only those are kept."""
    return history[-2 * rounds :] if rounds else []


def exchange(timeline: TurnTimeline) -> list[Message]:
    """The turn as conversation history: what was heard and what was said."""
    answer = " ".join(s.text for s in timeline.sentences)
    return [Message("user", timeline.asr.text), Message("assistant", answer)]


def _failed_timeline(clock: Clock, error_type: str, message: str) -> TurnTimeline:
    now = clock.now_ns()
    return TurnTimeline(start_ns=now, end_ns=now, error_type=error_type, error_message=message)
