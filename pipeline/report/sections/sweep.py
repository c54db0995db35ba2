"""The sweep section (M15, M17, M18): one variable changed, the rest held, and the segment that grows with it.

Shown only when the traces sit beside a ``sweep.json`` (``pipeline.report.sweeps``). Each point
is one run: a column of medians and P90s of the turn's segments (M2's queue, network, first-token
wait and generation, and the voice stages), the success rate, and the quality check (answer
quality, ASR error rate) beside the latency (M18).

The bottleneck reading, at the median and at the P90, is ``sweep_reading``'s.

Other work on the machine is a second variable a sweep does not control (M9): each point's
share of turns measured on a busy machine is in the table, and a warning says so when any
point had such turns.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from pipeline.analysis.facts import Q_INSIDE, placement
from pipeline.analysis.numbers import median, quantile
from pipeline.report import cells
from pipeline.report.conditions import Condition, group
from pipeline.report.document import NOTE, WARNING, Block, Heading, Paragraph, Table
from pipeline.report.load import Dataset
from pipeline.report.runs import BUSY_SHARE, RunLoad, run_loads
from pipeline.report.sections.base import MEASURED, Context
from pipeline.report.sections.sweep_reading import METRICS, Metric, Series, quantile_or_none, reading
from pipeline.report.sweeps import OK, Sweep, SweepPoint, check


@dataclass(frozen=True, slots=True)
class PointTurns:
    """A sweep point and, where it ran and its turns are in the traces, its turns as one condition."""

    point: SweepPoint
    cond: Condition | None
    missing: str = ""  # why there is no condition: what its cells say instead


def sweep_point(data: Dataset, point: SweepPoint) -> PointTurns:
    if point.status != OK:
        return PointTurns(point, None, f"{cells.NOT_MEASURED} (point {point.status})")
    cond = run_condition(data, point.run_id)
    return PointTurns(point, cond, "" if cond is not None else f"{cells.NOT_MEASURED} (run not in these traces)")


def run_condition(data: Dataset, run_id: str) -> Condition | None:
    """One run's turns as a condition (a run has one condition label)."""
    idx = [i for i, r in enumerate(data.rows) if r.run_id == run_id]
    if not idx:
        return None
    return next(iter(group(data.subset(idx)).values()))


def _latency(values: np.ndarray, turns: int) -> str:
    if not len(values):
        return cells.not_measured(turns)
    return f"{quantile(values, 0.5):.1f} / {quantile(values, 0.9):.1f} · {cells.count(len(values), turns)}"


def _latency_cell(metric: Metric) -> Callable[[Condition], str]:
    return lambda c: _latency(metric.values(c), len(c.measured))


def _quality(cond: Condition) -> str:
    values = cond.values("answer_quality")
    if not len(values):
        return f"{cells.NOT_MEASURED} (not scored)"
    return f"{float(np.mean(values)):.2f} / {median(values):.2f} · {cells.count(len(values), len(cond.measured))}"


def _error_rate(cond: Condition) -> str:
    values = cond.values("asr_error_rate")
    if not len(values):
        return f"{cells.NOT_MEASURED} (no reference text)"
    return f"{median(values):.3f} · {cells.count(len(values), len(cond.measured))}"


def _run_load(cond: Condition) -> RunLoad | None:
    found = run_loads(list(cond.measured))
    return found[0] if found and found[0].turns else None


def _load(cond: Condition) -> str:
    load = _run_load(cond)
    if load is None or load.median_share is None:
        return f"{cells.NOT_MEASURED} (no reading)"
    return f"{load.median_share:.2f} · {load.busy}/{load.turns} busy"


