"""One stage alone, timed as a turn times it: the single-stage test harness (as Pipecat's ``run_test``).

``run_stage`` feeds a list of events to one stage through the ``TurnRecorder`` that times every turn,
on the virtual clock unless told otherwise, and returns what the stage yielded, when it yielded each,
and the recorder's timeline. On the virtual clock a scripted latency comes out to the microsecond, so
a stage's first output can be asserted exactly. Stages that wait on real work (a model, a subprocess, a
server on loopback whose timeouts must not fire early) take ``clock=RealClock()``.

``stage_run`` is the same inside a running event loop, for a stage whose resources (an HTTP client, an
emulated server) must be opened on the loop that runs it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import TypeVar

from pipeline.clock import Clock, VirtualClock, run_on_clock
from pipeline.events import Event, Stage
from pipeline.run.recorder import TurnRecorder
from pipeline.tracing.timeline import TurnTimeline

E = TypeVar("E")


@dataclass(frozen=True, slots=True)
class StageRun:
    """What one stage yielded over a run, and when."""

    events: list[Event]
    at_ms: list[float]  # when the stage yielded each event, in ms after the run began (the recorder's clock)
    timeline: TurnTimeline  # the recorder's stamps, filed under the stage's role as in a turn

    def of(self, kind: type[E]) -> list[E]:
        """The events of one kind, in order."""
        return [e for e in self.events if isinstance(e, kind)]

    def first_ms(self, kind: type[Event]) -> float:
        """When the stage yielded its first event of ``kind``, in ms after the run began."""
        return next(t for e, t in zip(self.events, self.at_ms, strict=True) if isinstance(e, kind))

    def ms(self, t_ns: int | None) -> float | None:
        """A moment of the timeline in ms after the run began; None for one that never came."""
        return None if t_ns is None else (t_ns - self.timeline.start_ns) / 1e6


async def stage_run(stage: Stage, events: Sequence[Event], clock: Clock) -> StageRun:
    """Run ``stage`` over ``events`` (all there at the start) on the running loop, whose time ``clock`` reads."""
    recorder = TurnRecorder(clock)
    start_ns = recorder.timeline.start_ns

    async def source() -> AsyncIterator[Event]:
        for event in events:
            yield event

    out: list[Event] = []
    at_ms: list[float] = []
    async for event in recorder.wrap(stage.info.role, stage, recorder.receive(source())):
        at_ms.append((clock.now_ns() - start_ns) / 1e6)  # read with the recorder's stamp, nothing awaited between
        out.append(event)
    return StageRun(out, at_ms, recorder.finish())


def run_stage(stage: Stage, events: Sequence[Event], clock: Clock | None = None) -> StageRun:
    """Run ``stage`` over ``events`` on a fresh event loop matching ``clock`` (default: a virtual clock)."""
    clock = clock or VirtualClock()
    return run_on_clock(stage_run(stage, events, clock), clock)
