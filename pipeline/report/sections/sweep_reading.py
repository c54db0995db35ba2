"""Which segment grows with a variable (M15): the reading of a series of runs that differ in one setting.

Each point of the series is one condition (one run's turns). For each segment that is a part of
the turn (not a total), the change of its median from the first point to the last, in the order
the points were given (``devices=1,2,4``: from 1 to 4). The segment whose median grows by the
most milliseconds is named: absolute growth, because it is what the user waits for (a 0.1 -> 1 ms
queue is x10 and irrelevant). It is named only when the 95 % bootstrap interval of that growth
excludes zero; otherwise the words say no segment clearly grows. The whole turn's change is
stated beside it (M17: a segment's change is diluted end to end). Where the first-token wait
grows most and a part inside it (the queue, when its spans lie inside the LLM calls; the network
estimate) accounts for at least half of that growth, the part is named: it is where the wait
comes from. The same reading is made on the P90 (M8): a queue under concurrency lengthens the
tail long before it moves the median. Where nothing clearly grows, the part that clearly falls
most is named instead (a smaller model is faster: the variable's effect runs the other way).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from pipeline.analysis.numbers import quantile
from pipeline.report import cells
from pipeline.report.compare import Diff, diff_of
from pipeline.report.conditions import Condition
from pipeline.report.sections.base import ESTIMATED, MEASURED
from pipeline.report.sections.segments import network_values

NETWORK = "network, estimated: first-token wait - server queue - server prompt"
GROWTH_SHARE = 0.5  # a part inside the first-token wait is named when it accounts for this much of its growth


@dataclass(frozen=True, slots=True)
class Metric:
    """A figure a sweep's reading follows across its points."""

    key: str
    label: str
    values: Callable[[Condition], np.ndarray]  # sorted, measured successful turns
    attribution: str
    part: bool  # a part of the turn that can be the bottleneck; False for totals and overlapping views


def _column(metric: str) -> Callable[[Condition], np.ndarray]:
    return lambda c: c.values(metric)


METRICS = (
    Metric("queue", "queue wait in the scheduler", _column("queue_wait_ms"), MEASURED, True),
    Metric("network", NETWORK, network_values, ESTIMATED, True),
    Metric("first_token_wait", "first-token wait, all calls", lambda c: c.turn_sums(), MEASURED, True),
    Metric("first_token", "first token, first call (M1)", _column("first_token_ms"), MEASURED, False),
    Metric("generation", "generation", _column("llm_generation_ms"), MEASURED, True),
    Metric("vad", "VAD end-point", _column("vad_endpoint_ms"), MEASURED, True),
    Metric("asr", "ASR", _column("asr_ms"), MEASURED, True),
    Metric("tts", "TTS first frame", _column("tts_first_frame_ms"), MEASURED, True),
    Metric("first_audio", "end of speech -> first audio", _column("first_audio_ms"), MEASURED, False),
    Metric("whole_turn", "whole turn", _column("whole_turn_ms"), MEASURED, False),
)


@dataclass(frozen=True, slots=True)
class Growth:
    """How a metric moved across a sweep's points, with the first-to-last change's interval."""

    metric: Metric
    steps: tuple[float | None, ...]  # the quantile per point that ran, in sweep order
    change: Diff  # the last point's quantile - the first point's, with its interval

    @property
    def value(self) -> float:
        return self.change.value if self.change.value is not None else float("-inf")


@dataclass(frozen=True, slots=True)
class Series:
    """The points that ran, in order: the variable's values and each one's turns."""

    variable: str
    values: tuple[str, ...]
    conds: tuple[Condition, ...]
    name: str  # seeds the bootstrap intervals (one name, one set of intervals)


def growths(s: Series, q: float) -> list[Growth]:
    """Every segment's change in its ``q``-quantile from the first point that ran to the last, largest first."""
    first, last = s.conds[0], s.conds[-1]
    out = []
    for m in METRICS:
        x, base = m.values(last), m.values(first)
        if not len(x) or not len(base):
            continue
        steps = tuple(quantile_or_none(m.values(c), q) for c in s.conds)
        name = f"{s.name}|{m.key}|{q}"
        out.append(Growth(m, steps, diff_of(x, f"{name}|last", base, f"{name}|first", q)))
    return sorted(out, key=lambda g: g.value, reverse=True)


def quantile_or_none(values: np.ndarray, q: float) -> float | None:
    return quantile(values, q) if len(values) else None


def bottleneck(ranked: Sequence[Growth], queue_inside: bool) -> tuple[Growth, Growth | None] | None:
    """The part of the turn that grows most, and the wider segment it was found inside (or None)."""
    parts = [g for g in ranked if g.metric.part]
    if not parts:
        return None
    top = parts[0]
    if top.metric.key != "first_token_wait" or top.value <= 0:
        return top, None
    inside = {"network"} | ({"queue"} if queue_inside else set())
    share = [g for g in parts if g.metric.key in inside and g.value >= GROWTH_SHARE * top.value]
    return (share[0], top) if share else (top, None)


