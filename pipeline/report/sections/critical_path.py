"""Section 2c, what moves the silence: each condition's critical path, and three what-ifs on it.

The silence (end of speech -> first audible sample) is split at the points its critical path
passed (``pipeline.analysis.path``): per segment kind, its median and P90 over a condition's
measured successful turns, and its share of the silence summed over them. Work that ran beside
the path (slack) delayed nobody. Then each turn re-timed along its own graph
(``pipeline.analysis.retiming``) for the changes a reader asks first, chosen so the run can answer
them (``whatif_defaults``): a first token 25 % sooner, the largest segment 25 % shorter, a round
trip more where there is a network, the other condition's LLM where it was measured. Those
figures are predicted from the measured traces, never measured (M12); what a graph cannot know is
refused, with the reason.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

import matplotlib.pyplot as plt
import numpy as np

from pipeline.analysis.bootstrap import quantile_interval
from pipeline.analysis.numbers import median, quantile
from pipeline.analysis.path.critical import CriticalPath, critical_path
from pipeline.analysis.path.graph import TurnGraph
from pipeline.analysis.retiming import Place, Prediction, WhatIfError, paired, place, predict, same_questions
from pipeline.records.path import SEGMENTS
from pipeline.records.turn_row import TurnRow
from pipeline.report import cells, plots
from pipeline.report.conditions import Condition, title
from pipeline.report.document import NOTE, Block, Figure, Heading, Paragraph, Table
from pipeline.report.load import Dataset
from pipeline.report.sections.base import MEASURED, Context
from pipeline.report.sections.whatif_defaults import Defaults, WhatIf, defaults

HEADING = "2c. What moves the silence (critical path)"
PREDICTED = "predicted from measured traces (estimated, M12): not measured"
SILENCE = "silence: end of speech -> first audible sample"
WHOLE = "whole turn: end of speech -> last sample played"
T = TypeVar("T")


# A turn's graph is made from its spans when asked for (read again from its lines) and re-timed: together
# about 0.5 ms a turn for the paths and three what-ifs (timed before ``whatif_defaults``, which asks up to
# four). Past this many turns a condition's are an evenly spaced sample (medians and P90s of 1,000 turns hold
# to well within their intervals); every turn's paths: ``python -m pipeline.whatif --paths-csv``.
MOST = 1000


def evenly(items: Sequence[T], most: int) -> list[T]:
    """At most ``most`` of the items, evenly spaced (in the turns' order: time)."""
    if len(items) <= most:
        return list(items)
    return [items[i * len(items) // most] for i in range(most)]


@dataclass(frozen=True, slots=True)
class Turns:
    """A condition's measured successful turns (warm-up out, M6): their questions and places, and the
    graphs of an evenly spaced sample of them."""

    ok: int
    sampled: int
    graphs: list[TurnGraph]
    places: list[tuple[Place, int]]  # each turn's place in its run, and its index in the dataset

    @property
    def questions(self) -> set[str]:
        return {question for (question, _, _), _ in self.places}


def _place(row: TurnRow) -> Place:
    return (row.question_id, row.round, row.device or 0)


def turns_of(data: Dataset, cond: Condition) -> Turns:
    index = list(cond.ok_index)
    sample = evenly(index, MOST)
    graphs = [g for i in sample if (g := data.graph(i)) is not None]
    places = [(_place(data.facts[i].row), i) for i in index]
    return Turns(len(index), len(sample), graphs, places)


def partners_in(data: Dataset, graphs: Sequence[TurnGraph], other: Turns) -> list[TurnGraph | None]:
    """For each graph, the other condition's turn at the same place (``whatif.paired``), its graph made
    when needed: None where it has none."""
    return [data.graph(i) for i in paired([place(g) for g in graphs], other.places)]


def _ms(values_ns: Sequence[int]) -> np.ndarray:
    return np.sort(np.asarray(values_ns, dtype=np.float64) / 1e6)


def ranked(paths: Sequence[CriticalPath]) -> list[tuple[str, float]]:
    """Segment kinds with time on the paths and their share of the summed totals, largest first (ties in
    the order a turn passes them)."""
    owned = dict.fromkeys(SEGMENTS, 0)
    for p in paths:
        for kind, ns in p.by_kind().items():
            owned[kind] += ns
    total = sum(p.total_ns for p in paths)
    kinds = sorted((k for k in SEGMENTS if owned[k]), key=lambda k: -owned[k])
    return [(k, owned[k] / total if total else 0.0) for k in kinds]


def path_table(label: str, paths: Sequence[CriticalPath], turns: int, target: str, caption: str) -> Table:
    """One condition's critical paths to ``target``: each segment's median and P90 (ms), and its share."""
    n = cells.count(len(paths), turns)
    by_kind = [p.by_kind() for p in paths]

    def line(name: str, values: np.ndarray, share: str) -> tuple[str, ...]:
        return (name, cells.ms(median(values)), cells.ms(quantile(values, 0.9)), n, share, MEASURED)

    rows = [line(k, _ms([b[k] for b in by_kind]), f"{share:.1%}") for k, share in ranked(paths)]
    rows.append(line(f"{target}: the whole path", _ms([p.total_ns for p in paths]), "100.0%"))
    slack = _ms([sum(p.slack_ns.values()) for p in paths])
    rows.append(line("slack: work beside the path, delaying nobody", slack, "-"))
    headers = ("segment", "median (ms)", "P90 (ms)", "turns", f"share of the summed {target}", "attribution")
    key = f"path-{target}-{_key(label)}"
    return Table(key, headers, tuple(rows), f"{title(label)}, {caption}. {_SHARES}")


_SHARES = (
    "Shares: the segment's time summed over the turns / the total summed over them; segments ranked by share. "
    "Medians and P90s are each segment's own, so they need not add up to the total's."
)


def _key(label: str) -> str:
    return "Bp" if label == "B'" else "".join(ch if ch.isalnum() else "_" for ch in label)


def predictions(data: Dataset, mine: Turns, w: WhatIf, others: dict[str, Turns]) -> list[Prediction] | str:
    """Every sampled turn re-timed, or why not: one turn refused refuses the what-if (a prediction over the
    turns a change happens to fit would not be the condition's)."""
    theirs: Sequence[TurnGraph | None] = [None] * len(mine.graphs)
    if w.other is not None:
        other = others.get(w.other)
        if other is None or not other.ok:
            return f"{title(w.other)} has no measured successful turn"
        try:
            same_questions(mine.questions, other.questions)
        except WhatIfError as exc:
            return _reason(str(exc), w, ())
        theirs = partners_in(data, mine.graphs, other)
    out: list[Prediction] = []
    refused: list[tuple[str, str]] = []
    for g, o in zip(mine.graphs, theirs, strict=True):
        if w.other is not None and o is None:
            refused.append((g.turn, f"the other condition's turn of {g.question_id} has no path"))
            continue
        try:
            out.append(predict(g, w.changes, o))
        except WhatIfError as exc:
            refused.append((g.turn, _reason(str(exc), w, (g.turn, *((o.turn,) if o else ())))))
    if refused:
        turn, reason = refused[0]
        return f"{reason} ({len(refused)} of {len(mine.graphs)} turn(s) refused; the first: {turn})"
    return out


def _reason(text: str, w: WhatIf, turns: Sequence[str]) -> str:
    """The refusal without what the row already names (the change), its turns named generically."""
    for prefix in (*(f"{c}: " for c in w.changes), "--swap llm: "):
        text = text.removeprefix(prefix)
    for turn, name in zip(turns, ("the turn", "the other condition's turn"), strict=False):
        text = text.replace(turn, name)
    return text


def _cell(values: np.ndarray, q: float, name: str, turns: int) -> str:
    ci = cells.interval(quantile_interval(values, q, name))
    return f"{cells.ms(quantile(values, q))} {ci} · {cells.count(len(values), turns)}"


def whatif_table(
    data: Dataset, label: str, mine: Turns, turns: int, others: dict[str, Turns], asked: Defaults
) -> Table:
    rows: list[tuple[str, ...]] = []
    for w in asked.asked:
        found = predictions(data, mine, w, others)
        if isinstance(found, str):
            rows.append((w.name, "refused", "-", f"refused: {found}", "-", PREDICTED))
            continue
        for target, measured_ns, predicted_ns in (
            ("first audible", [p.measured_audible_ns for p in found], [p.audible_ns for p in found]),
            ("whole turn", [p.measured_whole_ns for p in found], [p.whole_ns for p in found]),
        ):
            m, p = _ms(measured_ns), _ms(predicted_ns)
            for q, stat in ((0.5, "median"), (0.9, "P90")):
                change = quantile(p, q) - quantile(m, q)
                rows.append(
                    (
                        w.name,
                        f"{target} {stat}",
                        _cell(m, q, f"{label}|path|{target}", turns),
                        _cell(p, q, f"{label}|whatif|{w.name}|{target}", turns),
                        cells.signed(change, ""),
                        PREDICTED,
                    )
                )
    headers = (
        "what if",
        "figure",
        "ms, measured [95% interval] · turns",
        "ms, predicted from measured traces [95% interval] · turns",
        "change (ms, predicted)",
        "attribution",
    )
    caption = (
        f"{title(label)}: each measured turn re-timed along its own dependency graph; only what waits on the "
        "changed segment moves. Intervals: 95% bootstrap over the turns. Predictions, not measurements."
    )
    return Table(f"whatif-{_key(label)}", headers, tuple(rows), caption)


def silence_plot(medians: dict[str, dict[str, float]]) -> bytes:
    """A stacked horizontal bar per condition: the median of each segment of the silence's path."""
    labels = list(medians)
    fig, ax = plt.subplots(figsize=(11, 0.6 * len(labels) + 1.6))
    tab20 = plt.get_cmap("tab20")

    def palette(i: int) -> tuple[float, ...]:  # tab20's strong colours first: neighbours apart
        return tuple(tab20((2 * i) % 20 + (2 * i) // 20))

    named: set[str] = set()  # each kind in the legend once, from whichever bar has it first
    for y, label in enumerate(labels):
        left = 0.0
        for i, kind in enumerate(SEGMENTS):
            width = medians[label].get(kind, 0.0)
            if width > 0:
                ax.barh(y, width, left=left, height=0.6, color=palette(i), label=None if kind in named else kind)
                named.add(kind)
                left += width
    ax.set_yticks(range(len(labels)), labels=[plots.plain(title(x)) for x in labels])
    ax.invert_yaxis()
    ax.set_xlabel("ms from the end of user speech (each segment's median over the turns, measured)")
    ax.set_title("The silence's critical path by segment")
    ax.grid(True, axis="x", alpha=0.3)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=6, fontsize=8, frameon=False)
    return plots.png(fig)


def section(ctx: Context) -> list[Block]:
    out: list[Block] = [Heading(2, HEADING)]
    if ctx.refused(out):
        return out
    found = {label: turns_of(ctx.data, cond) for label, cond in ctx.conds.items() if cond.measured}
    if not any(t.graphs for t in found.values()):
        out.append(
            Paragraph(
                "No measured successful turn has a critical path (no spans behind these rows, or "
                "none with what a path needs): nothing to split.",
                NOTE,
            )
        )
        return out
    out.append(
        Paragraph(
            "Where the user's silence goes: each turn's critical path (the chain of waits that decided when the "
            "first sample was heard), by segment, then what changes the run can answer would do to it, predicted by "
            "re-timing each measured turn along its own dependency graph (`python -m pipeline.whatif` gives any "
            "other change)."
        )
    )
    medians: dict[str, dict[str, float]] = {}
    for label, mine in found.items():
        out.extend(_condition(ctx, label, mine, found, medians))
    if ctx.draw and medians:
        out.append(Figure("critical-path", silence_plot(medians),
                          "The silence's critical path per condition: each segment's median over the measured "
                          "successful turns with a path (medians: they need not add up to the median silence).",
                          "stacked bars of the silence's critical path"))  # fmt: skip
    return out


def _condition(
    ctx: Context,
    label: str,
    mine: Turns,
    others: dict[str, Turns],
    medians: dict[str, dict[str, float]],
) -> list[Block]:
    """One condition's two paths and its what-ifs; the silence's segment medians go into ``medians``."""
    cond = ctx.conds[label]
    out: list[Block] = [Heading(3, title(label))]
    if not mine.graphs:
        return [*out, Paragraph(f"{title(label)}: no measured successful turn has a critical path.", NOTE)]
    turns = len(cond.measured)
    if mine.sampled < mine.ok:
        said = f"Paths and what-ifs from {mine.sampled:,} of the {mine.ok:,} successful turns, evenly spaced in time"
        out.append(Paragraph(f"{said} (every turn's paths: `python -m pipeline.whatif --paths-csv`).", NOTE))
    silence = [critical_path(g, g.first_audible) for g in mine.graphs]
    out.append(path_table(label, silence, turns, "silence", SILENCE))
    out.append(path_table(label, [critical_path(g, g.last_played) for g in mine.graphs], turns, "whole", WHOLE))
    if len(mine.graphs) < mine.sampled:
        lacking = mine.sampled - len(mine.graphs)
        why = "their spans lack what a path needs; `python -m pipeline.whatif` names it"
        out.append(Paragraph(f"{lacking} successful turn(s) have no path ({why}): left out here.", NOTE))
    measured = {other for other, t in others.items() if t.ok}
    asked = defaults(label, mine.graphs, [kind for kind, _ in ranked(silence)], measured)
    out.append(whatif_table(ctx.data, label, mine, turns, others, asked))
    if asked.left_out:
        out.append(Paragraph(f"{title(label)}: not asked: {'; '.join(asked.left_out)}.", NOTE))
    kinds = [p.by_kind() for p in silence]
    medians[label] = {k: median([b[k] / 1e6 for b in kinds]) for k in SEGMENTS}
    return out
