"""Drift check: does a run get slower over its duration, as a heating device does (METHOD M20)?

Rule, per run and metric (whole turn, first token), over measured successful turns in run
order: each turn's latency is divided by the median latency of *the same question* in that
run, so questions that are simply longer do not look like drift (every round asks the same
questions in the same order, M5). On these relative latencies:

- rho: Spearman's rank correlation with run order (ties get average ranks): the Pearson
  correlation of the two sides' ranks, computed with numpy (``pipeline.analysis.stats``; scipy's
  ``spearmanr`` gives the same, and the tests hold ``ranks`` and ``spearman`` to it, but importing
  ``scipy.stats`` took 0.58 s and its teardown at exit 0.27 s, measured here: most of a second of a
  fleet's 10 s report, for two functions).
- rise: median of the second half over median of the first half, minus 1.

The run is flagged as drifting when rho >= 0.5 and rise >= 5 %. The check needs at least 6
such turns and at least 2 measured rounds (with one round every question is its own
reference, and nothing can be compared); otherwise it says it was not made.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from pipeline.analysis.numbers import measured_ok, median
from pipeline.analysis.stats import spearman
from pipeline.records.turn_row import TurnRow, column
from pipeline.report.conditions import number, rows_by_run

MIN_TURNS = 6
MIN_ROUNDS = 2
RHO_FLAG = 0.5
RISE_FLAG = 0.05
METRICS = ("whole_turn_ms", "first_token_ms")


@dataclass(frozen=True, slots=True)
class Drift:
    """Whether a run's latency drifted over its run order (M20), or why that was not checked."""

    run_id: str
    metric: str
    n: int
    rho: float | None
    rise: float | None  # fraction: 0.08 = second half 8 % slower
    flagged: bool
    why_not: str  # why the check was not made; empty when it was


def _order(row: TurnRow) -> int:
    start = row.turn_start_ns
    return int(start) if isinstance(start, int) else 0


def relative_latencies(rows: Sequence[TurnRow], metric: str) -> np.ndarray:
    """Latency / same question's median (rows: one run's measured ok turns, in run order)."""
    by_question: dict[str, list[float]] = {}
    kept: list[tuple[str, float]] = []
    get = column(metric)
    for row in rows:
        value = number(get(row))
        if value is None:
            continue
        q = str(row.question_id)
        by_question.setdefault(q, []).append(value)
        kept.append((q, value))
    medians = {q: median(v) for q, v in by_question.items()}
    return np.asarray([v / medians[q] if medians[q] else 1.0 for q, v in kept], dtype=np.float64)


def _measured_in_order(rows: Sequence[TurnRow]) -> list[TurnRow]:
    return sorted((r for r in rows if measured_ok(r)), key=_order)


def check(run_id: str, rows: Sequence[TurnRow], metric: str) -> Drift:
    """``rows``: the run's rows; warm-up and failed turns are left out here."""
    return _check(run_id, _measured_in_order(rows), metric)


def _check(run_id: str, measured: Sequence[TurnRow], metric: str) -> Drift:
    """``measured``: the run's measured ok turns, in run order."""
    rounds = {r.round for r in measured}
    rel = relative_latencies(measured, metric)
    n = len(rel)
    if n == 0:
        return Drift(run_id, metric, 0, None, None, False, "no successful measured turn")
    if len(rounds) < MIN_ROUNDS:
        return Drift(run_id, metric, n, None, None, False, f"needs {MIN_ROUNDS} measured rounds, has {len(rounds)}")
    if n < MIN_TURNS:
        return Drift(run_id, metric, n, None, None, False, f"needs {MIN_TURNS} successful turns, has {n}")
    rho = spearman(np.arange(n, dtype=np.float64), rel)
    half = n // 2
    first, second = median(rel[:half]), median(rel[n - half :])
    rise = second / first - 1 if first else None
    flagged = rho is not None and rise is not None and rho >= RHO_FLAG and rise >= RISE_FLAG
    return Drift(run_id, metric, n, rho, rise, flagged, "")


def check_runs(rows: Sequence[TurnRow]) -> list[Drift]:
    """Every run, every drift metric, in first-seen run order."""
    runs = rows_by_run(rows)
    measured = {run_id: _measured_in_order(run_rows) for run_id, run_rows in runs.items()}  # once per run
    return [_check(run_id, measured[run_id], metric) for run_id in runs for metric in METRICS]