def _steps(g: Growth) -> str:
    known = [m for m in g.steps if m is not None]
    listed = " -> ".join("-" if m is None else f"{m:.1f}" for m in g.steps)
    whole = len(known) == len(g.steps)
    if g.value > 0:
        every = whole and all(b > a for a, b in itertools.pairwise(known))
        return f"{'growing at every step' if every else 'not growing at every step'} ({listed} ms)"
    every = whole and all(b < a for a, b in itertools.pairwise(known))
    return f"{'falling at every step' if every else 'not falling at every step'} ({listed} ms)"


def _change(g: Growth) -> str:
    d = g.change
    # a ratio from under a millisecond (an empty queue) says nothing the ms do not say better
    ratio = f", x{(d.base + d.value) / d.base:.2f}" if d.base and d.base >= 1.0 and d.value is not None else ""
    return f"{cells.signed(d.value)} {cells.interval(d.interval, sign=True)}{ratio}"


def _span(g: Growth, s: Series, stat: str) -> str:
    base = g.change.base
    last = base + g.change.value if base is not None and g.change.value is not None else None
    v0, v1 = s.values[0], s.values[-1]
    return f"{stat} {cells.ms(base)} ms at {s.variable}={v0} -> {cells.ms(last)} ms at {s.variable}={v1}"


def reading(s: Series, q: float, queue_inside: bool) -> list[str]:
    """The bottleneck at one quantile, in words computed from the growths; at the median also the next
    ones and the end-to-end change (M17). The P90 reading is the tail's (M8): a queue shows there first."""
    stat = "median" if q == 0.5 else f"P{100 * q:.0f}"
    ranked = growths(s, q)
    found = bottleneck(ranked, queue_inside)
    if found is None:
        return [f"No segment has values at both ends of the sweep: no bottleneck can be named ({stat})."]
    named, within = found
    clear = named.value > 0 and named.change.real
    out = [_named(s, stat, named, within) if clear else _unclear(s, stat, named)]
    if not clear:
        out += _fall(s, ranked, stat)
    if q != 0.5:
        return out
    others = [g for g in ranked if g.metric.part and g not in (named, within)][:3]
    if clear and others:
        out.append("Next: " + "; ".join(f"{g.metric.label} {cells.signed(g.change.value)}" for g in others) + ".")
    totals = sorted((g for g in ranked if g.metric.key in ("whole_turn", "first_audio")), key=lambda g: g.metric.key)
    if totals:
        ends = "; ".join(
            f"{g.metric.label} {_span(g, s, stat)} ({cells.signed(g.change.value)}, {cells.percent(g.change.percent)})"
            for g in totals
        )
        out.append(f"End to end over the same points (M17): {ends}.{_share(named, totals) if clear else ''}")
    return out


def _named(s: Series, stat: str, named: Growth, within: Growth | None) -> str:
    if within is None:
        return (
            f"Bottleneck ({stat}): {named.metric.label} grows most with {s.variable}: "
            f"{_span(named, s, stat)} ({_change(named)}), {_steps(named)}."
        )
    return (
        f"Bottleneck ({stat}): {named.metric.label}, inside the first-token wait. The first-token wait grows "
        f"most with {s.variable} ({_span(within, s, stat)}, {_change(within)}), and "
        f"{named.metric.label} is {100 * named.value / within.value:.0f}% of that "
        f"({_span(named, s, stat)}, {_change(named)}), {_steps(named)}."
    )


def _unclear(s: Series, stat: str, top: Growth) -> str:
    where = f"from {s.variable}={s.values[0]} to {s.values[-1]}"
    if top.value <= 0:
        return f"No segment's {stat} grows {where}."
    why = "its 95% interval includes zero" if top.change.interval else "too few turns for an interval"
    return (
        f"No segment's {stat} clearly grows {where}: the largest growth, {top.metric.label} "
        f"({_span(top, s, stat)}, {_change(top)}), is not distinguishable from no change ({why}); more rounds "
        "per point would tell."
    )


def _fall(s: Series, ranked: Sequence[Growth], stat: str) -> list[str]:
    """Where nothing clearly grows, the part that clearly falls most: the variable's effect runs the other way."""
    falls = [g for g in ranked if g.metric.part and g.value < 0 and g.change.real]
    if not falls:
        return []
    g = min(falls, key=lambda g: g.value)
    return [f"What falls most instead: {g.metric.label}, {_span(g, s, stat)} ({_change(g)}), {_steps(g)}."]


def _share(named: Growth, totals: Sequence[Growth]) -> str:
    """How much of the whole turn's change the named segment is (M17: rarely all of it)."""
    whole = next((g for g in totals if g.metric.key == "whole_turn"), None)
    if whole is None or whole.value <= 0:
        return ""
    if named.value > whole.value:
        return (
            f" {named.metric.label} grows by more than the whole turn ({cells.signed(named.change.value)} against "
            f"{cells.signed(whole.change.value)}): other parts of the turn changed the other way."
        )
    return (
        f" Of the whole turn's {cells.signed(whole.change.value)}, {named.metric.label} is "
        f"{cells.signed(named.change.value)} ({100 * named.value / whole.value:.0f}%)."
    )
