"""A run: devices x rounds x questions, each device in its own order every round, first round warm-up.

Each finished turn becomes spans, the spans one trace line written to the trace
file, and the line goes to the sink the entry point passed in (which turns it into a
bench.csv row), all before the next turn starts, so a run killed mid-way keeps every
finished turn. The run never computes a row itself: every number comes from the trace.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from pipeline.clock import Clock
from pipeline.endpoints.machine_load import LoadProbe, TurnLoad
from pipeline.endpoints.thermometer import Thermometer
from pipeline.fleet.arrivals import rotated, start_offsets_ms
from pipeline.fleet.background import BackgroundLoad
from pipeline.fleet.scheduler import BACKGROUND, Scheduler
from pipeline.run.assembly import Engines, build_stages, build_vad, chat_backend, open_chat
from pipeline.run.cpu import CpuMeter
from pipeline.run.device_side import Ask, mark_true_end, speech_end_ms, true_end_ms, utterances_in
from pipeline.run.gate import OPEN, TurnGate
from pipeline.run.turn import run_turn
from pipeline.settings.audio import BadAudio, LoadedAudio, load_audio
from pipeline.settings.config import Config
from pipeline.settings.fixtures import Question, QuestionSet
from pipeline.tracing import names
from pipeline.tracing.export import Tracing
from pipeline.tracing.spans import Attributes
from pipeline.tracing.timeline import JobTimeline, TurnTimeline
from stages.llm import ChatBackend, Message
from stages.registry import TurnInputs

STOPPED = "stopped"  # a turn the run's stop (SIGTERM, Ctrl-C) cut: a failed row, never a lost one
Progress = Callable[[str], None]
TraceSink = Callable[[dict[str, Any]], None]  # takes each finished turn's trace line (OTLP JSON)


class RemoteTurns(Protocol):
    """A server reached over a real transport, as a device reaches it (``async with`` holds the session).

    ``then`` is the question the device asks next: a user who barges in by speaking starts it
    mid-answer, and the device's next ``turn`` call continues that turn instead of starting one."""

    async def __aenter__(self) -> Any: ...

    async def __aexit__(self, *exc: object) -> None: ...

    async def turn(self, ask: Ask, then: Ask | None = None) -> TurnTimeline: ...


@dataclass(frozen=True, slots=True)
class Run:
    """One run: its identity, settings, questions, clock and loaded engines, and where its turns are served."""

    run_id: str
    config: Config
    config_id: str
    questions: QuestionSet
    clock: Clock
    engines: Engines
    api_key: str | None = field(default=None, repr=False)  # for the cloud LLM only; never traced or written
    # the server across a transport, one session per device index; None: the pipeline runs in this process
    remote: Callable[[int], RemoteTurns] | None = None
    only_devices: tuple[int, ...] = ()  # the devices this process runs (a worker's share); () = all of them
    gate: TurnGate = OPEN  # told before each turn (interleaved conditions, ``pipeline.run.gate``); one device only

    @property
    def config_json(self) -> str:
        return json.dumps(self.config.as_dict(), sort_keys=True, separators=(",", ":"))

    def selected(self) -> tuple[Question, ...]:
        limit = self.config.run.limit
        return self.questions.questions[:limit] if limit else self.questions.questions


def session_attributes(run: Run) -> Attributes:
    """The session span's attributes: what identifies the run, whether it replays fixtures or serves devices."""
    return {
        names.SCHEMA: names.SCHEMA_VERSION,
        names.RUN_ID: run.run_id,
        names.CONDITION: run.config.run.condition,
        names.CONFIG_ID: run.config_id,
        names.CLOCK: run.clock.kind,
        names.CONFIG_JSON: run.config_json,
    }


def turn_attributes(
    run: Run, question: Question, round_no: int, note: str, load: TurnLoad | None, temp: float | None = None
) -> Attributes:
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
    if question.truth is not None:
        truth = question.truth
        attrs[names.TRUTH_SPEECH_END_MS] = truth.speech_end_ms
        attrs[names.TRUTH_PAUSES] = ";".join(f"{p.start_ms:g}-{p.end_ms:g}" for p in truth.pauses)
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
    tracing.start_session(session_attributes(run), run.clock.now_ns())
    answers = {q.text: q.answer for q in questions if q.answer}
    if run.remote is None:
        attach_scheduler(run)
    # a temperature source that fails is said once, even under --quiet (M20: why temp_c is empty)
    thermometer = Thermometer.for_run(cfg.probe, run.clock, lambda m: print(f"warning: {m}", file=sys.stderr))
    fleet = _Fleet(run, questions, audio, tracing, sink, thermometer)
    try:
        async with thermometer:
            if run.remote is not None:
                await fleet.devices()
            else:
                async with open_chat(cfg, run.engines, run.api_key, answers):
                    await fleet.devices()
    finally:
        tracing.end_session(run.clock.now_ns())