def load_warning(sweep: Sweep, ran: Sequence[PointTurns]) -> str:
    """M9: other work on the machine during some points is a second variable the sweep did not hold."""
    loads = [(p.point.value, _run_load(p.cond)) for p in ran if p.cond is not None]
    if not any(load is not None and load.busy for _, load in loads):
        return ""
    listed = "; ".join(
        f"{sweep.variable}={value}: {load.busy} of {load.turns} turns busy, median {load.median_share:.2f} cores"
        for value, load in loads
        if load is not None and load.median_share is not None
    )
    return (
        f"Background load was not held (M9): other processes kept the machine busy during the sweep ({listed}). A "
        f"change between points may be that load's, not {sweep.variable}'s: re-run the sweep on a quiet machine."
    )


def sweep_table(sweep: Sweep, points: Sequence[PointTurns]) -> Table:
    def line(label: str, cell: Callable[[Condition], str], attribution: str) -> tuple[str, ...]:
        return (label, *(cell(p.cond) if p.cond is not None else p.missing for p in points), attribution)

    rows = [
        ("run", *(p.point.run_id for p in points), "-"),
        ("config_id", *(p.point.config_id or "-" for p in points), "-"),
        ("setting", *(p.point.setting or "-" for p in points), "-"),
        line("success rate", lambda c: cells.rate(len(c.ok), len(c.measured)), MEASURED),
        *(line(f"{m.label} (ms)", _latency_cell(m), m.attribution) for m in METRICS),
        line("answer quality (share of expected keywords), mean / median", _quality, MEASURED),
        line("ASR error rate, median", _error_rate, MEASURED),
        line(f"other processes: cores busy, median · turns with >= {BUSY_SHARE:g} (M9)", _load, MEASURED),
    ]
    caption = (
        "Each column one point (one run), in the sweep's order. Latency cells: median / P90 in ms · turns with a "
        "value / measured turns (warm-up excluded, M6); segments summed over the turn's LLM calls."
    )
    headers = ("", *(f"{sweep.variable}={p.point.value}" for p in points), "attribution")
    return Table(f"sweep-{sweep.sweep_id}", headers, tuple(rows), caption)


def quality_reading(sweep: Sweep, ran: Sequence[PointTurns]) -> tuple[str, bool]:
    """M18: each point's quality check beside its latency; False when nothing was scored."""
    parts = []
    scored = False
    for p in ran:
        assert p.cond is not None
        wait = quantile_or_none(p.cond.turn_sums(), 0.5)
        turn = quantile_or_none(p.cond.values("whole_turn_ms"), 0.5)
        quality = p.cond.values("answer_quality")
        errors = p.cond.values("asr_error_rate")
        scored = scored or bool(len(quality))
        parts.append(
            f"{sweep.variable}={p.point.value}: first-token wait {cells.ms(wait)} ms, whole turn "
            f"{cells.ms(turn)} ms, answer quality "
            + (f"{float(np.mean(quality)):.2f}" if len(quality) else "not scored")
            + ", ASR error rate "
            + (f"{median(errors):.3f}" if len(errors) else "not scored")
        )
    return "Quality beside latency (M18; answer quality: mean share of expected keywords): " + "; ".join(
        parts
    ) + ".", scored


def _queue_inside(data: Dataset, ran: Sequence[PointTurns]) -> bool:
    runs = {p.point.run_id for p in ran}
    return placement(data.queue_places(i) for i, r in enumerate(data.rows) if r.run_id in runs) == Q_INSIDE


