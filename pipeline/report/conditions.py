"""Rows grouped by condition: A (cloud), B (local), B' (offline), then any other label (METHOD M13).

Warm-up rows stay in ``rows`` and are left out of ``measured`` (M6); failed turns stay in
``measured`` and out of ``ok`` (M7).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from pipeline.analysis.numbers import measured
from pipeline.records.turn_row import TurnRow, column
from pipeline.report.load import Dataset

KNOWN = ("A", "B", "B'")
TITLES = {"A": "A (cloud)", "B": "B (local)", "B'": "B' (offline)"}


def title(label: str) -> str:
    return TITLES.get(label, label or "(no condition)")


def ordered_labels(found: Sequence[str]) -> list[str]:
    """A, B, B' always (measured or not), then the other labels found, sorted."""
    return [*KNOWN, *sorted(set(found) - set(KNOWN))]


def number(value: object) -> float | None:
    # Called for every row and column of a report (millions of times for 100,000 turns):
    # the exact-type test first is the cheap path for what rows hold.
    kind = type(value)
    if kind is float or kind is int:
        return float(value)  # type: ignore[arg-type]
    if kind is bool or not isinstance(value, (int, float)):
        return None
    return float(value)


_PLAIN = frozenset((float, int, type(None)))  # cells numpy turns into floats as ``number`` does (not bool)


def _nan_number(value: object) -> float:
    found = number(value)
    return np.nan if found is None else found


def per_call(row: TurnRow) -> list[float | None]:
    """The turn's per-call first-token times (None for a call without a first token)."""
    text = row.llm_first_token_ms_per_call
    if not isinstance(text, str) or not text:
        return []
    parts = text.split(";")
    if all(parts):  # every call had its first token: the parts converted in C (a fleet has a hundred thousand)
        return list(map(float, parts))
    return [float(part) if part else None for part in parts]


@dataclass(frozen=True, slots=True)
class Condition:
    """One condition's rows and what its figures are read from (warm-up left out, M6)."""

    label: str
    runs: tuple[str, ...]
    rows: tuple[TurnRow, ...]  # every row, warm-up included, in run order
    measured: tuple[TurnRow, ...]  # warm-up excluded
    ok: tuple[TurnRow, ...]  # measured and successful
    sentence_ms: np.ndarray  # every sentence's first token, measured ok turns (float64)
    call_ms: np.ndarray  # every call's first token, measured ok turns
    failed_stages: tuple[tuple[str, ...], ...]  # per failed measured turn
    ok_calls: tuple[list[float | None], ...]  # ``per_call`` of each of ``ok``
    index: tuple[int, ...]  # where each of ``rows`` is among the rows it was grouped from
    ok_index: tuple[int, ...]  # where each of ``ok`` is
    _cache: dict[str, np.ndarray] = field(default_factory=dict, compare=False, repr=False)
    _keys: list[tuple[str, object]] = field(default_factory=list, compare=False, repr=False)
    _matched: list[tuple[Condition, np.ndarray, np.ndarray]] = field(default_factory=list, compare=False, repr=False)

    @property
    def title(self) -> str:
        return title(self.label)

    def column(self, metric: str) -> np.ndarray:
        """``metric`` of every measured successful turn, in order, NaN where it has none (cached)."""
        return self._numbers("column", self.ok, metric)

    def measured_column(self, metric: str) -> np.ndarray:
        """``column`` over every measured turn, failed ones too (cached)."""
        return self._numbers("measured", self.measured, metric)

    def _numbers(self, kind: str, rows: Sequence[TurnRow], metric: str) -> np.ndarray:
        key = f"{kind}:{metric}"
        if key not in self._cache:
            get = column(metric)
            found = [get(r) for r in rows]
            # numpy's own conversion where it converts as ``number`` does (None is NaN): most columns,
            # and a fleet's millions of cells
            if set(map(type, found)) <= _PLAIN:
                self._cache[key] = np.array(found, np.float64)
            else:
                self._cache[key] = np.asarray([_nan_number(v) for v in found], np.float64)
        return self._cache[key]

    def values(self, metric: str) -> np.ndarray:
        """Sorted values of ``metric`` over measured successful turns."""
        key = f"values:{metric}"
        if key not in self._cache:
            column = self.column(metric)
            self._cache[key] = np.sort(column[~np.isnan(column)])
        return self._cache[key]

    def turn_sum_column(self) -> np.ndarray:
        """Per measured successful turn, the first-token waits of all its calls added; NaN when a
        call has none (cached)."""
        key = "column:(first-token wait per turn)"
        if key not in self._cache:
            sums = []
            for calls in self.ok_calls:
                complete = bool(calls) and all(c is not None for c in calls)
                sums.append(sum(c for c in calls if c is not None) if complete else np.nan)
            self._cache[key] = np.asarray(sums, dtype=np.float64)
        return self._cache[key]

    def turn_sums(self) -> np.ndarray:
        column = self.turn_sum_column()
        return np.sort(column[~np.isnan(column)])

    def turn_keys(self) -> list[tuple[str, object]]:
        """(question, round) of every measured successful turn, in order: how conditions pair up (cached)."""
        if len(self._keys) != len(self.ok):
            self._keys[:] = [(str(r.question_id), r.round) for r in self.ok]
        return self._keys

    def matched(self, base: Condition) -> tuple[np.ndarray, np.ndarray]:
        """Positions in ``ok`` of this condition's turns that ``base`` has too, by ``turn_keys``, and of
        base's turn each is paired with (the last with its key) (cached: the same for every metric)."""
        for other, mine, theirs in self._matched:
            if other is base:
                return mine, theirs
        last = {key: i for i, key in enumerate(base.turn_keys())}
        pairs = [(j, last[key]) for j, key in enumerate(self.turn_keys()) if key in last]
        mine = np.array([j for j, _ in pairs], dtype=np.int64)
        theirs = np.array([i for _, i in pairs], dtype=np.int64)
        self._matched.append((base, mine, theirs))
        return mine, theirs


