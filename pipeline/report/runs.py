"""Facts per run and per condition: warm-up, missing turns, failures, temperature,
simulated stages (METHOD M6, M7, M9, M20)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from pipeline.analysis.numbers import measured, median
from pipeline.records.turn_row import TurnRow, column
from pipeline.report.conditions import Condition, number, rows_by_run
from pipeline.report.load import RunInfo

TEMP_BAND_C = 5.0


@dataclass(frozen=True, slots=True)
class RunSummary:
    """One run's turns summed up: warm-up, missing turns, failures, settings asked for."""

    run_id: str
    condition: str
    config_ids: tuple[str, ...]
    clock: str
    scripted: str  # stages whose latencies were scripted, "" when none
    turns: int
    warmup: int
    measured: int
    ok: int
    rounds: int
    questions: int
    expected: int | None  # turns the run's settings ask for, None when unknown
    errors: tuple[tuple[str, int], ...]  # error class -> measured turns
    warmup_first_token: float | None  # median over warm-up ok turns
    measured_first_token: float | None


def _median(rows: Sequence[TurnRow], metric: str) -> float | None:
    get = column(metric)
    values = [v for r in rows if r.ok and (v := number(get(r))) is not None]
    return median(values) if values else None


def _expected(run: RunInfo | None, questions: int) -> int | None:
    """Turns the run's settings ask for: rounds x the questions it recorded asking (else those found,
    at most --limit: a limit beyond the question set asks for no more questions than there are)."""
    if run is None:
        return None
    recorded = run.settings()
    if recorded is None:
        return None
    try:
        settings = recorded.get("run", {})
        rounds, limit = int(settings["rounds"]), int(settings.get("limit", 0))
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
    if run.question_count is not None:
        return rounds * run.question_count
    return rounds * (min(limit, questions) if limit else questions)


def run_summaries(rows: Sequence[TurnRow], runs: dict[str, RunInfo]) -> list[RunSummary]:
    out = []
    for run_id, rr in rows_by_run(rows).items():
        warm = [r for r in rr if not measured(r)]
        turns = [r for r in rr if measured(r)]
        errors: dict[str, int] = {}
        for r in turns:
            if not r.ok:
                errors[str(r.error or "unknown")] = errors.get(str(r.error or "unknown"), 0) + 1
        questions = len({r.question_id for r in rr})
        out.append(
            RunSummary(
                run_id=run_id,
                condition=rr[0].condition,
                config_ids=tuple(dict.fromkeys(str(r.config_id) for r in rr)),
                clock=", ".join(sorted({str(r.clock) for r in rr if r.clock})),
                scripted=", ".join(sorted({str(r.scripted) for r in rr if r.scripted})),
                turns=len(rr),
                warmup=len(warm),
                measured=len(turns),
                ok=sum(1 for r in turns if r.ok),
                rounds=len({r.round for r in rr}),
                questions=questions,
                expected=_expected(runs.get(run_id), questions),
                errors=tuple(sorted(errors.items())),
                warmup_first_token=_median(warm, "first_token_ms"),
                measured_first_token=_median(turns, "first_token_ms"),
            )
        )
    return out


def temperatures(cond: Condition) -> tuple[float, float] | None:
    """(lowest, highest) temp_c over measured turns; None when no turn has a reading."""
    temps = [v for v in cond.measured_column("temp_c").tolist() if v == v]  # NaN: no reading
    return (min(temps), max(temps)) if temps else None


def temperature_bands(cond: Condition, metric: str = "whole_turn_ms") -> list[tuple[float, float, int]]:
    """(band start °C, median of ``metric``, turns) per 5 °C band (M20: median within a range)."""
    bands: dict[float, list[float]] = {}
    get = column(metric)
    for r in cond.ok:
        t, v = number(r.temp_c), number(get(r))
        if t is not None and v is not None:
            bands.setdefault(math.floor(t / TEMP_BAND_C) * TEMP_BAND_C, []).append(v)
    return [(band, median(v), len(v)) for band, v in sorted(bands.items())]


def duplicate_turns(rows: Sequence[TurnRow]) -> list[tuple[str, str, object, int]]:
    """(run, question, round, rows) for every turn found more than once: two runs merged into one run id."""
    counts: dict[tuple[str, str, object], int] = {}
    for r in rows:
        key = (str(r.run_id), str(r.question_id), r.round)
        counts[key] = counts.get(key, 0) + 1
    return [(run, question, rnd, n) for (run, question, rnd), n in counts.items() if n > 1]


BUSY_SHARE = 0.10  # other processes kept a tenth of a core busy on average during the turn


@dataclass(frozen=True, slots=True)
class RunLoad:
    """How busy the machine was during a run's measured turns."""

    run_id: str
    turns: int  # measured turns with a reading
    busy: int  # of those, measured on a busy machine
    median_share: float | None
    max_share: float | None
    max_load_avg: float | None


def run_loads(rows: Sequence[TurnRow]) -> list[RunLoad]:
    """Per run, how much other work the machine did during its measured turns (empty reading: virtual clock)."""
    out = []
    for run_id, rr in rows_by_run(r for r in rows if measured(r)).items():
        shares = [v for r in rr if (v := number(r.other_cpu_share)) is not None]
        loads = [v for r in rr if (v := number(r.load_avg_1m)) is not None]
        out.append(
            RunLoad(
                run_id,
                len(shares),
                sum(1 for v in shares if v >= BUSY_SHARE),
                median(shares) if shares else None,
                max(shares) if shares else None,
                max(loads) if loads else None,
            )
        )
    return out