def _sweep_blocks(ctx: Context, sweep: Sweep) -> list[Block]:
    values = ", ".join(p.value for p in sweep.points)
    out: list[Block] = [Heading(2, f"Sweep {sweep.sweep_id}: {sweep.variable} varied, the rest held (M15)")]
    out.append(
        Paragraph(
            f"{len(sweep.points)} points, {sweep.variable} = {values}, read in this order. Each point is its own run "
            f"with its own config_id; the runs may differ only in {', '.join(sweep.settings)} (checked against the "
            f"settings each run recorded, M11) and ask the same questions (M5). Record: {sweep.path}."
        )
    )
    result = check(sweep, ctx.data.runs, ctx.data.rows)
    if result.reasons:
        ctx.incomplete.append(f"sweep {sweep.sweep_id} refused (M11)")
        out.append(Paragraph("Refused (M11): " + "; ".join(result.reasons) + ".", WARNING))
        return out
    out.extend(Paragraph(w, WARNING) for w in result.warnings)
    points = [sweep_point(ctx.data, p) for p in sweep.points]
    failed = [p for p in sweep.points if p.status != OK]
    for f in failed:
        why = f.error or "the sweep did not reach it"
        out.append(Paragraph(f"Point {sweep.variable}={f.value} ({f.run_id}) {f.status}: {why}.", WARNING))
    if failed:
        ctx.incomplete.append(f"sweep {sweep.sweep_id}: {len(failed)} point(s) not measured")
    out.append(sweep_table(sweep, points))
    ran = [p for p in points if p.cond is not None and p.cond.ok]
    if len(ran) < 2:
        out.append(Paragraph(f"{len(ran)} point(s) with successful turns: a sweep needs two to compare.", WARNING))
        return out
    loaded = load_warning(sweep, ran)
    if loaded:
        out.append(Paragraph(loaded, WARNING))
    inside = _queue_inside(ctx.data, ran)
    series = Series(
        sweep.variable,
        tuple(p.point.value for p in ran),
        tuple(p.cond for p in ran if p.cond is not None),
        f"sweep|{sweep.sweep_id}",
    )
    words = [*reading(series, 0.5, inside), *reading(series, 0.9, inside)]
    ran_ids = {p.point.run_id for p in ran}
    scripted = sorted({f.scripted for f in ctx.run_summaries if f.scripted and f.run_id in ran_ids})
    if scripted:
        words[0] += f" (Simulated stages ({', '.join(scripted)}): this describes the simulator's settings.)"
    out.extend(Paragraph(w) for w in words)
    quality, scored = quality_reading(sweep, ran)
    model = sweep.variable == "model"
    out.append(Paragraph(quality, NOTE if scored or not model else WARNING))
    if model and not scored:
        ctx.incomplete.append(f"sweep {sweep.sweep_id}: no quality check for a model-size sweep (M18)")
        out.append(
            Paragraph(
                "No quality check (M18): answer quality was not scored (the questions carry no expected "
                "keywords), and capability loss does not show in latency figures.",
                WARNING,
            )
        )
    return out


def _in_view(sweep: Sweep, runs: set[str]) -> bool:
    """Two of its points in these traces, or every point that ran (a report of one point alone
    with ``--run`` is no sweep)."""
    present = sum(p.run_id in runs for p in sweep.points)
    absent = any(p.status == OK and p.run_id not in runs for p in sweep.points)
    return present >= 2 or (present == 1 and not absent)


def section(ctx: Context) -> list[Block]:
    out: list[Block] = [Paragraph(p, WARNING) for p in ctx.sweep_problems]
    shown = _shown(ctx)
    for sweep in shown:
        out.extend(_sweep_blocks(ctx, sweep))
    if shown and not covering(ctx):
        out.append(
            Paragraph(
                "The sections below compare conditions and pool each condition's runs; this folder's sweep points "
                "differ by design, so they see a refused comparison (M11). Read the sweep above; report one point "
                "alone with --run RUN_ID.",
                NOTE,
            )
        )
    return out


def _shown(ctx: Context) -> list[Sweep]:
    return [s for s in ctx.sweeps if _in_view(s, set(ctx.data.runs))]


def covering(ctx: Context) -> list[Sweep]:
    """The sweeps whose points are every run in view: then the report is the sweep's reading alone
    (pooling its points by condition would mix the values of its variable)."""
    shown = _shown(ctx)
    points = {p.run_id for s in shown for p in s.points}
    return shown if shown and set(ctx.data.runs) <= points else []


def comparable(ctx: Context, sweeps: Sequence[Sweep]) -> bool:
    """Whether every covering sweep's points may be compared (its own M11 and M5 check)."""
    return all(not check(s, ctx.data.runs, ctx.data.rows).reasons for s in sweeps)