def attach_scheduler(run: Run) -> None:
    """Put the configured scheduler in front of the model this process's turns share (if one is set)."""
    s = run.config.scheduler
    if s.concurrency:
        run.engines.scheduler = Scheduler(run.clock, s.concurrency, s.when_full, s.max_waiting, s.priority)


class _Fleet:
    """The run's devices (one unless ``[fleet] devices`` says more), each with its own session,
    history and question order, started at their arrival times, plus any background load."""

    def __init__(
        self,
        run: Run,
        questions: tuple[Question, ...],
        audio: dict[str, LoadedAudio | BadAudio],
        tracing: Tracing,
        sink: TraceSink,
        thermometer: Thermometer,
    ) -> None:
        self.run, self.questions, self.audio, self.tracing, self.sink = run, questions, audio, tracing, sink
        self.thermometer = thermometer
        self.speech_ends: dict[str, int | None] = {}  # a device's clips, by question: where the VAD ends the speech
        self.utterances: dict[str, int] = {}  # a question with a truth: the utterances its detector makes of it
        # other load means nothing in simulated time
        self.probe = LoadProbe() if run.clock.kind == "real" else None
        self.meter = CpuMeter() if run.clock.kind == "real" else None

    async def devices(self) -> None:
        fleet = self.run.config.fleet
        offsets = start_offsets_ms(fleet.devices, fleet.arrival, fleet.gap_ms, fleet.rate_per_s, fleet.seed)
        mine = self.run.only_devices or range(fleet.devices)
        background = self._background()
        try:
            done = await asyncio.gather(*(self._device(i, offsets[i]) for i in mine), return_exceptions=True)
        finally:
            if background is not None:
                background.cancel()
                await asyncio.gather(background, return_exceptions=True)
        failures = [r for r in done if isinstance(r, BaseException)]
        if failures:  # every other device finished its turns first
            raise failures[0]

    def _background(self) -> asyncio.Task[None] | None:
        cfg, engines = self.run.config, self.run.engines
        if cfg.background.job == "none" or self.run.remote is not None:
            return None

        def backend(index: int) -> ChatBackend:
            inputs = TurnInputs(f"background job {index}", "en", salt=900_000 + index)
            return chat_backend(cfg, engines, inputs, BACKGROUND)

        def record(job: JobTimeline) -> None:
            self.tracing.emit_job(job, {names.RUN_ID: self.run.run_id, names.CONFIG_ID: self.run.config_id})

        jobs, llm = cfg.background, cfg.llm
        load = BackgroundLoad(
            jobs.job, jobs.period_ms, jobs.max_tokens, backend, self.run.clock, record, llm.temperature, llm.seed
        )
        return asyncio.create_task(load.run())

    async def _device(self, index: int, offset_ms: float) -> None:
        await asyncio.sleep(offset_ms / 1000)
        order = rotated(self.questions, index)
        if self.run.remote is None:
            await self._rounds(index, order, None)
            return
        async with self.run.remote(index) as remote:
            await self._rounds(index, order, remote)

    async def _rounds(self, device: int, questions: tuple[Question, ...], remote: RemoteTurns | None) -> None:
        run, cfg = self.run, self.run.config
        plan = [(r, i, q) for r in range(1, cfg.run.rounds + 1) for i, q in enumerate(questions)]
        asks: dict[int, Ask | None] = {}
        history: list[Message] = []
        for pos, (round_no, _index, q) in enumerate(plan):
            await run.gate.before(pos)
            clip = self.audio[q.id]
            before = self.probe.sample() if self.probe else None
            started_ns = run.clock.now_ns()
            try:
                timeline, note, reserved = await self._turn(device, plan, pos, asks, remote, history)
            except asyncio.CancelledError as exc:  # the run stopped mid-turn: the turn is a failed row, not lost
                timeline = stopped_timeline(started_ns, run.clock.now_ns(), exc)
                ask = asks.get(pos)
                self._emit(device, q, round_no, timeline.error_message, timeline, ask.traceparent if ask else "", None)
                raise
            if remote is None and timeline.ok:
                history[:] = keep_history(history + exchange(timeline), cfg.llm.history_rounds)
            load = self.probe.between(before, self.probe.sample()) if self.probe else None
            utterances: int | None = None
            try:
                if isinstance(clip, LoadedAudio) and q.truth is not None:
                    utterances = await self._utterances(q, clip)
            finally:  # a stop while the clip is scored still writes the finished turn
                self._emit(device, q, round_no, note, timeline, reserved, load, utterances)
            run.gate.after(pos)

    async def _turn(
        self,
        device: int,
        plan: list[tuple[int, int, Question]],
        pos: int,
        asks: dict[int, Ask | None],
        remote: RemoteTurns | None,
        history: list[Message],
    ) -> tuple[TurnTimeline, str, str]:
        """The device's ``pos``-th turn: its timeline, its note and the turn span id the server was given."""
        run, cfg = self.run, self.run.config
        round_no, index, q = plan[pos]
        clip = self.audio[q.id]
        if isinstance(clip, BadAudio):
            return _failed_timeline(run.clock, "bad_audio", str(clip)), str(clip), ""
        if remote is not None:  # the server keeps the conversation's history
            ask = await self._ask(plan, pos, asks)
            then = await self._ask(plan, pos + 1, asks) if pos + 1 < len(plan) else None
            assert ask is not None
            return await remote.turn(ask, then), clip.note, ask.traceparent
        salt = (device * 1000 + round_no) * 1000 + index
        stages = build_stages(cfg, run.engines, q, salt, tuple(history))
        timeline = await run_turn(
            clip.frames,
            stages,
            run.clock,
            realtime=cfg.run.pacing == "realtime",
            timeout_s=cfg.run.turn_timeout_s,
            meter=self.meter,
        )
        mark_true_end(timeline, q)
        return timeline, clip.note, ""

    def _emit(
        self,
        device: int,
        q: Question,
        round_no: int,
        note: str,
        timeline: TurnTimeline,
        reserved: str,
        load: TurnLoad | None,
        utterances: int | None = None,
    ) -> None:
        """The finished turn's spans written and handed to the sink."""
        run = self.run
        temp = self.thermometer.reading(timeline.start_ns, timeline.end_ns or timeline.start_ns)
        attrs = turn_attributes(run, q, round_no, note, load, temp)
        if utterances is not None:
            attrs[names.TRUTH_UTTERANCES] = utterances
        if run.config.fleet.devices > 1:
            attrs[names.DEVICE_INDEX], attrs[names.DEVICE_COUNT] = device, run.config.fleet.devices
        self.sink(self.tracing.emit_turn(timeline, attrs, reserved=reserved))

    async def _ask(self, plan: list[tuple[int, int, Question]], pos: int, asks: dict[int, Ask | None]) -> Ask | None:
        """The device's ``pos``-th question as it will ask it (None for a clip that cannot be read), made once."""
        if pos not in asks:
            round_no, _, q = plan[pos]
            clip = self.audio[q.id]
            if isinstance(clip, BadAudio):
                asks[pos] = None
            else:
                if q.id not in self.speech_ends:  # the same clip every round: found once
                    vad = build_vad(self.run.config, self.run.engines, q)
                    self.speech_ends[q.id] = await speech_end_ms(vad, clip.frames)
                # the turn span's id, drawn now, goes to the server: its spans join this turn's trace
                reserved = self.tracing.reserve_turn()
                ask = Ask(clip.frames, self.speech_ends[q.id], q.id, round_no, reserved, true_end_ms(q))
                asks[pos] = ask
        return asks[pos]

    async def _utterances(self, q: Question, clip: LoadedAudio) -> int:
        """How many utterances the run's end-of-turn detector makes of the question's whole clip (found once)."""
        if q.id not in self.utterances:
            cfg, engines = self.run.config, self.run.engines
            self.utterances[q.id] = await utterances_in(lambda: build_vad(cfg, engines, q), clip.frames)
        return self.utterances[q.id]


def keep_history(history: list[Message], rounds: int) -> list[Message]:
    """The last ``rounds`` exchanges: only those are ever sent, so only those are kept."""
    return history[-2 * rounds :] if rounds else []


def exchange(timeline: TurnTimeline) -> list[Message]:
    """The turn as conversation history: what was heard and what was said."""
    answer = " ".join(s.text for s in timeline.sentences)
    return [Message("user", timeline.asr.text), Message("assistant", answer)]


def stopped_timeline(start_ns: int, end_ns: int, cancelled: asyncio.CancelledError) -> TurnTimeline:
    """A turn the run's stop cut (``pipeline.run.stopping``): failed, ``stopped``, naming the signal."""
    why = str(cancelled.args[0]) if cancelled.args else "cancelled"
    return TurnTimeline(start_ns=start_ns, end_ns=end_ns, error_type=STOPPED, error_message=f"the run stopped: {why}")


def _failed_timeline(clock: Clock, error_type: str, message: str) -> TurnTimeline:
    now = clock.now_ns()
    return TurnTimeline(start_ns=now, end_ns=now, error_type=error_type, error_message=message)
