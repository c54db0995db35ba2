"""Section 6, integrity: runs, failures and warm-up (M6, M7), config identity (M11), temperature and
drift (M9, M20), and what could not be read."""

from __future__ import annotations

from collections.abc import Sequence

from pipeline.report import cells
from pipeline.report.conditions import title
from pipeline.report.document import NOTE, WARNING, Block, Bullets, Heading, Paragraph, Table
from pipeline.report.drift import Drift
from pipeline.report.identity import SettingsCheck
from pipeline.report.runs import (
    BUSY_SHARE,
    RunLoad,
    RunSummary,
    duplicate_turns,
    run_loads,
    temperature_bands,
    temperatures,
)
from pipeline.report.sections.base import Conditions, Context
from pipeline.report.sections.result import temperature_cell

MAX_PROBLEMS = 20
SLOW_WARMUP = 1.5  # a warm-up median this many times the measured median gets a remark


def runs_table(facts: Sequence[RunSummary]) -> Table:
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


def warmup_table(facts: Sequence[RunSummary]) -> Table:
    rows = []
    for f in facts:
        remark = "-"
        if (
            f.warmup_first_token
            and f.measured_first_token
            and f.warmup_first_token > SLOW_WARMUP * f.measured_first_token
        ):
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


def section(ctx: Context) -> list[Block]:
    out: list[Block] = [Heading(2, "6. Integrity"), Heading(3, "Runs, failures and warm-up (M6, M7)")]
    out.append(runs_table(ctx.run_summaries))
    for f in ctx.run_summaries:
        if f.expected is not None and f.expected != f.turns:
            ctx.incomplete.append(f"run {f.run_id}: {f.turns} of {f.expected} expected turns found")
            out.append(
                Paragraph(
                    f"Run {f.run_id}: its settings ask for {f.expected} turns, the traces hold {f.turns} "
                    "(a run stopped early, or unreadable trace lines): its figures cover what was found.",
                    WARNING,
                )
            )
    out.extend(_duplicates(ctx))
    out.append(warmup_table(ctx.run_summaries))
    out.extend(_settings_blocks(ctx))
    out.extend(_machine_load(ctx))
    out.append(Heading(3, "Temperature and drift (M9, M20)"))
    out.append(temperature_table(ctx.labels, ctx.conds))
    if not any(temperatures(c) for c in ctx.conds.values()):
        out.append(Paragraph("No temperature sensor reading in any turn (temp_c empty): never invented (M9).", NOTE))
    out.append(drift_table(ctx.drifts))
    for d in ctx.drifts:
        if d.flagged:
            out.append(
                Paragraph(
                    f"Run {d.run_id} drifts upward in {d.metric}: rho {d.rho:+.2f}, second half "
                    f"{100 * (d.rise or 0):+.1f}% slower than the first (M20). Check temperature and background "
                    "load; its medians mix a cool and a hot device.",
                    WARNING,
                )
            )
    out.extend(_problems(ctx))
    return out


def load_table(loads: Sequence[RunLoad]) -> Table:
    rows = []
    for x in loads:
        share = "-" if x.median_share is None else f"{x.median_share:.3f} (max {x.max_share:.3f})"
        load = "-" if x.max_load_avg is None else f"{x.max_load_avg:.2f}"
        busy = f"{x.busy} of {x.turns}" if x.turns else "no reading"
        rows.append((x.run_id, busy, share, load))
    headers = (
        "run",
        f"turns on a busy machine (others >= {BUSY_SHARE:g} core)",
        "cores other processes kept busy, median (measured)",
        "load average (1 min), highest",
    )
    return Table(
        "load", headers, tuple(rows), "From /proc: the machine's CPU time during each turn minus this run's own."
    )


def _machine_load(ctx: Context) -> list[Block]:
    loads = run_loads(ctx.data.rows)
    out: list[Block] = [Heading(3, "Other load on the machine (M9)"), load_table(loads)]
    for x in loads:
        if x.busy:
            out.append(
                Paragraph(
                    f"Run {x.run_id}: {x.busy} of {x.turns} measured turns ran while other processes kept at least "
                    f"{BUSY_SHARE:g} of a core busy: their latencies include that contention (llama.cpp with "
                    "threads = cores slows several-fold beside other work). Re-run on a quiet machine (no builds, "
                    "tests or other benchmarks running), or compare only runs without busy turns.",
                    WARNING,
                )
            )
    return out


def _duplicates(ctx: Context) -> list[Block]:
    found = duplicate_turns(ctx.data.rows)
    if not found:
        return []
    ctx.incomplete.append(f"{len(found)} turn(s) recorded more than once")
    listed = tuple(f"run {run}, {question}, round {rnd}: {n} rows" for run, question, rnd, n in found[:MAX_PROBLEMS])
    more = (f"... and {len(found) - MAX_PROBLEMS} more",) if len(found) > MAX_PROBLEMS else ()
    return [
        Paragraph(
            "INTEGRITY FAILURE: the same (run, question, round) appears more than once: two runs were written under "
            "one run id, so their turns are mixed in every figure of that run. Re-run into a fresh folder or with a "
            "fresh --run-id / --name.",
            WARNING,
        ),
        Bullets((*listed, *more), WARNING),
    ]


def _settings_blocks(ctx: Context) -> list[Block]:
    out: list[Block] = [Heading(3, "Config identity (M11)")]
    if ctx.check.differences:
        out.append(settings_table(ctx.check))
    ids = sorted({cid for f in ctx.run_summaries for cid in f.config_ids})
    if ctx.check.comparable and len(ids) <= 1:
        out.append(Paragraph(f"One configuration ({', '.join(ids) or 'none'}): nothing to check."))
    elif ctx.check.comparable:
        out.append(Paragraph(f"Comparable: the {len(ids)} config_ids differ only in what defines the condition."))
    else:
        ctx.incomplete.append("comparison refused (M11)")
        out.append(Paragraph("Comparison refused (M11):", WARNING))
        out.append(Bullets(ctx.check.reasons, WARNING))
    if ctx.check.warnings:
        out.append(Bullets(ctx.check.warnings, WARNING))
    return out


def _problems(ctx: Context) -> list[Block]:
    out: list[Block] = []
    problems = ctx.data.problems
    if problems:
        ctx.incomplete.append(f"{len(problems)} read problem(s)")
        shown = problems[:MAX_PROBLEMS]
        more = [f"... and {len(problems) - MAX_PROBLEMS} more"] if len(problems) > MAX_PROBLEMS else []
        out.append(Heading(3, "What could not be read"))
        out.append(
            Paragraph("These lines or spans were left out; everything else was computed from what was read:", WARNING)
        )
        out.append(Bullets((*shown, *more), WARNING))
    if ctx.data.notes:
        out.append(Bullets(tuple(ctx.data.notes), NOTE))
    return out
