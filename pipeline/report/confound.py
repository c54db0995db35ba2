"""Are two conditions comparable? The stages they share, watched (METHOD M15, M9).

A and B differ in where the LLM runs; their VAD and ASR are the same component (the same settings)
on the same audio. Where such a stage's median differs between them beyond its 95 % bootstrap
interval, something other than the condition moved it (the machine slowing over the hour, a
neighbour, the LLM's threads beside it), and the same something can sit in every figure of the
comparison: the comparison is marked confounded, naming the stage and the size.

A difference counts when its interval excludes zero **and** it is at least ``MIN_SHARE`` of the
baseline's median (and 1 ms): with thousands of turns an interval shrinks until a 0.3 % wobble is
"real", which no comparison of latencies should be stopped by.

TTS is not watched: its input is each condition's own answer, which differs by design.

Beside a watched stage's time, its CPU time (this process, every thread, ``pipeline.run.cpu``) where the
runs recorded it: the same work on the same audio, so a move the CPU time shares is the work costing more
(a slower machine, caches and memory shared with a neighbour), and one it does not is the stage waiting.

How the conditions were run is read from the turns' start times: one after another, or
interleaved (their turns alternating in time, ``pipeline.run.interleave``).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pipeline.report.compare import Diff, diff
from pipeline.report.conditions import Condition
from pipeline.report.identity import flatten
from pipeline.report.load import RunInfo

WATCHED = {"vad": "vad_endpoint_ms", "asr": "asr_ms"}  # stage -> the column timing it on the same audio
CPU = {"asr": "asr_cpu_ms"}  # stage -> the column of its CPU time (the VAD's runs inline, per frame: none)
MIN_SHARE = 0.02
MIN_MS = 1.0


@dataclass(frozen=True, slots=True)
class StageCheck:
    """One shared stage between a condition and its baseline."""

    label: str
    base: str
    stage: str
    metric: str
    difference: Diff
    n: int
    n_base: int
    cpu: Diff | None = None  # the same for the stage's CPU time; None: no CPU column or no figures

    @property
    def shares_cpu(self) -> bool:
        """The CPU time moved the same way, beyond its interval, by at least half the wall time's move: the
        work itself cost more, rather than the stage waiting."""
        d, c = self.difference, self.cpu
        if c is None or not c.real or c.value is None or d.value is None:
            return False
        return c.value * d.value > 0 and abs(c.value) >= 0.5 * abs(d.value)

    @property
    def confounded(self) -> bool:
        d = self.difference
        if not d.real or d.value is None or d.base is None:
            return False
        return abs(d.value) >= max(MIN_SHARE * abs(d.base), MIN_MS)


def stage_settings(run: RunInfo, stage: str) -> dict[str, str] | None:
    """The run's ``[stage]`` settings, flattened (None where the run does not record them)."""
    data = run.settings()
    section = data.get(stage) if data is not None else None
    return flatten(section) if isinstance(section, Mapping) else None


def shared(stage: str, conds: Sequence[Condition], runs: Mapping[str, RunInfo]) -> bool:
    """Whether every run of ``conds`` recorded the same ``[stage]`` settings: the same component."""
    found = [stage_settings(runs[r], stage) if r in runs else None for c in conds for r in c.runs]
    return bool(found) and found[0] is not None and all(f == found[0] for f in found)


def checks(
    conds: Mapping[str, Condition], pairs: Sequence[tuple[str, str]], runs: Mapping[str, RunInfo]
) -> list[StageCheck]:
    """Every shared stage of every compared pair (condition, baseline) that both timed."""
    out = []
    for label, base in pairs:
        x, b = conds[label], conds[base]
        for stage, metric in WATCHED.items():
            if not shared(stage, (x, b), runs) or not (x.values(metric).size and b.values(metric).size):
                continue
            d = diff(x, b, metric)
            cpu = CPU.get(stage)
            c = diff(x, b, cpu) if cpu and x.values(cpu).size and b.values(cpu).size else None
            out.append(StageCheck(label, base, stage, metric, d, x.values(metric).size, b.values(metric).size, c))
    return out


@dataclass(frozen=True, slots=True)
class Order:
    """How the conditions' turns lay in time."""

    interleaved: bool
    switches: int  # times the next turn in time belonged to another condition
    turns: int

    def words(self, labels: Sequence[str]) -> str:
        names = ", ".join(labels)
        if self.interleaved:
            return (
                f"conditions {names} were interleaved: their {self.turns} turns alternate in time "
                f"({self.switches} switches between conditions)"
            )
        return f"conditions {names} were run one after another (sequential): a drift over time falls on the later one"


def order(conds: Mapping[str, Condition]) -> Order:
    """From the turns' start times: interleaved when any condition's turn starts inside another's span of turns."""
    starts = sorted(
        (int(r.turn_start_ns), label)
        for label, c in conds.items()
        for r in c.rows
        if isinstance(r.turn_start_ns, int) and r.turn_start_ns
    )
    switches = sum(1 for (_, a), (_, b) in itertools.pairwise(starts) if a != b)
    return Order(switches > len(conds) - 1, switches, len(starts))
