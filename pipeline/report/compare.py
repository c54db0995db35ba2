"""Pure statistics of the comparison: figures with intervals, the four segments (M2),
amplification (M3), dilution (M17) and the four outcomes (M16).

Everything is computed over measured (non-warm-up), successful turns; each figure carries
how many turns it was computed over and how many measured turns there were (M7).

The outcome rules (B or B' against A, on the first-token median; documented in the report):

1. *less reliable*: its success rate is more than ``RELIABILITY_POINTS`` percentage points
   below A's. Checked first: speed is not compared before stability (M16).
2. *faster*: the 95 % interval of (median - A's median) lies entirely below zero.
3. *clearly slower*: the difference is above ``CLEARLY_SLOWER`` (10 %) of A's median and its
   interval lies entirely above zero.
4. *slightly slower*: everything else, i.e. slower by at most 10 %, or a difference the
   interval cannot tell from zero (not shown faster counts as not faster).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from pipeline.report.bootstrap import Interval, difference_interval, quantile, quantile_interval
from pipeline.report.conditions import Condition, number

RELIABILITY_POINTS = 5.0
CLEARLY_SLOWER = 0.10

LESS_RELIABLE = "less reliable"
FASTER = "faster"
CLEARLY = "clearly slower"
SLIGHTLY = "slightly slower"
NOT_READ = "not read"

ADVICE = {
    FASTER: "record it as the recommended configuration",
    SLIGHTLY: "tune in the knob order (M18): model size first, then context length (history rounds), "
    "quantisation with care, system parameters (threads, scheduling, pinning) last",
    CLEARLY: "shorten the context first, then try a smaller model (each step with a quality check)",
    LESS_RELIABLE: "fix stability before comparing speed",
    NOT_READ: "",
}


@dataclass(frozen=True, slots=True)
class Stat:
    """A quantile of a metric with its 95 % interval, over ``n`` of ``turns`` measured turns."""

    value: float | None
    interval: Interval | None
    n: int
    turns: int

    @property
    def partial(self) -> bool:
        return self.n < self.turns


@dataclass(frozen=True, slots=True)
class Diff:
    """quantile(x) - quantile(base), with the interval of that difference."""

    value: float | None
    interval: Interval | None
    base: float | None

    @property
    def percent(self) -> float | None:
        if self.value is None or not self.base:
            return None
        return 100.0 * self.value / self.base

    @property
    def real(self) -> bool:
        return self.interval is not None and self.interval.excludes_zero()


def stat_of(sorted_values: np.ndarray, q: float, name: str, turns: int) -> Stat:
    if len(sorted_values) == 0:
        return Stat(None, None, 0, turns)
    return Stat(quantile(sorted_values, q), quantile_interval(sorted_values, q, name), len(sorted_values), turns)


def stat(cond: Condition, metric: str, q: float = 0.5) -> Stat:
    return stat_of(cond.values(metric), q, f"{cond.label}|{metric}", len(cond.measured))


def diff_of(x: np.ndarray, x_name: str, base: np.ndarray, base_name: str, q: float) -> Diff:
    if len(x) == 0 or len(base) == 0:
        return Diff(None, None, quantile(base, q) if len(base) else None)
    b = quantile(base, q)
    return Diff(quantile(x, q) - b, difference_interval(x, x_name, base, base_name, q), b)


def diff(x: Condition, base: Condition, metric: str, q: float = 0.5) -> Diff:
    return diff_of(x.values(metric), f"{x.label}|{metric}", base.values(metric), f"{base.label}|{metric}", q)


def paired(x: Condition, base: Condition, metric: str) -> Stat:
    """Median of per-turn differences x - base, turns matched by (question, round): the same question
    set and order in both conditions (M5) makes each pair differ only in the condition."""
    found = dict(zip(base.turn_keys(), base.column(metric).tolist(), strict=True))
    diffs = [
        v - found[key]
        for key, v in zip(x.turn_keys(), x.column(metric).tolist(), strict=True)
        if key in found and not (math.isnan(v) or math.isnan(found[key]))
    ]
    values = np.sort(np.asarray(diffs, dtype=np.float64))
    return stat_of(values, 0.5, f"{x.label}-{base.label}|paired|{metric}", max(len(x.measured), len(base.measured)))


def success(cond: Condition) -> tuple[int, int]:
    return len(cond.ok), len(cond.measured)


def success_percent(cond: Condition) -> float | None:
    ok, measured = success(cond)
    return 100.0 * ok / measured if measured else None


# --- M2: four segments -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Segments:
    """Per turn, summed over the turn's LLM calls; medians over measured successful turns."""

    client_first_token: Stat  # queue + network + first-token inference, as the client sees them
    client_generation: Stat
    server_queue: Stat
    server_prompt: Stat  # first-token inference (prompt processing)
    server_generation: Stat
    network: Stat  # estimated: client first-token wait - server queue - server prompt

    @property
    def has_server(self) -> bool:
        return self.server_queue.n > 0 or self.server_prompt.n > 0 or self.server_generation.n > 0


