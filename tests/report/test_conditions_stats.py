"""The report's pure statistics on made-up rows: bootstrap, drift rule, outcome rules, config identity."""

from __future__ import annotations

import json
from collections.abc import Mapping

import msgspec
import numpy as np
import pytest

from pipeline.analysis import bootstrap
from pipeline.analysis.numbers import quantile
from pipeline.analysis.stats import ranks, spearman
from pipeline.records.turn_row import TurnRow
from pipeline.report import compare, drift, identity
from pipeline.report.conditions import Condition, group, per_call
from pipeline.report.load import Dataset, RunInfo
from pipeline.report.sections import amplification, outcomes


def row(condition: str, q: str, rnd: int, ok: int = 1, **values: float | str | None) -> TurnRow:
    out = TurnRow(
        run_id=f"run-{condition}",
        condition=condition,
        config_id=f"cfg-{condition}",
        question_id=q,
        round=rnd,
        warmup=int(rnd == 1),
        ok=ok,
        error="" if ok else "timeout",
        llm_calls=2,
        llm_first_token_ms_per_call="",
        turn_start_ns=rnd * 1_000_000 + int(q[1:]),
    )
    return msgspec.structs.replace(out, **values)


def conditions(rows: list[TurnRow]) -> dict[str, Condition]:
    return group(Dataset.of_rows(rows, "test"))


def timed(condition: str, first_tokens: list[float], ok: list[int] | None = None) -> list[TurnRow]:
    """One warm-up turn, then one measured turn per first-token value (questions q0, q1, ...)."""
    oks = ok or [1] * len(first_tokens)
    rows = [row(condition, "q0", 1, first_token_ms=999.0, whole_turn_ms=9999.0)]
    for i, (ft, good) in enumerate(zip(first_tokens, oks, strict=True)):
        rows.append(
            row(
                condition,
                f"q{i}",
                2,
                good,
                first_token_ms=ft if good else None,
                whole_turn_ms=4000 + ft if good else None,
            )
        )
    return rows


# --- bootstrap -----------------------------------------------------------------------------


def test_the_one_quantile_takes_sorted_arrays_and_unsorted_lists_alike() -> None:
    values = [3.0, 1.0, 10.0, 4.0, 2.0, 7.5]
    for q in (0.0, 0.5, 0.9, 1.0):
        assert quantile(np.sort(np.asarray(values)), q) == quantile(values, q)


@pytest.mark.parametrize(("n", "q"), [(2, 0.5), (5, 0.5), (6, 0.9), (9, 0.5), (40, 0.9)])
def test_order_statistic_bootstrap_matches_resampling_the_turns(n: int, q: float) -> None:
    x = np.sort(np.random.default_rng(n).lognormal(5, 0.5, n))
    fast = bootstrap.resampled_quantiles(x, q, np.random.default_rng(1), 100_000)
    brute = np.quantile(x[np.random.default_rng(2).integers(0, n, (100_000, n))], q, axis=1)
    assert fast.mean() == pytest.approx(brute.mean(), rel=2e-3)
    assert fast.std() == pytest.approx(brute.std(), rel=3e-2)
    for p in (0.1, 0.5, 0.9):  # away from the atoms' edges, where both are well defined
        assert float(np.quantile(fast, p)) == pytest.approx(float(np.quantile(brute, p)), rel=2e-2)


def test_intervals_are_reproducible_and_independent_of_other_figures() -> None:
    x = np.sort(np.asarray([5.0, 7.0, 6.0, 9.0, 12.0, 8.0]))
    first = bootstrap.quantile_interval(x, 0.5, "B|first_token_ms")
    bootstrap.quantile_interval(x, 0.9, "A|whole_turn_ms")  # another figure in between
    assert bootstrap.quantile_interval(x, 0.5, "B|first_token_ms") == first
    assert first is not None and first.low <= 7.5 <= first.high
    assert bootstrap.quantile_interval(x[:1], 0.5, "one value") is None


def test_a_clear_difference_has_an_interval_away_from_zero() -> None:
    fast = np.sort(np.linspace(300, 320, 12))
    slow = np.sort(np.linspace(500, 560, 12))
    ci = bootstrap.difference_interval(fast, "B|m", slow, "A|m", 0.5)
    assert ci is not None and ci.high < 0 and ci.excludes_zero()
    same = bootstrap.difference_interval(fast, "B|m", fast, "A|m", 0.5)
    assert same is not None and not same.excludes_zero()


