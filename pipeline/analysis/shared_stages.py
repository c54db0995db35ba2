"""The stages two runs share, run against run: a column's median difference with its 95 % bootstrap
interval (METHOD M15: the same component on the same audio should not move between conditions).

Used by the benchmarks that run lanes side by side (``scripts/bench_whatif.py``,
``scripts/bench_neighbours.py``); the report's own check is ``pipeline.report.confound``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from pipeline.analysis.bootstrap import Interval, difference_interval
from pipeline.analysis.numbers import measured, quantile
from pipeline.analysis.stats import spearman
from pipeline.records.turn_row import TurnRow

STAGES = {"VAD": "vad_endpoint_ms", "ASR": "asr_ms", "TTS": "tts_first_frame_ms"}
# the same stages' CPU time (``pipeline.run.cpu``): the same work on the same audio, so a wall-time difference
# the CPU time shares is the machine's speed, and one it does not is waiting (for a core, a lock, a neighbour)
CPU_STAGES = {"ASR cpu": "asr_cpu_ms", "TTS cpu": "tts_first_frame_cpu_ms"}


@dataclass(frozen=True, slots=True)
class Moved:
    """``x``'s median of a column minus ``base``'s, with the interval of that difference."""

    x: str
    base: str
    stage: str
    x_median: float
    base_median: float
    n: int
    n_base: int
    interval: Interval | None

    @property
    def difference(self) -> float:
        return self.x_median - self.base_median

    @property
    def beyond(self) -> bool:
        """The interval excludes zero: something moved the stage between the runs."""
        return self.interval is not None and self.interval.excludes_zero()

    def line(self) -> str:
        ci = f"[{self.interval.low:+.1f}, {self.interval.high:+.1f}]" if self.interval else "-"
        verdict = "MOVED (beyond its interval)" if self.beyond else "inside its interval"
        pair, medians = f"{self.x} - {self.base}", f"{self.x_median:.1f} / {self.base_median:.1f}"
        share = f"{self.difference / self.base_median:+.1%}" if self.base_median else "-"
        return (
            f"  {pair:<10}{self.stage:<8}{medians:>22}{self.difference:>+12.1f}{share:>9}{ci:>18}  "
            f"{self.n}/{self.n_base:<6}{verdict}"
        )


HEADER = f"  {'':<10}{'stage':<8}{'medians ms':>22}{'diff ms':>12}{'diff':>9}{'its 95 % CI':>18}  turns   verdict"


def values(rows: Sequence[TurnRow], column: str) -> np.ndarray:
    """``column`` over measured successful rows, sorted."""
    found = [float(v) for r in rows if measured(r) and r.ok and (v := getattr(r, column)) is not None]
    return np.sort(np.asarray(found, dtype=np.float64))


def spent(lanes: Mapping[str, Sequence[TurnRow]]) -> list[str]:
    """Per lane, what its ASR and first TTS cost: medians of wall and CPU time (this process, all threads),
    their ratio, the switches forced on the process during the ASR, other processes' CPU time and the
    hypervisor's steal during it (summed over the lane's measured turns)."""
    head = f"  {'lane':<6}{'ASR ms':>9}{'cpu ms':>9}{'cpu/wall':>10}{'forced':>8}{'others ms':>11}{'steal ms':>10}"
    out = [head + f"{'TTS ms':>9}{'cpu ms':>9}{'cpu/wall':>10}"]
    for lane, rows in lanes.items():
        steal = values(rows, "asr_steal_ms")
        cells = (
            f"  {lane:<6}",
            _wall_and_cpu(rows, "asr_ms", "asr_cpu_ms"),
            _cell(_median(rows, "asr_forced_switches"), 8),
            _cell(_median(rows, "asr_other_cpu_ms"), 11),
            _cell(float(steal.sum()) if len(steal) else None, 10),
            _wall_and_cpu(rows, "tts_first_frame_ms", "tts_first_frame_cpu_ms"),
        )
        out.append("".join(cells))
    return out


def _wall_and_cpu(rows: Sequence[TurnRow], wall: str, cpu: str) -> str:
    """A stage's median wall and CPU time and their ratio (the cores busy), as three cells."""
    w, c = _median(rows, wall), _median(rows, cpu)
    ratio = f"{c / w:.2f}" if w and c is not None else "-"
    return f"{_cell(w)}{_cell(c)}{ratio:>10}"