SERVER_TIMINGS = ("server_queue_ms", "server_prompt_ms", "server_generation_ms")


def has_server_timings(cond: Condition) -> bool:
    return any(cond.values(metric).size for metric in SERVER_TIMINGS)


def _network(cond: Condition) -> np.ndarray:
    network = cond.turn_sum_column() - cond.column("server_queue_ms") - cond.column("server_prompt_ms")
    return np.sort(network[~np.isnan(network)])


def segments(cond: Condition) -> Segments:
    turns = len(cond.measured)
    return Segments(
        client_first_token=stat_of(cond.turn_sums(), 0.5, f"{cond.label}|turn_first_token_sum", turns),
        client_generation=stat(cond, "llm_generation_ms"),
        server_queue=stat(cond, "server_queue_ms"),
        server_prompt=stat(cond, "server_prompt_ms"),
        server_generation=stat(cond, "server_generation_ms"),
        network=stat_of(_network(cond), 0.5, f"{cond.label}|network_estimate", turns),
    )


# --- M3: per-sentence first tokens, calls per turn, amplification ------------------------


@dataclass(frozen=True, slots=True)
class Spread:
    n: int
    minimum: float | None
    median: float | None
    p90: float | None
    maximum: float | None
    mean: float | None


def spread(sorted_values: np.ndarray) -> Spread:
    if len(sorted_values) == 0:
        return Spread(0, None, None, None, None, None)
    return Spread(
        len(sorted_values),
        float(sorted_values[0]),
        quantile(sorted_values, 0.5),
        quantile(sorted_values, 0.9),
        float(sorted_values[-1]),
        float(np.mean(sorted_values)),
    )


@dataclass(frozen=True, slots=True)
class Amplification:
    per_call: Diff  # median per-call first token, x - base
    calls_per_turn: float | None  # mean LLM calls per turn over both conditions' measured ok turns
    product: float | None  # estimated: per-call difference x calls per turn
    turn_first_token_sum: Diff  # measured: median per-turn sum of first-token waits, x - base
    whole_turn: Diff  # measured: median whole turn, x - base


def _calls(conds: Sequence[Condition]) -> float | None:
    counts = [v for c in conds for r in c.ok if (v := number(r.get("llm_calls"))) is not None]
    return float(np.mean(counts)) if counts else None


def amplification(x: Condition, base: Condition) -> Amplification:
    per = diff_of(x.call_ms, f"{x.label}|call_first_token", base.call_ms, f"{base.label}|call_first_token", 0.5)
    calls = _calls([x, base])
    return Amplification(
        per_call=per,
        calls_per_turn=calls,
        product=per.value * calls if per.value is not None and calls is not None else None,
        turn_first_token_sum=diff_of(
            x.turn_sums(),
            f"{x.label}|turn_first_token_sum",
            base.turn_sums(),
            f"{base.label}|turn_first_token_sum",
            0.5,
        ),
        whole_turn=diff(x, base, "whole_turn_ms"),
    )


