"""A step's devices as users: each arrives at its time, then asks question after question, with its think time
between them, until the step's hold is over; its connection is opened again after the profile's session length.

It drives the same ``Run`` a ``pipeline.replay --server`` run builds (its devices, tracer and row sink), so
a step's traces and bench.csv rows are those of every run: each finished turn is traced, one line, and made
a row before the device asks again. Each device's first question of the step is its warm-up (M6). A device
that cannot open its session records a failed turn (``refused``), waits its think time (at least
``RETRY_S``) and tries again: a server that refuses every device fails the step, never hangs it.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from dataclasses import dataclass, field

from pipeline.capacity.profile import LoadProfile
from pipeline.capacity.step_verdict import REFUSED
from pipeline.clock import Clock
from pipeline.fleet.arrivals import rotated, start_offsets_ms
from pipeline.run.assembly import build_vad
from pipeline.run.device_side import Ask, speech_end_ms, true_end_ms
from pipeline.run.session import RemoteTurns, Run, TraceSink, session_attributes, turn_attributes
from pipeline.settings.audio import BadAudio, LoadedAudio, load_audio
from pipeline.settings.fixtures import Question
from pipeline.tracing import names
from pipeline.tracing.export import Tracing
from pipeline.tracing.timeline import TurnTimeline
from pipeline.transport.device.link import DeviceError

RETRY_S = 1.0


@dataclass
class Window:
    """When the step's devices stop asking: ``hold_s`` after the last arrival, held longer (up to
    ``max_hold_s``) while fewer than ``min_turns`` measured turns have finished."""

    clock: Clock
    arrived_ns: int  # the last device's arrival
    hold_s: float
    max_hold_s: float
    min_turns: int
    measured: int = 0  # finished turns that are not warm-ups
    ended_ns: int = 0  # the last turn's end

    def asking(self) -> bool:
        elapsed_s = (self.clock.now_ns() - self.arrived_ns) / 1e9
        if elapsed_s < self.hold_s:
            return True
        return self.measured < self.min_turns and elapsed_s < self.max_hold_s

    @property
    def held_s(self) -> float:
        return max(0.0, (self.ended_ns - self.arrived_ns) / 1e9)


@dataclass
class Users:
    """One step's devices (``run.config.fleet``), asking ``profile``'s questions inside ``window``."""

    run: Run
    profile: LoadProfile
    tracing: Tracing
    sink: TraceSink
    hold_s: float
    max_hold_s: float
    min_turns: int
    audio: dict[str, LoadedAudio | BadAudio] = field(default_factory=dict)
    speech_ends: dict[str, int | None] = field(default_factory=dict)
    window: Window | None = None
    make_window: Callable[..., Window] = Window  # a Ray worker's window is ended by its driver

    def offsets_ms(self) -> list[float]:
        fleet = self.run.config.fleet
        return start_offsets_ms(fleet.devices, fleet.arrival, fleet.gap_ms, fleet.rate_per_s, fleet.seed)

    async def prepare(self) -> None:
        """Every question's clip and where its speech ends (once)."""
        for q in self.run.selected():
            if q.id not in self.audio:
                self.audio[q.id] = _load(q)
            await self._speech_end(q)

    async def run_step(self, arrived: Callable[[], object] | None = None) -> Window:
        """Every device (of ``run.only_devices``, when it names some) from arrival to the hold's end; ``arrived``
        is called once the last one has arrived."""
        clock = self.run.clock
        await self.prepare()
        offsets = self.offsets_ms()
        start = clock.now_ns()
        last_ns = start + int(max(offsets) * 1e6)
        self.window = self.make_window(clock, last_ns, self.hold_s, self.max_hold_s, self.min_turns)
        self.tracing.start_session(session_attributes(self.run), start)
        try:
            watcher = asyncio.create_task(self._arrival(max(offsets), arrived))
            mine = self.run.only_devices or range(len(offsets))
            await asyncio.gather(*(self._device(i, offsets[i]) for i in mine))
            watcher.cancel()
        finally:
            self.tracing.end_session(clock.now_ns())
        return self.window

    async def _arrival(self, last_ms: float, arrived: Callable[[], object] | None) -> None:
        await asyncio.sleep(last_ms / 1000)
        if arrived is not None:
            arrived()

    async def _speech_end(self, q: Question) -> None:
        clip = self.audio[q.id]
        if isinstance(clip, LoadedAudio) and q.id not in self.speech_ends:
            vad = build_vad(self.run.config, self.run.engines, q)
            self.speech_ends[q.id] = await speech_end_ms(vad, clip.frames)

    async def _device(self, index: int, offset_ms: float) -> None:
        assert self.window is not None and self.run.remote is not None
        await asyncio.sleep(offset_ms / 1000)
        order = rotated(self.run.selected(), index)
        asked = 0
        while self.window.asking():
            try:
                async with self.run.remote(index) as device:
                    asked = await self._session(index, order, asked, device)
            except DeviceError as exc:
                asked = self._refused(index, order, asked, str(exc))
                await asyncio.sleep(max(self.profile.think_after(0.0), RETRY_S))

    async def _session(self, index: int, order: tuple[Question, ...], asked: int, device: RemoteTurns) -> int:
        """Questions on one connection until the hold or the session length is over; how many asked so far."""
        assert self.window is not None
        clock = self.run.clock
        ends = math.inf if not self.profile.session_s else clock.now_ns() / 1e9 + self.profile.session_s
        while self.window.asking() and clock.now_ns() / 1e9 < ends:
            q = order[asked % len(order)]
            timeline, reserved = await self._ask(q, asked, device)
            self._record(index, q, asked, timeline, reserved)
            asked += 1
            took = ((timeline.end_ns or timeline.start_ns) - timeline.start_ns) / 1e9
            await asyncio.sleep(self.profile.think_after(took))
        return asked

    async def _ask(self, q: Question, asked: int, device: RemoteTurns) -> tuple[TurnTimeline, str]:
        """The device's turn of ``q``, and the traceparent reserved for it (the server's spans join it)."""
        clip = self.audio[q.id]
        if isinstance(clip, BadAudio):
            now = self.run.clock.now_ns()
            return TurnTimeline(start_ns=now, end_ns=now, error_type="bad_audio", error_message=str(clip)), ""
        round_no = asked // len(self.run.selected()) + 1
        # a question with a truth: its silence from the true end, and its cut-off
        ask = Ask(clip.frames, self.speech_ends[q.id], q.id, round_no, self.tracing.reserve_turn(), true_end_ms(q))
        return await device.turn(ask), ask.traceparent

    def _record(self, index: int, q: Question, asked: int, timeline: TurnTimeline, reserved: str = "") -> None:
        assert self.window is not None
        clip = self.audio[q.id]
        note = str(clip) if isinstance(clip, BadAudio) else clip.note
        round_no = asked // len(self.run.selected()) + 1
        attrs = turn_attributes(self.run, q, round_no, note, None)
        # the device's first question is its warm-up (M6); a refused session is a failure, never a warm-up
        warmup = asked == 0 and timeline.error_type != REFUSED
        attrs[names.WARMUP] = warmup
        attrs[names.DEVICE_INDEX], attrs[names.DEVICE_COUNT] = index, self.run.config.fleet.devices
        self.sink(self.tracing.emit_turn(timeline, attrs, reserved=reserved))
        if not warmup:
            self.window.measured += 1
        self.window.ended_ns = max(self.window.ended_ns, timeline.end_ns or timeline.start_ns)

    def _refused(self, index: int, order: tuple[Question, ...], asked: int, message: str) -> int:
        now = self.run.clock.now_ns()
        timeline = TurnTimeline(start_ns=now, end_ns=now, error_type=REFUSED, error_message=message)
        self._record(index, order[asked % len(order)], asked, timeline)
        return asked + 1


def _load(q: Question) -> LoadedAudio | BadAudio:
    try:
        return load_audio(q.audio)
    except BadAudio as exc:
        return exc