def rows_by_run(rows: Iterable[TurnRow]) -> dict[str, list[TurnRow]]:
    """Rows by run id, runs in first-seen order, each run's rows in the order given."""
    out: dict[str, list[TurnRow]] = {}
    for row in rows:
        out.setdefault(str(row.run_id), []).append(row)
    return out


def _order_key(row: TurnRow) -> tuple[str, int]:
    start = row.turn_start_ns
    return str(row.run_id), int(start) if isinstance(start, int) else 0


def group(data: Dataset) -> dict[str, Condition]:
    """Conditions that have rows, keyed by label, in ``ordered_labels`` order."""
    indices: dict[str, list[int]] = {}
    for i, row in enumerate(data.rows):
        indices.setdefault(str(row.condition or ""), []).append(i)
    order = list(map(_order_key, data.rows))  # each row's key once, looked up by index in C while sorting
    out = {}
    for label in ordered_labels(list(indices)):
        if label in indices:
            out[label] = _condition(data, label, sorted(indices[label], key=order.__getitem__))
    return out


def _condition(data: Dataset, label: str, idx: list[int]) -> Condition:
    rows = [data.rows[i] for i in idx]
    measured_idx = [i for i in idx if measured(data.rows[i])]
    ok_idx = [i for i in measured_idx if data.rows[i].ok]
    sentences = [v for i in ok_idx for v in data.sentence_ms[i]]
    ok_calls = tuple(per_call(data.rows[i]) for i in ok_idx)
    calls = [c for turn in ok_calls for c in turn if c is not None]
    runs = tuple(dict.fromkeys(str(r.run_id) for r in rows))
    return Condition(
        label=label,
        runs=runs,
        rows=tuple(rows),
        measured=tuple(data.rows[i] for i in measured_idx),
        ok=tuple(data.rows[i] for i in ok_idx),
        sentence_ms=np.sort(np.asarray(sentences, dtype=np.float64)),
        call_ms=np.sort(np.asarray(calls, dtype=np.float64)),
        failed_stages=tuple(data.failed_stages[i] for i in measured_idx if not data.rows[i].ok),
        ok_calls=ok_calls,
        index=tuple(idx),
        ok_index=tuple(ok_idx),
    )
