"""Section 1d, "What the silence costs" (M22): a setting that ends the turn sooner, against the users it cuts off.

Shown only when some turn's question carries a truth (where the user really finished; ``cutoffs``). It leads
with the frontier: per end-of-turn setting (a condition and a config, labelled with its VAD), the cut-off rate
with its 95 % Wilson interval, the silence from the true end (median, P90) beside the silence from the
pipeline's end of speech, the end-point delay and the utterances per question, and which settings no other beats on both
the cut-off rate and the silence from the true end. Then the figure (one point per setting, the frontier
joined) and the trade-off in words, computed from those figures. Turns without a truth are left out, said,
and never counted as not cut off.

Where the report compares two conditions that both carry a truth and whose cut-off rates' intervals do not
overlap, ``beside_silence`` says so under the result table's silence.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np

from pipeline.analysis.endpoint_truth import SEEN_IN_STT
from pipeline.analysis.numbers import measured
from pipeline.analysis.proportions import Proportion
from pipeline.report import cells, compare, identity, plots
from pipeline.report.conditions import Condition, title
from pipeline.report.cutoffs import EndSetting, beaten_by, cut_off_rate, end_settings, has_truth, on_frontier
from pipeline.report.document import NOTE, WARNING, Block, Figure, Heading, Paragraph, Table
from pipeline.report.sections.base import Context

TITLE = "What the silence costs"
HEADING = f"1d. {TITLE} (M22)"
LEAD = (
    "A setting that declares the end of the turn sooner looks faster when the silence is measured from its own "
    "end-point; a user it cut off has been answered part of a question. Measured from where each user really "
    "finished (the question's truth), the two are weighed together: the cut-off rate against the silence."
)
HEADERS = (
    "setting",
    "turns with a truth",
    "cut off [95% interval]",
    "silence from the true end, median (ms)",
    "silence from the true end, P90 (ms)",
    "silence from the pipeline's end of speech, median (ms)",
    "silence from the pipeline's end of speech, P90 (ms)",
    "end-point delay, median (ms)",
    "utterances per question, mean",
    "on the frontier",
    "attribution",
)
CAPTION = (
    "Measured turns (warm-up excluded) whose question carries a truth. Cut off: the end-point was declared before "
    "the user finished, failed turns included; 95% Wilson score interval (estimated). Silences: the true end of "
    "speech, or the end of speech the VAD found (the result table's silence) -> first audible sound, successful "
    "turns, with their 95% bootstrap interval (estimated). End-point delay: true end -> end-point declared "
    "(negative: cut off). On the frontier: no other setting cuts off fewer users and answers sooner from the true "
    "end (a tie beats nothing)."
)
ATTRIBUTION = "measured"


def number_words(value: float) -> str:
    """A figure in words: one decimal, without a trailing ``.0``."""
    return f"{value:.1f}".removesuffix(".0")


def rate_words(p: Proportion) -> str:
    """``20.0% [5.7-51.0]``: the share cut off and its 95 % interval, in percent."""
    return f"{100 * p.share:.1f}% [{100 * p.low:.1f}-{100 * p.high:.1f}]"


def _stat(values: np.ndarray, q: float, name: str, turns: int) -> str:
    return cells.stat(compare.stat_of(values, q, name, turns))


def frontier_cell(s: EndSetting, settings: Sequence[EndSetting]) -> str:
    if s.silence is None:
        return "- (no silence from the true end)"
    beaten = beaten_by(s, settings)
    return "yes" if beaten is None else f"no: {beaten.label} beats it"


def setting_row(s: EndSetting, settings: Sequence[EndSetting]) -> tuple[str, ...]:
    n = len(s.rows)
    name = f"{s.condition}|{s.config_id}"
    mean = f"{np.mean(s.utterances):.2f} · {cells.count(len(s.utterances), n)}" if s.utterances else None
    return (
        s.label,
        str(n),
        f"{rate_words(s.cut)} · {s.cut.successes}/{n}",
        _stat(s.true_end, 0.5, f"{name}|true-end silence", n),
        _stat(s.true_end, 0.9, f"{name}|true-end silence", n),
        _stat(s.pipeline_end, 0.5, f"{name}|pipeline-end silence", n),
        _stat(s.pipeline_end, 0.9, f"{name}|pipeline-end silence", n),
        _stat(s.delay, 0.5, f"{name}|end-point delay", n),
        mean or cells.not_measured(n),
        frontier_cell(s, settings),
        ATTRIBUTION,
    )


def frontier_table(settings: Sequence[EndSetting]) -> Table:
    return Table("endpoint-cost", HEADERS, tuple(setting_row(s, settings) for s in settings), CAPTION)


def trade_off_words(settings: Sequence[EndSetting]) -> list[str]:
    """The frontier walked from the quickest to the most patient setting, each step's gain and cost."""
    front = sorted(
        (s for s, on in zip(settings, on_frontier(settings), strict=True) if on),
        key=lambda s: (s.silence, -s.cut.share),
    )
    if len(front) == 1:
        s = front[0]
        figures = f"{rate_words(s.cut)} cut off, silence from the true end {number_words(s.silence or 0)} ms (median)"
        if len(settings) == 1:
            return [f"One setting: {s.label}: {figures}."]
        return [f"{s.label} beats every other setting on both: {figures}."]
    out = []
    for a, b in itertools.pairwise(front):
        wait, fewer = (b.silence or 0) - (a.silence or 0), 100 * (a.cut.share - b.cut.share)
        rates = f"from {100 * a.cut.share:.1f}% to {100 * b.cut.share:.1f}%"
        if fewer == 0:
            text = f"{b.label} answers {number_words(wait)} ms later than {a.label} and cuts off as many users"
        elif wait == 0:
            text = (
                f"At the same median silence from the true end ({number_words(a.silence or 0)} ms), {b.label} cuts "
                f"off {number_words(fewer)} fewer users in 100 than {a.label} ({rates})"
            )
        else:
            text = (
                f"Waiting {number_words(wait)} ms longer ({a.label} -> {b.label}) cuts off {number_words(fewer)} "
                f"fewer users in 100 ({rates})"
            )
        if fewer and a.cut.overlaps(b.cut):
            text += "; their 95% intervals overlap: these turns do not show the difference to be real"
        out.append(text + ".")
    return out


