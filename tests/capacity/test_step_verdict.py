"""A capacity step's figures, verdict and the ramp's knee, on pure data with exact values."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.analysis.bootstrap import quantile_interval
from pipeline.capacity import step_verdict
from pipeline.capacity.ramp_plan import PlanError, RampPlan, parse_duration, parse_margin, parse_steps
from pipeline.capacity.step_verdict import Figures, failure_kind, figures, judge, knee
from pipeline.records.ramp_result import Quantiles, Step
from pipeline.records.turn_row import TurnRow

PLAN = RampPlan(steps=(1, 2, 5), hold_s=10, max_hold_s=50, margin_pct=10, margin_floor_ms=50, min_turns=4)


def row(silence: float | None = 500.0, whole: float | None = 3000.0, error: str = "", warmup: int = 0) -> TurnRow:
    return TurnRow(
        ok=0 if error else 1, error=error, warmup=warmup, first_audible_ms=silence, whole_turn_ms=whole, run_id="r"
    )


def fig(p90: float | None, turns: int = 20, **failures: int) -> Figures:
    kinds = {"no_answer": 0, "cut_connection": 0, "refused": 0, "other": 0, **failures}
    return Figures(turns, kinds, Quantiles(p50=p90, p90=p90, p99=p90), None, None)


def step(devices: int, kind: str) -> Step:
    return Step(
        devices,
        "r",
        "c",
        f"steps/{devices}",
        20,
        {},
        Quantiles(p90=1.0),
        None,
        None,
        1.0,
        None,
        None,
        0,
        None,
        None,
        kind,
        "",
    )


def test_failure_kinds_from_the_rows_error() -> None:
    assert [failure_kind(e) for e in ("empty_transcript", "no_audio_out", "timeout", "tts_no_audio")] == [
        "no_answer"
    ] * 4
    assert failure_kind("disconnected") == "cut_connection"
    assert failure_kind("refused") == "refused"
    assert failure_kind("bad_audio") == failure_kind("ValueError") == "other"


def test_figures_leave_warmups_out_and_count_failures_by_kind() -> None:
    rows = [row(100.0, 1000.0), row(200.0, 2000.0), row(300.0, 3000.0), row(400.0, 4000.0), row(9999.0, warmup=1)]
    rows += [row(None, None, "disconnected"), row(None, None, "timeout"), row(None, None, "refused", warmup=0)]
    f = figures(rows, name="t")
    assert f.turns == 7  # the warm-up left out, failed turns counted
    assert f.failures == {"no_answer": 1, "cut_connection": 1, "refused": 1, "other": 0}
    assert (f.silence_ms.p50, f.silence_ms.p90, f.silence_ms.p99) == (250.0, 370.0, 397.0)
    assert (f.whole_turn_p50_ms, f.whole_turn_p90_ms) == (2500.0, 3700.0)
    ordered = np.array([100.0, 200.0, 300.0, 400.0])
    ci = quantile_interval(ordered, 0.9, "t|first_audible_ms")
    assert ci is not None and f.silence_ms.p90_ci == (ci.low, ci.high)  # the project's own bootstrap, same seed


def test_figures_of_no_rows_say_nothing() -> None:
    f = figures([])
    assert f.turns == 0 and f.silence_ms == Quantiles() and f.whole_turn_p50_ms is None


def test_the_first_step_is_the_baseline_and_later_ones_hold_within_the_margin() -> None:
    assert judge(fig(1000.0), None, None, PLAN) == (
        "holds",
        "the baseline: P90 silence 1000.0 ms; later steps hold up to 1100.0 ms",
    )
    assert judge(fig(1100.0), None, 1000.0, PLAN)[0] == "holds"  # exactly at +10 %
    kind, reason = judge(fig(1100.5), None, 1000.0, PLAN)
    assert kind == "fails" and reason == "P90 silence 1100.5 ms > 1100.0 ms (baseline 1000.0 ms + margin)"
    # a fast server: the floor (50 ms) is more than 10 % of 200 ms
    assert PLAN.allowed_ms(200.0) == 250.0
    assert judge(fig(250.0), None, 200.0, PLAN)[0] == "holds"
    assert judge(fig(250.01), None, 200.0, PLAN)[0] == "fails"


def test_any_failed_turn_fails_the_step() -> None:
    assert judge(fig(900.0, cut_connection=1, no_answer=2), None, 1000.0, PLAN) == (
        "fails",
        "3 of 20 turn(s) failed (2 no answer, 1 cut connection)",
    )


def test_too_few_turns_is_neither_held_nor_failed() -> None:
    assert judge(fig(900.0, turns=3), None, 1000.0, PLAN) == (
        "too_few",
        "3 measured turn(s), fewer than the 4 a P90 needs",
    )
    assert judge(fig(None, turns=30), None, 1000.0, PLAN)[0] == "too_few"


def test_a_late_generator_voids_the_step_whatever_else_it_shows() -> None:
    assert judge(fig(900.0), 5.0, 1000.0, PLAN)[0] == "holds"  # exactly at the goal: not behind
    kind, reason = judge(fig(5000.0, refused=3), 5.01, 1000.0, PLAN)
    assert kind == "void"
    assert reason == "the load generator fell behind: its send lateness P99 5.01 ms > 5 ms"
    assert judge(fig(900.0), None, 1000.0, PLAN)[0] == "holds"  # nothing recorded: not measured, not void


def test_lateness_of_nothing_is_not_measured() -> None:
    assert step_verdict.lateness(np.array([])) == (None, None)
    assert step_verdict.lateness(np.arange(101, dtype=np.float64)) == (50.0, 99.0)


def test_the_knee_is_the_last_held_step_before_the_first_failure() -> None:
    assert knee([step(1, "holds"), step(2, "holds"), step(5, "fails")]) == (2, False)
    assert knee([step(1, "holds"), step(2, "too_few"), step(5, "holds"), step(10, "fails")]) == (5, False)
    assert knee([step(1, "holds"), step(2, "holds"), step(5, "void")]) == (2, True)  # void: never counted
    assert knee([step(1, "fails")]) == (None, False)
    assert knee([step(1, "holds"), step(2, "holds")]) == (2, True)  # a lower bound: nothing failed
    assert knee([]) == (None, True)


def test_the_ramp_stops_after_a_failing_or_void_step_or_without_a_baseline() -> None:
    assert step_verdict.ends_ramp(step(2, "holds"), first=False) == ""
    assert step_verdict.ends_ramp(step(2, "too_few"), first=False) == ""
    assert step_verdict.ends_ramp(step(5, "fails"), first=False).startswith("5 device(s) failed")
    assert step_verdict.ends_ramp(step(5, "void"), first=False).startswith("5 device(s) void")
    assert step_verdict.ends_ramp(step(1, "too_few"), first=True).startswith(
        "the first step (1 device(s)) gave no baseline"
    )
    assert step_verdict.baseline_p90([step(1, "holds")]) == 1.0
    assert step_verdict.baseline_p90([step(1, "too_few")]) is None


def test_plan_values_are_parsed_and_impossible_ones_refused() -> None:
    assert parse_duration("--hold", "60s") == 60.0
    assert parse_duration("--hold", "2m") == 120.0
    assert parse_duration("--hold", "500ms") == 0.5
    assert parse_duration("--hold", "7") == 7.0
    assert parse_steps("1, 2,5") == (1, 2, 5)
    assert parse_margin("10%") == parse_margin("10") == 10.0
    for bad, message in (
        (lambda: parse_duration("--hold", "-3s"), "--hold '-3s': a duration"),
        (lambda: parse_steps("1,x"), "'x' is not a whole number"),
        (lambda: RampPlan(steps=(1, 5, 5)), "--steps: 5 after 5: the steps must increase"),
        (lambda: RampPlan(steps=(0, 5)), "--steps: 0 devices: every step needs at least 1 device"),
        (lambda: RampPlan(steps=()), "--steps: at least one step"),
        (lambda: RampPlan(hold_s=0), "--hold 0s: more than 0 seconds"),
        (lambda: RampPlan(hold_s=60, max_hold_s=30), "--max-hold 30s: at least the hold (60s)"),
        (lambda: RampPlan(margin_pct=-1), "--margin -1%: 0 or more"),
        (lambda: RampPlan(min_turns=0), "--min-turns 0: at least 1"),
        (lambda: parse_margin("ten"), "--margin 'ten'"),
        (lambda: RampPlan(hold_s=2, max_hold_s=10).check_turn_fits(3.2), "--hold 2s: shorter than a turn"),
    ):
        with pytest.raises(PlanError, match=message.replace("(", r"\(").replace(")", r"\)")):
            bad()


def test_the_segment_that_grew_first_is_the_one_whose_interval_left_zero() -> None:
    def rows(server: list[float], uplink: float) -> list[TurnRow]:
        return [TurnRow(ok=1, server_first_audio_ms=v, uplink_ms=uplink + i % 2) for i, v in enumerate(server)]

    base = rows([100.0 + i for i in range(30)], 1.0)
    assert step_verdict.grown(base, rows([100.0 + i for i in range(30)], 1.0), "same") == []  # nothing moved
    grew = step_verdict.grown(base, rows([180.0 + i for i in range(30)], 1.0), "slow")
    assert len(grew) == 1 and grew[0].startswith("server_first_audio_ms median +80.0 ms [")
    both = step_verdict.grown(base, rows([180.0 + i for i in range(30)], 300.0), "both")
    assert [g.split()[0] for g in both] == ["uplink_ms", "server_first_audio_ms"]  # the largest growth first
