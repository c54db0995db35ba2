"""Section 5, outcomes (M16), the offline check (M13), the conclusion (M22) and the boundaries (M21), the
concurrency boundary with its figures when a centralised-against-distributed measurement is among the inputs.

The outcome rules (B or B' against A, on the first-token median; documented in the report):

1. *less reliable*: its success rate is more than ``RELIABILITY_POINTS`` percentage points
   below A's. Checked first: speed is not compared before stability (M16).
2. *faster*: the 95 % interval of (median - A's median) lies entirely below zero.
3. *clearly slower*: the difference is above ``CLEARLY_SLOWER`` (10 %) of A's median and its
   interval lies entirely above zero.
4. *slightly slower*: everything else, i.e. slower by at most 10 %, or a difference the
   interval cannot tell from zero (not shown faster counts as not faster).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pipeline.report.compare import diff, success, success_percent
from pipeline.report.conditions import Condition
from pipeline.report.document import NOTE, WARNING, Block, Bullets, Heading, Paragraph, Table
from pipeline.report.sections import centralised
from pipeline.report.sections.base import Conditions, Context, Pair
from pipeline.report.sections.conclusion import boundaries, conclusion

RELIABILITY_POINTS = 5.0
CLEARLY_SLOWER = 0.10

LESS_RELIABLE = "less reliable"
FASTER = "faster"
CLEARLY = "clearly slower"
SLIGHTLY = "slightly slower"
NOT_READ = "not read"

ADVICE = {
    FASTER: "record it as the recommended configuration",
    SLIGHTLY: "tune in the knob order (M18): model size first, then context length (history rounds), "
    "quantisation with care, system parameters (threads, scheduling, pinning) last",
    CLEARLY: "shorten the context first, then try a smaller model (each step with a quality check)",
    LESS_RELIABLE: "fix stability before comparing speed",
    NOT_READ: "",
}


OUTCOME_RULES = (
    f"less reliable = success rate more than {RELIABILITY_POINTS:g} percentage points below A's "
    "(checked first); faster = the 95% interval of the first-token median difference lies below zero; "
    f"clearly slower = more than {100 * CLEARLY_SLOWER:.0f}% slower with the interval above zero; "
    f"slightly slower = anything else (at most {100 * CLEARLY_SLOWER:.0f}% slower, or not shown faster)."
)


@dataclass(frozen=True, slots=True)
class Outcome:
    """How a comparison reads (one of the outcome kinds) and why."""

    kind: str
    reason: str

    @property
    def advice(self) -> str:
        return ADVICE[self.kind]


def outcome(x: Condition, base: Condition) -> Outcome:
    x_rate, base_rate = success_percent(x), success_percent(base)
    if x_rate is None or base_rate is None:
        missing = x.label if x_rate is None else base.label
        return Outcome(NOT_READ, f"{missing} has no measured turns")
    if x_rate < base_rate - RELIABILITY_POINTS:
        return Outcome(
            LESS_RELIABLE,
            f"success {x_rate:.1f}% against {base_rate:.1f}% "
            f"(more than {RELIABILITY_POINTS:g} percentage points lower)",
        )
    d = diff(x, base, "first_token_ms")
    if d.value is None or d.base is None:
        return Outcome(NOT_READ, "first-token median not measured in both conditions")
    rel = d.value / d.base if d.base else 0.0
    ci = d.interval
    where = f"median difference {d.value:+.1f} ms ({100 * rel:+.1f}%)" + (
        f", 95% interval [{ci.low:+.1f}, {ci.high:+.1f}] ms" if ci else ", no interval (fewer than 2 turns)"
    )
    if ci is not None and ci.high < 0:
        return Outcome(FASTER, f"{where}: entirely below zero")
    if ci is not None and ci.low > 0 and rel > CLEARLY_SLOWER:
        return Outcome(CLEARLY, f"{where}: above zero and more than {100 * CLEARLY_SLOWER:.0f}% slower")
    if d.value > 0:
        return Outcome(SLIGHTLY, f"{where}: slower by at most {100 * CLEARLY_SLOWER:.0f}% or not clearly slower")
    return Outcome(SLIGHTLY, f"{where}: not shown faster (the interval includes zero)")


def outcome_table(pairs: Sequence[Pair], conds: Conditions) -> Table:
    rows = []
    for x, base in pairs:
        o = outcome(conds[x], conds[base])
        rows.append((f"{x} vs {base}", o.kind, o.reason, o.advice or "-"))
    headers = ("comparison", "outcome (M16)", "evidence", "what to do")
    return Table("outcomes", headers, tuple(rows), OUTCOME_RULES)


def _components(cond: Condition) -> str:
    counts: dict[str, int] = {}
    for stages in cond.failed_stages:
        for stage in stages or ("(no stage span marked failed)",):
            counts[stage] = counts.get(stage, 0) + 1
    return ", ".join(f"{stage} ({n} turn(s))" for stage, n in counts.items()) or "none recorded"


def _errors(cond: Condition) -> str:
    counts: dict[str, int] = {}
    for r in cond.measured:
        if not r.ok:
            key = str(r.error or "unknown")
            counts[key] = counts.get(key, 0) + 1
    return ", ".join(f"{e} ({n})" for e, n in sorted(counts.items()))


def offline_reading(conds: Conditions) -> str:
    """M13: does the chain run with the network cut?"""
    if "B'" not in conds or not conds["B'"].measured:
        return "B' (offline) was not measured: that the chain runs fully offline is not shown (M13)."
    off = conds["B'"]
    ok, n = success(off)
    if "B" not in conds or not conds["B"].measured:
        return f"B' (offline) succeeded in {ok}/{n} turns; B (local) was not measured, so the two cannot be compared."
    on_ok, on_n = success(conds["B"])
    off_rate, on_rate = success_percent(off), success_percent(conds["B"])
    if off_rate is not None and on_rate is not None and off_rate < on_rate:
        return (
            f"B works ({on_ok}/{on_n}) and B' fails ({ok}/{n} succeeded): the chain is NOT fully local (M13). "
            f"Failed turns: {_errors(off)}; failed component(s): {_components(off)}."
        )
    return f"B' (offline) succeeded in {ok}/{n} turns, B in {on_ok}/{on_n}: no hidden network dependency showed up."


def section(ctx: Context) -> list[Block]:
    out: list[Block] = [Heading(2, "5. Outcomes, conclusion and boundaries (M16, M22, M21)")]
    if ctx.check.comparable:
        against_a = [(x, b) for x, b in ctx.pairs if b == "A"]
        if against_a:
            out.append(outcome_table(against_a, ctx.conds))
        else:
            out.append(Paragraph("The four outcomes read B against A; A (cloud) was not measured.", NOTE))
        out.append(Paragraph(offline_reading(ctx.conds)))
        if ctx.data.offline_verdicts:
            out.append(Bullets(tuple(f"B' network check: {v}" for v in ctx.data.offline_verdicts)))
        out.append(Heading(3, "Conclusion"))
        if ctx.pairs:
            for x, b in ctx.pairs:
                simulated = any(f.condition in (x, b) for f in ctx.simulated)  # this pair's runs only
                out.append(Paragraph(conclusion(ctx.conds[x], ctx.conds[b], simulated)))
        else:
            out.append(Paragraph(ctx.no_pairs("A conclusion"), NOTE))
    else:
        out.append(Paragraph("No conclusion: the comparison was refused (M11), see Integrity.", WARNING))
    out.append(Heading(3, "Boundaries (M21)"))
    found = centralised.read(ctx.data.files)
    out.append(Bullets(boundaries(ctx.conds, centralised.boundary(found))))
    out.extend(centralised.blocks(found))
    return out
