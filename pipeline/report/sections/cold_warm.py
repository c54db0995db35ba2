"""Section 1b, cold and warm turns side by side (M6: the warm-up is marked, not hidden).

A cold turn has more on its path than a warm one: the first turn of a connection waits for the
connection, its hello and the MCP initialisation; a turn after a wake word for what the wake
sets going. The rows say which a turn was in ``turn_temperature`` (``cold_connection``,
``cold_wake`` or ``warm``); the silence (``silence``) of each kind is shown per condition: its
median and P90 over the successful turns, the warm-up round's included (a run's first turns are
often its cold ones), with how many of them were warm-up. Rows without the column: the section
says the run did not label its turns.
"""

from __future__ import annotations

from collections.abc import Sequence

from pipeline.analysis.numbers import quantile
from pipeline.records.turn_row import TurnRow
from pipeline.report import cells
from pipeline.report.conditions import title
from pipeline.report.document import NOTE, Block, Heading, Paragraph, Table
from pipeline.report.sections.base import MEASURED, Context
from pipeline.report.silence import sorted_silences

HEADING = "1b. Cold and warm turns (M6)"
COLUMN = "turn_temperature"
KINDS = {
    "cold_connection": "cold: the first turn of a connection",
    "cold_wake": "cold: a turn after a wake word",
    "warm": "warm",
}
UNLABELLED = "(not labelled)"


def kind_of(row: TurnRow) -> str:
    """The row's label, or ``UNLABELLED`` where it has none (rows of a run that did not label its turns)."""
    value = getattr(row, COLUMN, None)
    return value if isinstance(value, str) and value else UNLABELLED


def labelled(rows: Sequence[TurnRow]) -> bool:
    return any(kind_of(r) != UNLABELLED for r in rows)


def cold_warm_rows(label: str, rows: Sequence[TurnRow]) -> list[tuple[str, ...]]:
    """One line per kind of turn the condition's successful rows have (known kinds first, in ``KINDS`` order)."""
    ok = [r for r in rows if r.ok]
    found = {kind_of(r) for r in ok}
    order = [k for k in (*KINDS, UNLABELLED) if k in found] + sorted(found - {*KINDS, UNLABELLED})
    out: list[tuple[str, ...]] = []
    for kind in order:
        mine = [r for r in ok if kind_of(r) == kind]
        silences = sorted_silences(mine)
        p50, p90 = (quantile(silences, q) for q in (0.5, 0.9)) if len(silences) else (None, None)
        out.append(
            (
                title(label),
                KINDS.get(kind, kind),
                cells.ms(p50),
                cells.ms(p90),
                cells.count(len(silences), len(mine)),
                str(sum(1 for r in mine if r.warmup)),
                MEASURED,
            )
        )
    return out


def cold_warm_table(ctx: Context) -> Table:
    rows = [line for label, cond in ctx.conds.items() for line in cold_warm_rows(label, cond.rows)]
    headers = (
        "condition",
        "turn",
        "silence median (ms)",
        "silence P90 (ms)",
        "turns with a silence / successful turns",
        "of them warm-up",
        "attribution",
    )
    caption = (
        "Silence: end of user speech -> first audible sound. Successful turns of every round, the warm-up's "
        "included (M6: marked, not hidden); no interval: a run has few cold turns."
    )
    return Table("cold-warm", headers, tuple(rows), caption)


def section(ctx: Context) -> list[Block]:
    out: list[Block] = [Heading(2, HEADING)]
    if ctx.refused(out):
        return out
    if not labelled(ctx.data.rows):
        out.append(
            Paragraph(
                f"These runs did not label their turns cold or warm (their rows have no `{COLUMN}`): a cold turn's "
                "connection set-up, hello and MCP initialisation are not told apart from a warm turn's silence here.",
                NOTE,
            )
        )
        return out
    out.append(
        Paragraph(
            "A cold turn waits for more than a warm one: the first turn of a connection for the connection, its hello "
            "and the MCP initialisation; a turn after a wake word for what the wake sets going."
        )
    )
    out.append(cold_warm_table(ctx))
    return out
