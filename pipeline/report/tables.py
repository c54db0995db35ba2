"""The report's tables, built from the statistics; every column or row says its attribution (M12)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from pipeline.report import cells, cited, compare
from pipeline.report.conditions import Condition, number, title
from pipeline.report.document import Table
from pipeline.report.drift import Drift
from pipeline.report.integrity import RunFacts, temperature_bands, temperatures
from pipeline.report.settings import SettingsCheck

Conditions = dict[str, Condition]
Pair = tuple[str, str]  # (condition, baseline)

MEASURED = "measured"
ESTIMATED = "estimated (derived)"
CITED = "cited"


def _row(
    label: str, labels: Sequence[str], conds: Conditions, cell: Callable[[Condition], str], attr: str
) -> tuple[str, ...]:
    return (label, *(cell(conds[c]) if c in conds else cells.NOT_MEASURED for c in labels), attr)


def _header(first: str, labels: Sequence[str], last: str = "attribution") -> tuple[str, ...]:
    return (first, *(title(c) for c in labels), last)


# --- M23 -----------------------------------------------------------------------------------


def calls_cell(cond: Condition) -> str:
    counts = np.asarray([v for r in cond.ok if (v := number(r.get("llm_calls"))) is not None], dtype=np.float64)
    if len(counts) == 0:
        return cells.not_measured(len(cond.measured))
    return (
        f"mean {counts.mean():.2f} (median {np.median(counts):g}, {counts.min():g}-{counts.max():g}) · "
        f"{cells.count(len(counts), len(cond.measured))}"
    )


def temperature_cell(cond: Condition) -> str:
    found = temperatures(cond)
    if found is None:
        return f"{cells.NOT_MEASURED} (no sensor reading)"
    return f"{found[0]:.1f}-{found[1]:.1f} °C"


def result_table(labels: Sequence[str], conds: Conditions) -> Table:
    rows = (
        _row(
            "first-token median (ms)", labels, conds, lambda c: cells.stat(compare.stat(c, "first_token_ms")), MEASURED
        ),
        _row(
            "first-token P90 (ms)",
            labels,
            conds,
            lambda c: cells.stat(compare.stat(c, "first_token_ms", 0.9)),
            MEASURED,
        ),
        _row("whole-turn median (ms)", labels, conds, lambda c: cells.stat(compare.stat(c, "whole_turn_ms")), MEASURED),
        _row("LLM calls per turn", labels, conds, calls_cell, MEASURED),
        _row("success rate", labels, conds, lambda c: cells.rate(*compare.success(c)), MEASURED),
        _row("temperature range", labels, conds, temperature_cell, MEASURED),
    )
    return Table(
        "result",
        _header("metric", labels),
        rows,
        "Cells: value [95% bootstrap interval, estimated] · turns with a value / measured turns (warm-up excluded).",
    )


# --- M2 ------------------------------------------------------------------------------------

INSIDE = "not measured (the client sees only the sum below)"


def segment_tables(labels: Sequence[str], conds: Conditions) -> tuple[Table, Table]:
    segs = {c: compare.segments(cond) for c, cond in conds.items()}

    def client(pick: Callable[[compare.Segments], compare.Stat]) -> Callable[[Condition], str]:
        return lambda c: cells.stat(pick(segs[c.label]))

    def server(pick: Callable[[compare.Segments], compare.Stat]) -> Callable[[Condition], str]:
        def cell(c: Condition) -> str:
            if not segs[c.label].has_server:
                return f"{cells.NOT_MEASURED} (the server reported no timings)"
            return cells.stat(pick(segs[c.label]))

        return cell

    client_rows = (
        _row("queue", labels, conds, lambda c: INSIDE, "-"),
        _row("network", labels, conds, lambda c: INSIDE, "-"),
        _row("first-token inference", labels, conds, lambda c: INSIDE, "-"),
        _row(
            "first-token wait = queue + network + first-token inference (ms)",
            labels,
            conds,
            client(lambda s: s.client_first_token),
            MEASURED,
        ),
        _row(
            "generation (first token to end of call, ms)",
            labels,
            conds,
            client(lambda s: s.client_generation),
            MEASURED,
        ),
    )
    server_rows = (
        _row("queue (ms)", labels, conds, server(lambda s: s.server_queue), f"{MEASURED} (server-reported)"),
        _row(
            "network = client first-token wait - server queue - server prompt (ms)",
            labels,
            conds,
            server(lambda s: s.network),
            ESTIMATED,
        ),
        _row(
            "first-token inference = prompt processing (ms)",
            labels,
            conds,
            server(lambda s: s.server_prompt),
            f"{MEASURED} (server-reported)",
        ),
        _row("generation (ms)", labels, conds, server(lambda s: s.server_generation), f"{MEASURED} (server-reported)"),
    )
    caption = "Per turn, summed over the turn's LLM calls; median over measured successful turns."
    return (
        Table("segments-client", _header("segment (client view)", labels), client_rows, caption),
        Table("segments-server", _header("segment (server view)", labels), server_rows, caption),
    )


# --- M3 ------------------------------------------------------------------------------------


def _spread_cell(values: np.ndarray, pick: Callable[[compare.Spread], float | None], n_turns: int) -> str:
    s = compare.spread(values)
    return cells.not_measured(n_turns) if s.n == 0 else cells.ms(pick(s))


def _per_turn(cond: Condition, metric: str) -> str:
    v = np.asarray([x for r in cond.ok if (x := number(r.get(metric))) is not None], dtype=np.float64)
    if len(v) == 0:
        return cells.not_measured(len(cond.measured))
    return f"mean {v.mean():.2f} ({v.min():g}-{v.max():g})"


def sentence_table(labels: Sequence[str], conds: Conditions) -> Table:
    def sent(pick: Callable[[compare.Spread], float | None]) -> Callable[[Condition], str]:
        return lambda c: _spread_cell(c.sentence_ms, pick, len(c.measured))

    def call(pick: Callable[[compare.Spread], float | None]) -> Callable[[Condition], str]:
        return lambda c: _spread_cell(c.call_ms, pick, len(c.measured))

    rows = (
        _row("success rate", labels, conds, lambda c: cells.rate(*compare.success(c)), MEASURED),
        _row("sentences (measured successful turns)", labels, conds, lambda c: str(len(c.sentence_ms)), MEASURED),
        _row("per-sentence first token: min (ms)", labels, conds, sent(lambda s: s.minimum), MEASURED),
        _row("per-sentence first token: median (ms)", labels, conds, sent(lambda s: s.median), MEASURED),
        _row("per-sentence first token: P90 (ms)", labels, conds, sent(lambda s: s.p90), MEASURED),
        _row("per-sentence first token: max (ms)", labels, conds, sent(lambda s: s.maximum), MEASURED),
        _row("LLM calls (measured successful turns)", labels, conds, lambda c: str(len(c.call_ms)), MEASURED),
        _row("per-call first token: median (ms)", labels, conds, call(lambda s: s.median), MEASURED),
        _row("per-call first token: P90 (ms)", labels, conds, call(lambda s: s.p90), MEASURED),
        _row("LLM calls per turn", labels, conds, lambda c: _per_turn(c, "llm_calls"), MEASURED),
        _row("sentences per turn", labels, conds, lambda c: _per_turn(c, "sentences"), MEASURED),
    )
    caption = (
        "A sentence's first token is timed from the moment it could start (its call's request, or the previous "
        "sentence of the same call completing)."
    )
    return Table("sentences", _header("figure", labels), rows, caption)


def amplification_table(pairs: Sequence[Pair], conds: Conditions) -> Table:
    rows = []
    for x, base in pairs:
        a = compare.amplification(conds[x], conds[base])
        rows.append(
            (
                f"{x} - {base}",
                cells.diff(a.per_call),
                "-" if a.calls_per_turn is None else f"{a.calls_per_turn:.2f}",
                cells.signed(a.product),
                cells.diff(a.turn_first_token_sum),
                cells.diff(a.whole_turn),
            )
        )
    headers = (
        "comparison",
        "per-call first-token difference, median (measured)",
        "LLM calls per turn, mean of both (measured)",
        "difference x calls per turn (estimated)",
        "per-turn first-token wait difference, median (measured)",
        "whole-turn difference, median (measured)",
    )
    caption = (
        "A per-call difference is paid once per call (M3): the product estimates what it does to a turn; "
        "the measured per-turn differences beside it show what it did. Intervals: 95% bootstrap (estimated)."
    )
    return Table("amplification", headers, tuple(rows), caption)


def _turns(cond: Condition, metric: str) -> str:
    return cells.count(len(cond.values(metric)), len(cond.measured))


def dilution_table(pairs: Sequence[Pair], conds: Conditions) -> Table:
    rows = []
    for x, base in pairs:
        for metric, label, d in compare.dilution(conds[x], conds[base]):
            rows.append(
                (
                    f"{x} - {base}",
                    label,
                    cells.ms(d.base),
                    cells.ms(None if d.value is None or d.base is None else d.base + d.value),
                    cells.diff(d),
                    cells.percent(d.percent),
                    f"{_turns(conds[base], metric)}; {_turns(conds[x], metric)}",
                )
            )
    headers = (
        "comparison",
        "segment",
        "baseline median (ms, measured)",
        "median (ms, measured)",
        "change (ms, measured) [95% interval, estimated]",
        "change (%)",
        "turns (baseline; condition)",
    )
    caption = "Changes are differences of the medians; % of the baseline median; intervals: 95% bootstrap."
    return Table("dilution", headers, tuple(rows), caption)


# --- uncertainty ---------------------------------------------------------------------------

UNCERTAINTY_METRICS = (
    ("first_token_ms", "first token"),
    ("whole_turn_ms", "whole turn"),
    ("total_ms", "LLM segment"),
)


def uncertainty_table(labels: Sequence[str], conds: Conditions) -> Table:
    rows = []
    for c in labels:
        if c not in conds:
            continue
        for metric, name in UNCERTAINTY_METRICS:
            for q, qname in ((0.5, "median"), (0.9, "P90")):
                s = compare.stat(conds[c], metric, q)
                value = cells.ms(s.value) if s.value is not None else cells.not_measured(s.turns)
                ci = cells.interval(s.interval) if s.value is not None else "-"
                rows.append((title(c), f"{name} {qname}", value, ci, cells.count(s.n, s.turns)))
    headers = ("condition", "figure (ms)", "value (measured)", "95% interval (estimated)", "turns")
    return Table("uncertainty", headers, tuple(rows), "Percentile bootstrap over turns, 4000 resamples, fixed seed.")


def _verdict(d: compare.Diff) -> str:
    if d.value is None:
        return cells.NOT_MEASURED
    if d.interval is None:
        return "unknown (fewer than 2 values)"
    return "yes (interval excludes 0)" if d.real else "no (interval includes 0)"


def _paired_cell(x: Condition, base: Condition, metric: str, q: float) -> str:
    if q != 0.5:
        return "-"
    p = compare.paired(x, base, metric)
    if p.value is None:
        return "-"
    return f"{cells.signed(p.value)} {cells.interval(p.interval, sign=True)} ({p.n} pairs)"


def differences_table(pairs: Sequence[Pair], conds: Conditions) -> Table:
    rows = []
    for x, base in pairs:
        for metric, name in UNCERTAINTY_METRICS:
            for q, qname in ((0.5, "median"), (0.9, "P90")):
                d = compare.diff(conds[x], conds[base], metric, q)
                paired = _paired_cell(conds[x], conds[base], metric, q)
                figure = f"{name} {qname}"
                rows.append(
                    (
                        f"{x} - {base}",
                        figure,
                        cells.signed(d.value),
                        cells.interval(d.interval, True),
                        _verdict(d),
                        paired,
                    )
                )
    headers = (
        "comparison",
        "figure",
        "difference (measured)",
        "95% interval (estimated)",
        "real difference?",
        "paired: median of same-question differences [95% interval] (estimated)",
    )
    caption = (
        "The difference of the two conditions' figures resamples both conditions independently; the outcomes and "
        "the conclusion use it. The paired column matches turns by question and round (the same questions in the "
        "same order, M5), which removes the spread between questions: a second view, not used for the readings."
    )
    return Table("differences", headers, tuple(rows), caption)


# --- integrity -----------------------------------------------------------------------------


def runs_table(facts: Sequence[RunFacts]) -> Table:
    rows = []
    for f in facts:
        expected = "unknown" if f.expected is None else str(f.expected)
        if f.expected is not None and f.expected != f.turns:
            expected = f"{cells.PARTIAL} {f.expected} (found {f.turns})"
        rows.append(
            (
                f.run_id,
                title(f.condition),
                ", ".join(f.config_ids),
                f.clock or "-",
                f.scripted or "none",
                str(f.turns),
                expected,
                str(f.warmup),
                str(f.measured),
                cells.rate(f.ok, f.measured),
                ", ".join(f"{e}: {n}" for e, n in f.errors) or "-",
                f"{f.rounds} x {f.questions}",
            )
        )
    headers = (
        "run",
        "condition",
        "config_id",
        "clock",
        "scripted stages",
        "turns",
        "turns expected",
        "warm-up (excluded)",
        "measured",
        "success",
        "failures (error class: turns)",
        "rounds x questions",
    )
    return Table(
        "runs", headers, tuple(rows), "Every turn found in the traces; warm-up rows are in bench.csv (warmup=1)."
    )


def warmup_table(facts: Sequence[RunFacts]) -> Table:
    rows = []
    for f in facts:
        remark = "-"
        if f.warmup_first_token and f.measured_first_token and f.warmup_first_token > 1.5 * f.measured_first_token:
            remark = "warm-up much slower (model load, connection set-up): rightly excluded"
        rows.append((f.run_id, str(f.warmup), cells.ms(f.warmup_first_token), cells.ms(f.measured_first_token), remark))
    headers = (
        "run",
        "warm-up turns (shown, excluded)",
        "warm-up first-token median (ms, measured)",
        "measured-turn first-token median (ms, measured)",
        "remark",
    )
    return Table("warmup", headers, tuple(rows), "Round 1 of every run is the warm-up (M6).")


def settings_table(check: SettingsCheck) -> Table:
    rows = []
    for d in check.differences:
        values = "; ".join(f"{run}: {value}" for run, value in d.values)
        verdict = "may differ (defines the condition)" if d.allowed else "must not differ: blocks the comparison"
        rows.append((d.setting, values, verdict))
    return Table(
        "settings", ("setting", "value per run", "verdict (M11)"), tuple(rows), "Rounds and limit are ignored."
    )


def temperature_table(labels: Sequence[str], conds: Conditions) -> Table:
    rows = []
    for c in labels:
        if c not in conds:
            rows.append((title(c), cells.NOT_MEASURED, "-"))
            continue
        bands = temperature_bands(conds[c])
        by_band = "; ".join(f"{b:.0f}-{b + 5:.0f} °C: {cells.ms(m)} ms ({n} turns)" for b, m, n in bands) or "-"
        rows.append((title(c), temperature_cell(conds[c]), by_band))
    headers = ("condition", "temperature range (measured)", "whole-turn median per 5 °C band (measured)")
    return Table("temperature", headers, tuple(rows), "temp_c is the hottest thermal zone; empty where none exists.")


def drift_table(drifts: Sequence[Drift]) -> Table:
    rows = []
    for d in drifts:
        if d.why_not:
            rows.append((d.run_id, d.metric, str(d.n), "-", "-", f"not checked: {d.why_not}"))
            continue
        verdict = f"{cells.PARTIAL} DRIFTING UPWARD" if d.flagged else "no upward drift"
        rho = "-" if d.rho is None else f"{d.rho:+.2f}"
        rise = "-" if d.rise is None else f"{100 * d.rise:+.1f}%"
        rows.append((d.run_id, d.metric, str(d.n), rho, rise, verdict))
    headers = (
        "run",
        "metric",
        "turns",
        "Spearman rho vs run order (estimated)",
        "second half vs first half (estimated)",
        "verdict",
    )
    return Table("drift", headers, tuple(rows), "Latencies relative to the same question's median in the run.")


def cited_table() -> Table:
    rows = tuple((stage, typical, CITED) for stage, typical in cited.BREAKDOWN)
    return Table("cited", ("stage", "typical (cited)", "attribution"), rows, cited.CONFIGURATION)