def off_frontier_words(settings: Sequence[EndSetting]) -> list[str]:
    out = []
    beaten = [(s, b) for s in settings if s.silence is not None and (b := beaten_by(s, settings)) is not None]
    if beaten:
        listed = "; ".join(f"{s.label} (beaten by {b.label})" for s, b in beaten)
        out.append(f"Off the frontier (another setting cuts off fewer users and answers sooner): {listed}.")
    unplaced = [s.label for s in settings if s.silence is None]
    if unplaced:
        out.append(f"Not placed (no successful turn gave a silence from the true end): {'; '.join(unplaced)}.")
    return out


def looks_quickest_words(settings: Sequence[EndSetting]) -> str | None:
    """The setting quickest by its own end of speech, measured again from the true end, with its cut-off rate."""
    timed = [s for s in settings if len(s.pipeline_end) and s.silence is not None]
    if len(settings) < 2 or not timed:
        return None
    quick = min(timed, key=lambda s: float(np.median(s.pipeline_end)))
    return (
        f"Measured from the end of speech each setting found, {quick.label} looks quickest (silence median "
        f"{number_words(float(np.median(quick.pipeline_end)))} ms); measured from where the user really finished, its "
        f"median is {number_words(quick.silence or 0)} ms, and it cuts off {rate_words(quick.cut)} of the questions."
    )


def frontier_plot(settings: Sequence[EndSetting], labels: Sequence[str]) -> bytes:
    """Cut-off rate (its interval as error bars) against the median silence from the true end, one point per
    setting (filled: on the frontier; coloured by condition where they span several), the frontier joined. Each
    point carries its number and the legend its setting: settings close on both axes would overlap their names."""
    fig, ax = plt.subplots(figsize=(12, 5))
    fronts = on_frontier(settings)
    placed = [(s, x, on) for s, on in zip(settings, fronts, strict=True) if (x := s.silence) is not None]
    by_condition = len({s.condition for s in settings}) > 1  # else a colour per setting
    spots: dict[tuple[float, float], list[str]] = {}  # settings at one spot share one label ("3, 7")
    for i, (s, x, on) in enumerate(placed):
        y = 100 * s.cut.share
        colour = (
            plots.colour(s.condition, labels) if by_condition else plots.OTHER_COLOURS[i % len(plots.OTHER_COLOURS)]
        )
        bars = [[y - 100 * s.cut.low], [100 * s.cut.high - y]]
        name = f"{i + 1}. {plots.plain(s.label)}"
        ax.errorbar([x], [y], yerr=bars, fmt="o", color=colour, mfc=colour if on else "none", capsize=4, label=name)
        spots.setdefault((round(x), round(y, 1)), []).append(str(i + 1))
    for (x, y), numbers in spots.items():
        ax.annotate(", ".join(numbers), (x, y), xytext=(5, 4), textcoords="offset points", fontsize=8)
    line = sorted((x, 100 * s.cut.share) for s, x, on in placed if on)
    ax.plot([x for x, _ in line], [y for _, y in line], "-", color="black", linewidth=1, label="frontier")
    ax.set_xlabel("silence from the true end of speech, median (ms)")
    ax.set_ylabel("questions cut off (%, 95% Wilson interval)")
    ax.set_ylim(bottom=-2)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    return plots.png(fig)