# --- drift ---------------------------------------------------------------------------------


def test_ranks_average_ties_and_spearman_reads_monotone_trends() -> None:
    assert ranks(np.asarray([10.0, 20.0, 10.0, 30.0])).tolist() == [1.5, 3.0, 1.5, 4.0]
    x = np.arange(8, dtype=np.float64)
    assert spearman(x, x**2) == pytest.approx(1.0)
    assert spearman(x, -x) == pytest.approx(-1.0)
    assert spearman(x, np.ones(8)) is None


def test_ranks_and_spearman_are_scipys_on_random_ties() -> None:
    from scipy import stats  # the reference the numpy computation is held to (a dev dependency)

    rng = np.random.default_rng(12)
    for n in (2, 3, 7, 50, 1000):
        x = rng.integers(0, max(2, n // 3), n).astype(np.float64)  # many ties
        y = rng.normal(size=n).round(1)
        assert ranks(x).tolist() == stats.rankdata(x, method="average").tolist()
        found = spearman(np.arange(n, dtype=np.float64), y)
        assert found == pytest.approx(stats.spearmanr(np.arange(n), y).statistic, abs=1e-12)
    assert ranks(np.asarray([], dtype=np.float64)).tolist() == []
    with_nan = np.asarray([1.0, np.nan, 3.0, 2.0])
    assert np.isnan(stats.spearmanr(np.arange(4), with_nan).statistic)
    found = spearman(np.arange(4, dtype=np.float64), with_nan)
    assert found is not None and np.isnan(found)


def _run(values_by_round: list[list[float]]) -> list[TurnRow]:
    rows = []
    for rnd, values in enumerate(values_by_round, start=1):
        for i, v in enumerate(values):
            rows.append(row("B", f"q{i}", rnd, whole_turn_ms=v, first_token_ms=v / 10))
    return rows


def test_a_run_getting_slower_is_flagged_and_longer_questions_are_not_drift() -> None:
    questions = [3000.0, 5000.0, 4000.0]  # question length, the same every round
    steady = _run([[q + j for j, q in enumerate(questions)] for _ in range(4)])
    drifting = _run([[q * (1 + 0.04 * (3 * r + i)) for i, q in enumerate(questions)] for r in range(4)])
    assert not any(d.flagged for d in drift.check_runs(steady))
    flagged = drift.check_runs(drifting)
    assert [(d.metric, d.flagged) for d in flagged] == [("whole_turn_ms", True), ("first_token_ms", True)]
    assert flagged[0].rho is not None and flagged[0].rho > 0.9
    assert flagged[0].rise is not None and flagged[0].rise > 0.05


def test_drift_is_not_checked_without_two_measured_rounds_or_six_turns() -> None:
    one_round = drift.check("r", _run([[1.0] * 8, [1.0] * 8]), "whole_turn_ms")
    assert one_round.why_not == "needs 2 measured rounds, has 1"
    few = drift.check("r", _run([[1.0, 2.0], [1.0, 2.0], [1.0, 2.0]]), "whole_turn_ms")
    assert few.why_not == "needs 6 successful turns, has 4"


# --- outcomes (M16) ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("b_first_tokens", "b_ok", "expected"),
    [
        ([300.0 + i for i in range(10)], None, outcomes.FASTER),
        ([505.0 + i for i in range(10)], None, outcomes.SLIGHTLY),  # +1%
        ([498.0 + 2 * i for i in range(10)], None, outcomes.SLIGHTLY),  # cannot be told from A
        ([650.0 + i for i in range(10)], None, outcomes.CLEARLY),  # +30%
        ([300.0 + i for i in range(10)], [1] * 8 + [0] * 2, outcomes.LESS_RELIABLE),  # fast but 80% success
    ],
)
def test_the_four_outcomes(b_first_tokens: list[float], b_ok: list[int] | None, expected: str) -> None:
    a = [500.0 + i for i in range(10)]
    conds = conditions(timed("A", a) + timed("B", b_first_tokens, b_ok))
    result = outcomes.outcome(conds["B"], conds["A"])
    assert result.kind == expected, result.reason
    assert result.advice


def test_outcome_is_not_read_without_measured_turns() -> None:
    conds = conditions([row("A", "q0", 1, first_token_ms=1.0), *timed("B", [300.0, 310.0])])
    assert outcomes.outcome(conds["B"], conds["A"]).kind == outcomes.NOT_READ


def test_amplification_multiplies_the_per_call_difference_by_calls_per_turn() -> None:
    rows = [
        msgspec.structs.replace(r, llm_first_token_ms_per_call=f"{per:g};{per:g};{per:g}", llm_calls=3)
        for r in timed("A", [500.0] * 4) + timed("B", [400.0] * 4)
        for per in [500.0 if r.condition == "A" else 400.0]
    ]
    conds = conditions(rows)
    amp = amplification.amplification(conds["B"], conds["A"])
    assert (amp.per_call.value, amp.calls_per_turn, amp.product) == (-100.0, 3.0, -300.0)
    assert amp.turn_first_token_sum.value == -300.0


# --- config identity (M11) -----------------------------------------------------------------


def info(run_id: str, condition: str, config: Mapping[str, object] | None) -> RunInfo:
    text = None if config is None else json.dumps(config)
    return RunInfo(run_id, condition, (f"id-{run_id}",), text, 0 if config is None else 1)


BASE = {"run": {"condition": "A", "rounds": 3, "clock": "real"}, "llm": {"model": "big", "max_tokens": 96}}


def test_settings_that_define_the_condition_may_differ() -> None:
    b = {"run": {"condition": "B", "rounds": 5, "clock": "real"}, "llm": {"model": "small", "max_tokens": 96}}
    check = identity.check([info("a", "A", BASE), info("b", "B", b)], [])
    assert check.comparable, check.reasons
    assert [(d.setting, d.allowed) for d in check.differences] == [("llm.model", True), ("run.condition", True)]


def test_other_settings_block_the_comparison_and_are_named() -> None:
    b = {"run": {"condition": "B", "rounds": 3, "clock": "virtual"}, "llm": {"model": "small", "max_tokens": 64}}
    check = identity.check([info("a", "A", BASE), info("b", "B", b)], [])
    assert not check.comparable
    assert check.reasons == ("settings other than the condition differ: llm.max_tokens, run.clock",)
    blocking = {d.setting: d.values for d in check.differences if not d.allowed}
    assert blocking == {
        "llm.max_tokens": (("a", "96"), ("b", "64")),
        "run.clock": (("a", '"real"'), ("b", '"virtual"')),
    }


def test_runs_of_one_condition_must_agree_even_on_the_backend() -> None:
    other = {**BASE, "llm": {"model": "other", "max_tokens": 96}}
    check = identity.check([info("a1", "A", BASE), info("a2", "A", other)], [])
    assert not check.comparable
    assert check.reasons == ("settings other than the condition differ: llm.model",)


def test_unrecorded_settings_cannot_be_compared() -> None:
    check = identity.check([info("a", "A", BASE), info("old", "B", None)], [])
    assert not check.comparable
    assert "run old does not record its settings" in check.reasons[0]


@pytest.mark.parametrize(
    ("text", "calls"),
    [
        ("", []),
        (None, []),
        ("150", [150.0]),
        ("150;2.5;1e+06", [150.0, 2.5, 1e6]),
        (";2.5", [None, 2.5]),
        ("150;", [150.0, None]),
        ("1;;3", [1.0, None, 3.0]),
    ],
)
def test_a_rows_per_call_first_tokens_are_read_with_a_gap_for_a_call_without_one(
    text: str | None, calls: list[float | None]
) -> None:
    assert per_call(TurnRow(llm_first_token_ms_per_call=text or "")) == calls


def test_paired_differences_match_turns_by_question_and_round_and_leave_out_missing_values() -> None:
    a = [row("A", f"q{i}", 2, first_token_ms=v) for i, v in enumerate([100.0, 200.0, None, 400.0, 500.0])]
    b = [row("B", f"q{i}", 2, first_token_ms=v) for i, v in enumerate([10.0, 20.0, 30.0, None, 50.0])]
    b += [row("B", "q4", 2, first_token_ms=5.0), row("B", "q9", 2, first_token_ms=1.0)]  # q4 twice in B
    conds = conditions(a + b)
    # q0: -90, q1: -180, q2 and q3: a value missing on one side, q4: B's -450 and -495, q9: only in B
    got = compare.paired(conds["B"], conds["A"], "first_token_ms")
    assert (got.value, got.n, got.turns) == (-315.0, 4, 7)
    # the other way round each of A's turns is paired once, with the last of B's turns of its key
    back = compare.paired(conds["A"], conds["B"], "first_token_ms")
    assert (back.value, back.n) == (180.0, 3)
    assert compare.paired(conds["B"], conds["A"], "first_token_ms") == got  # the pairing cached, the answer the same
