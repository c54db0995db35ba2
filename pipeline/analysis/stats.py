"""Pure statistics over bench rows: medians, P90, extremes and success rates (METHOD M6-M8).

Warm-up rows are excluded here, never deleted from the raw rows. A figure
computed over fewer than all measured turns carries its count so the reader sees it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from pipeline.analysis.numbers import measured, quantile
from pipeline.records.turn_row import TurnRow, column

HEADLINE_METRICS = (
    "whole_turn_ms",
    "first_audio_ms",
    "first_token_ms",
    "total_ms",
    "vad_endpoint_ms",
    "asr_ms",
    "tts_first_frame_ms",
    "sentence_first_token_median_ms",
    "llm_calls",
    "sentences",
    "asr_error_rate",
    "answer_quality",
)


@dataclass(frozen=True, slots=True)
class Summary:
    """One metric over a group's measured turns: how many, median, P90, least and greatest."""

    metric: str
    n: int  # values the figures were computed from
    turns: int  # measured (non-warm-up) turns in the group
    median: float | None
    p90: float | None
    minimum: float | None
    maximum: float | None

    @property
    def partial(self) -> bool:
        return self.n < self.turns


def summarize(rows: Sequence[TurnRow], metric: str) -> Summary:
    return summaries(rows, (metric,))[0]


def summaries(rows: Sequence[TurnRow], metrics: Sequence[str]) -> list[Summary]:
    """``summarize`` for each metric, the measured and the successful turns found once for all of them."""
    turns = [r for r in rows if measured(r)]
    ok = [r for r in turns if r.ok]
    return [_summary(metric, ok, len(turns)) for metric in metrics]


def _summary(metric: str, ok: Sequence[TurnRow], turns: int) -> Summary:
    get = column(metric)
    values = sorted(float(v) for r in ok if isinstance((v := get(r)), (int, float)))
    if not values:
        return Summary(metric, 0, turns, None, None, None, None)
    array = np.array(values)  # converted once for both quantiles
    return Summary(metric, len(values), turns, quantile(array, 0.5), quantile(array, 0.9), values[0], values[-1])


def success_rate(rows: Sequence[TurnRow]) -> tuple[int, int]:
    """(ok turns, measured turns), warm-up excluded."""
    turns = [r for r in rows if measured(r)]
    return sum(1 for r in turns if r.ok), len(turns)


def group_rows(rows: Sequence[TurnRow]) -> dict[tuple[str, str, str], list[TurnRow]]:
    """Rows by (run_id, condition, config_id), in first-seen order."""
    groups: dict[tuple[str, str, str], list[TurnRow]] = {}
    for row in rows:
        key = (str(row.run_id), str(row.condition), str(row.config_id))
        groups.setdefault(key, []).append(row)
    return groups


def ranks(values: np.ndarray) -> np.ndarray:
    """1-based ranks, ties averaged (scipy's ``rankdata(method="average")``); ``values`` without NaN."""
    values = np.asarray(values, dtype=np.float64)
    order = np.argsort(values, kind="stable")
    ordered = values[order]
    new = np.empty(len(values), dtype=bool)
    new[:1] = True
    np.not_equal(ordered[1:], ordered[:-1], out=new[1:])  # where each run of equal values starts
    starts = np.flatnonzero(new)
    ends = np.append(starts[1:], len(values))  # one past each run's last
    out = np.empty(len(values), dtype=np.float64)
    out[order] = ((starts + 1 + ends) / 2)[np.cumsum(new) - 1]  # a run's ranks start+1 ... end, averaged
    return out


def spearman(x: np.ndarray, y: np.ndarray) -> float | None:
    """Spearman's rank correlation (as scipy's ``spearmanr``); None when either side does not vary."""
    if len(x) < 2 or np.all(x == x[0]) or np.all(y == y[0]):
        return None
    if np.isnan(x).any() or np.isnan(y).any():
        return math.nan  # as scipy's: a NaN has no rank
    return float(np.corrcoef(ranks(x), ranks(y))[0, 1])