def _median(rows: Sequence[TurnRow], column: str) -> float | None:
    found = values(rows, column)
    return quantile(found, 0.5) if len(found) else None


def _cell(value: float | None, width: int = 9) -> str:
    return f"{value:>{width}.1f}" if value is not None else f"{'-':>{width}}"


def moved(x: str, xs: Sequence[TurnRow], base: str, bs: Sequence[TurnRow], stage: str, column: str) -> Moved | None:
    """The stage's median difference between the two runs' rows (None with fewer than 2 values a side)."""
    a, b = values(xs, column), values(bs, column)
    if len(a) < 2 or len(b) < 2:
        return None
    ci = difference_interval(a, f"{x}|{column}", b, f"{base}|{column}", 0.5)
    return Moved(x, base, stage, quantile(a, 0.5), quantile(b, 0.5), len(a), len(b), ci)


@dataclass(frozen=True, slots=True)
class Waves:
    """How the machine's speed moved over interleaved lanes: a stage's time, relative to its question's
    median over every lane, in the order the turns ran (whatever their lane)."""

    turns: int
    lag1: float  # Spearman correlation of each turn's relative time with the next one's
    shuffled_975: float  # the same of the turns shuffled: the 97.5th percentile of 2,000 shuffles
    window: int
    low: float  # the least and the greatest mean relative time over ``window`` consecutive turns
    high: float

    def line(self, stage: str) -> str:
        persists = "persists from turn to turn" if self.lag1 > self.shuffled_975 else "does not persist"
        return (
            f"  {stage} relative to its question's median, in run order over {self.turns} turns of every lane: "
            f"{self.window}-turn means from {self.low:.2f} to {self.high:.2f}; lag-1 correlation {self.lag1:.2f} "
            f"(shuffled: 97.5 % below {self.shuffled_975:.2f}): the machine's speed {persists}"
        )


def _lag1(x: np.ndarray) -> float:
    """Spearman's correlation of each value with the next (0 where they do not vary)."""
    return spearman(x[:-1], x[1:]) or 0.0


def waves(lanes: Sequence[Sequence[TurnRow]], column: str, window: int = 6) -> Waves | None:
    """``Waves`` of ``column`` over the lanes' successful turns (None with too few turns). The warm-up
    rounds count here, but for each lane's first turn (its models' first use): it is the machine's
    speed that is followed, and the stage does the same work in every round."""
    found = [
        (int(r.turn_start_ns), str(r.question_id), float(v))
        for rows in lanes
        for r in sorted(rows, key=lambda r: r.turn_start_ns)[1:]
        if r.ok and (v := getattr(r, column)) is not None
    ]
    if len(found) < 2 * window:
        return None
    found.sort()
    by_question: dict[str, list[float]] = {}
    for _, q, v in found:
        by_question.setdefault(q, []).append(v)
    medians = {q: float(np.median(v)) for q, v in by_question.items()}
    rel = np.asarray([v / medians[q] for _, q, v in found if medians[q]], dtype=np.float64)
    rng = np.random.default_rng(0)
    shuffled = [_lag1(p) for p in (rng.permutation(rel) for _ in range(2000))]
    means = np.convolve(rel, np.ones(window) / window, mode="valid")
    lag1 = _lag1(rel)
    return Waves(len(rel), lag1, float(np.quantile(shuffled, 0.975)), window, float(means.min()), float(means.max()))