# --- M17: dilution -----------------------------------------------------------------------

DILUTION_METRICS = (
    ("first_token_ms", "LLM first token (first call)"),
    ("total_ms", "LLM segment (first request to last call's end)"),
    ("whole_turn_ms", "whole turn (end of speech to last audio played)"),
)


def dilution(x: Condition, base: Condition) -> list[tuple[str, str, Diff]]:
    return [(metric, label, diff(x, base, metric)) for metric, label in DILUTION_METRICS]


# --- M16: four outcomes ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Outcome:
    kind: str
    reason: str

    @property
    def advice(self) -> str:
        return ADVICE[self.kind]


def outcome(x: Condition, base: Condition) -> Outcome:
    x_rate, base_rate = success_percent(x), success_percent(base)
    if x_rate is None or base_rate is None:
        missing = x.label if x_rate is None else base.label
        return Outcome(NOT_READ, f"{missing} has no measured turns")
    if x_rate < base_rate - RELIABILITY_POINTS:
        return Outcome(
            LESS_RELIABLE,
            f"success {x_rate:.1f}% against {base_rate:.1f}% "
            f"(more than {RELIABILITY_POINTS:g} percentage points lower)",
        )
    d = diff(x, base, "first_token_ms")
    if d.value is None or d.base is None:
        return Outcome(NOT_READ, "first-token median not measured in both conditions")
    rel = d.value / d.base if d.base else 0.0
    ci = d.interval
    where = f"median difference {d.value:+.1f} ms ({100 * rel:+.1f}%)" + (
        f", 95% interval [{ci.low:+.1f}, {ci.high:+.1f}] ms" if ci else ", no interval (fewer than 2 turns)"
    )
    if ci is not None and ci.high < 0:
        return Outcome(FASTER, f"{where}: entirely below zero")
    if ci is not None and ci.low > 0 and rel > CLEARLY_SLOWER:
        return Outcome(CLEARLY, f"{where}: above zero and more than {100 * CLEARLY_SLOWER:.0f}% slower")
    if d.value > 0:
        return Outcome(SLIGHTLY, f"{where}: slower by at most {100 * CLEARLY_SLOWER:.0f}% or not clearly slower")
    return Outcome(SLIGHTLY, f"{where}: not shown faster (the interval includes zero)")


# --- M22: what got better and what got worse --------------------------------------------

CONCLUSION_METRICS = (
    ("first_token_ms", 0.5, "first token (median)"),
    ("first_token_ms", 0.9, "first-token P90 (jitter and tail)"),
    ("total_ms", 0.5, "LLM segment (median)"),
    ("total_ms", 0.9, "LLM-segment P90"),
    ("whole_turn_ms", 0.5, "whole turn (median)"),
    ("whole_turn_ms", 0.9, "whole-turn P90"),
)


@dataclass(frozen=True, slots=True)
class Change:
    what: str
    diff: Diff


@dataclass(frozen=True, slots=True)
class Balance:
    gains: tuple[Change, ...]
    costs: tuple[Change, ...]
    unclear: tuple[Change, ...]
    success_change: float | None  # percentage points, x - base


def balance(x: Condition, base: Condition) -> Balance:
    gains, costs, unclear = [], [], []
    for metric, q, label in CONCLUSION_METRICS:
        d = diff(x, base, metric, q)
        if d.value is None:
            continue
        change = Change(label, d)
        if d.real and d.value < 0:
            gains.append(change)
        elif d.real and d.value > 0:
            costs.append(change)
        else:
            unclear.append(change)
    xr, br = success_percent(x), success_percent(base)
    return Balance(tuple(gains), tuple(costs), tuple(unclear), xr - br if xr is not None and br is not None else None)
