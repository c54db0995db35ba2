"""Section 3, per-sentence first tokens and amplification (M3): a per-call difference is paid per call."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from pipeline.analysis.numbers import quantile
from pipeline.report import cells, compare
from pipeline.report.compare import Diff, diff, diff_of
from pipeline.report.conditions import Condition
from pipeline.report.document import NOTE, Block, Heading, Paragraph, Table
from pipeline.report.sections.base import MEASURED, Conditions, Context, Pair, header, row


@dataclass(frozen=True, slots=True)
class Spread:
    """A set of values summarised: count, least, median, P90, greatest, mean."""

    n: int
    minimum: float | None
    median: float | None
    p90: float | None
    maximum: float | None
    mean: float | None


def spread(sorted_values: np.ndarray) -> Spread:
    if len(sorted_values) == 0:
        return Spread(0, None, None, None, None, None)
    return Spread(
        len(sorted_values),
        float(sorted_values[0]),
        quantile(sorted_values, 0.5),
        quantile(sorted_values, 0.9),
        float(sorted_values[-1]),
        float(np.mean(sorted_values)),
    )


@dataclass(frozen=True, slots=True)
class Amplification:
    """How a per-call first-token difference adds up over a turn's calls, estimated and measured."""

    per_call: Diff  # median per-call first token, x - base
    calls_per_turn: float | None  # mean LLM calls per turn over both conditions' measured ok turns
    product: float | None  # estimated: per-call difference x calls per turn
    turn_first_token_sum: Diff  # measured: median per-turn sum of first-token waits, x - base
    whole_turn: Diff  # measured: median whole turn, x - base


def _calls(conds: Sequence[Condition]) -> float | None:
    counts = np.concatenate([c.column("llm_calls") for c in conds])
    counts = counts[~np.isnan(counts)]  # NaN: no count
    return float(np.mean(counts)) if len(counts) else None


def amplification(x: Condition, base: Condition) -> Amplification:
    per = diff_of(x.call_ms, f"{x.label}|call_first_token", base.call_ms, f"{base.label}|call_first_token", 0.5)
    calls = _calls([x, base])
    return Amplification(
        per_call=per,
        calls_per_turn=calls,
        product=per.value * calls if per.value is not None and calls is not None else None,
        turn_first_token_sum=diff_of(
            x.turn_sums(),
            f"{x.label}|turn_first_token_sum",
            base.turn_sums(),
            f"{base.label}|turn_first_token_sum",
            0.5,
        ),
        whole_turn=diff(x, base, "whole_turn_ms"),
    )


def _spread_cell(values: np.ndarray, pick: Callable[[Spread], float | None], n_turns: int) -> str:
    s = spread(values)
    return cells.not_measured(n_turns) if s.n == 0 else cells.ms(pick(s))


def _per_turn(cond: Condition, metric: str) -> str:
    column = cond.column(metric)
    v = column[~np.isnan(column)]  # in turn order, as the mean's sum goes
    if len(v) == 0:
        return cells.not_measured(len(cond.measured))
    return f"mean {v.mean():.2f} ({v.min():g}-{v.max():g})"


def sentence_table(labels: Sequence[str], conds: Conditions) -> Table:
    def sent(pick: Callable[[Spread], float | None]) -> Callable[[Condition], str]:
        return lambda c: _spread_cell(c.sentence_ms, pick, len(c.measured))

    def call(pick: Callable[[Spread], float | None]) -> Callable[[Condition], str]:
        return lambda c: _spread_cell(c.call_ms, pick, len(c.measured))

    rows = (
        row("success rate", labels, conds, lambda c: cells.rate(*compare.success(c)), MEASURED),
        row("sentences (measured successful turns)", labels, conds, lambda c: str(len(c.sentence_ms)), MEASURED),
        row("per-sentence first token: min (ms)", labels, conds, sent(lambda s: s.minimum), MEASURED),
        row("per-sentence first token: median (ms)", labels, conds, sent(lambda s: s.median), MEASURED),
        row("per-sentence first token: P90 (ms)", labels, conds, sent(lambda s: s.p90), MEASURED),
        row("per-sentence first token: max (ms)", labels, conds, sent(lambda s: s.maximum), MEASURED),
        row("LLM calls (measured successful turns)", labels, conds, lambda c: str(len(c.call_ms)), MEASURED),
        row("per-call first token: median (ms)", labels, conds, call(lambda s: s.median), MEASURED),
        row("per-call first token: P90 (ms)", labels, conds, call(lambda s: s.p90), MEASURED),
        row("LLM calls per turn", labels, conds, lambda c: _per_turn(c, "llm_calls"), MEASURED),
        row("sentences per turn", labels, conds, lambda c: _per_turn(c, "sentences"), MEASURED),
    )
    caption = (
        "A sentence's first token is timed from the moment it could start (its call's request, or the previous "
        "sentence of the same call completing)."
    )
    return Table("sentences", header("figure", labels), rows, caption)


def amplification_table(pairs: Sequence[Pair], conds: Conditions) -> Table:
    rows = []
    for x, base in pairs:
        a = amplification(conds[x], conds[base])
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


def section(ctx: Context) -> list[Block]:
    out: list[Block] = [Heading(2, "3. Per-sentence first tokens and amplification (M3)")]
    if ctx.refused(out):
        return out
    out.append(sentence_table(ctx.labels, ctx.conds))
    if ctx.pairs:
        out.append(amplification_table(ctx.pairs, ctx.conds))
    else:
        out.append(Paragraph(ctx.no_pairs("The amplification"), NOTE))
    return out