def _notes(ctx: Context, settings: Sequence[EndSetting]) -> list[Block]:
    out: list[Block] = []
    without = sum(1 for r in ctx.data.rows if measured(r) and not has_truth(r))
    if without:
        out.append(
            Paragraph(
                f"{without} measured turn(s) carry no truth (their question has none): left out of this section, "
                "never counted as not cut off.",
                NOTE,
            )
        )
    seen = [s.label for s in settings if any(r.cut_off_by == SEEN_IN_STT for r in s.rows)]
    if seen:
        out.append(
            Paragraph(
                f"Cuts seen by the device alone ({', '.join(seen)}): its server writes no spans of the lab's, so a "
                "cut is inferred from the server's recognised text (it came before the user finished, or more than "
                "once in the turn). That can miss a cut, and take an earlier exchange's late text for one unless "
                "each question waited for a quiet server (replay --settle-ms); no end-point delay is given.",
                NOTE,
            )
        )
    if len({frozenset(str(r.question_id) for r in s.rows) for s in settings}) > 1:
        out.append(Paragraph("The settings were not asked the same questions with a truth (M5).", WARNING))
    ids = {str(r.run_id) for s in settings for r in s.rows}
    runs = [run for run_id, run in ctx.data.runs.items() if run_id in ids]
    others = [d.setting for d in identity.differences(runs) if not d.setting.startswith("vad.") and not d.allowed]
    blocking = [d.setting for d in ctx.check.differences if not d.allowed]
    only_vad = len(ctx.check.reasons) == 1 and bool(blocking) and all(b.startswith("vad.") for b in blocking)
    if not ctx.check.comparable and only_vad:
        out.append(
            Paragraph(
                "The other sections do not compare these runs (M11: their end-of-turn settings differ); this one "
                "compares exactly that.",
                NOTE,
            )
        )
    if len(settings) > 1 and others:
        out.append(
            Paragraph(
                f"These settings differ in more than the end of turn ({', '.join(others)}): their silences differ "
                "by those too (M11).",
                WARNING,
            )
        )
    return out


def section(ctx: Context) -> list[Block]:
    if not any(has_truth(r) for r in ctx.data.rows):
        return []
    out: list[Block] = [Heading(2, HEADING), Paragraph(LEAD)]
    settings = end_settings(ctx.data)
    if not settings:
        out.append(Paragraph("Only warm-up turns carry a truth, and the warm-up is left out (M6).", NOTE))
        return out
    table = frontier_table(settings)
    out.append(table)
    empty = sum(1 for row in table.rows for cell in row if cell.startswith(cells.NOT_MEASURED))
    if empty:
        ctx.incomplete.append(f"{empty} cell(s) of the end-of-turn table not measured")
    out.extend(Paragraph(text) for text in trade_off_words(settings))
    quickest = looks_quickest_words(settings)
    if quickest:
        out.append(Paragraph(quickest))
    out.extend(Paragraph(text) for text in off_frontier_words(settings))
    if ctx.draw and any(s.silence is not None for s in settings):
        out.append(
            Figure(
                "endpoint-frontier",
                frontier_plot(settings, ctx.labels),
                "Questions cut off against the median silence from the true end of speech, one point per setting "
                "(bars: 95% Wilson interval; filled: on the frontier, joined by the line).",
                "cut-off rate against silence from the true end, per end-of-turn setting",
            )
        )
    out.extend(_notes(ctx, settings))
    return out


def also_cuts_off(x: Condition, base: Condition) -> str | None:
    """Words for two conditions whose cut-off rates' 95 % intervals do not overlap; None otherwise (either
    without a truth, or the intervals overlap)."""
    rx, rb = cut_off_rate(x.measured), cut_off_rate(base.measured)
    if rx is None or rb is None or rx.overlaps(rb):
        return None
    (more, rm), (less, rl) = ((x, rx), (base, rb)) if rx.share > rb.share else ((base, rb), (x, rx))
    return (
        f"{title(more.label)} also cuts off more users: {rate_words(rm)} against {rate_words(rl)} for "
        f"{title(less.label)}, of the questions with a truth (95% Wilson intervals that do not overlap): part of its "
        f'silence above is measured from an end of speech found before the user finished (see section 1d, "{TITLE}").'
    )


def beside_silence(ctx: Context) -> list[Block]:
    """Under the result table's silence: each compared pair that ``also_cuts_off`` has words for."""
    found = [also_cuts_off(ctx.conds[x], ctx.conds[base]) for x, base in ctx.pairs]
    return [Paragraph(text, WARNING) for text in found if text]
