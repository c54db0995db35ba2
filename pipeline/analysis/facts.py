"""Turns -> turn facts: each turn's row and the few things a row cannot hold (``facts_of``).

A report needs every turn's bench.csv row, but of the spans behind it only a little more:
each sentence's first-token time, which stages failed, what the turn span says of its run
(its recorded settings), where the turn's queue waits lay against its LLM calls, and, for the
one turn a waterfall shows, where its spans were read so they can be read again. ``TurnFacts``
holds exactly that, as plain tuples and strings, so a reader process can hand a hundred
thousand of them back cheaply and the spans themselves never have to cross. The three records
are msgspec structs, not named tuples: pickle takes a named tuple apart and puts it together
again by calling Python code, a struct in C, and one turn has two.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple, TypeVar

import msgspec
from msgspec.structs import force_setattr

from pipeline.analysis.numbers import measured_ok
from pipeline.analysis.path.graph import PathError, TurnGraph
from pipeline.analysis.path.graph_of import graph_of
from pipeline.analysis.rows import turn_row
from pipeline.analysis.traces import ReadSpan
from pipeline.analysis.turns import TurnSpans, servers_of
from pipeline.records.bench_csv import csv_line
from pipeline.records.turn_row import REPEATED, TurnRow
from pipeline.tracing import names

T = TypeVar("T")

# where a turn's llm.queue spans lie against its LLM calls
Q_INSIDE, Q_BEFORE, Q_MIXED = "inside", "before", "mixed"


class LineRef(msgspec.Struct, frozen=True, gc=False):
    """A line of a trace file: the file, its physical line's byte offset, and which part of it (see ``read_lines``)."""

    path: str
    offset: int
    part: int


class RunAttributes(msgspec.Struct, frozen=True, gc=False):
    """What a turn span's attributes say of its run (the report gathers a run's into its ``RunInfo``)."""

    run_id: str
    condition: str
    config_id: str
    config_json: str | None
    question_count: int | None


class TurnFacts(msgspec.Struct, frozen=True, gc=False):
    """One turn's row and what the report keeps beside it, as plain values a reader process can hand back."""

    start_ns: int
    span_id: str  # "" for a row not read from spans (``facts_of_rows``)
    row: TurnRow
    csv_line: str | None  # the row as bench.csv writes it (None: not made, for a row not read from spans)
    sentence_ms: tuple[float, ...]
    failed: tuple[str, ...]
    run: RunAttributes
    queue: tuple[str, ...]  # Q_* of each llm.queue span, in span order
    lines: tuple[LineRef, ...]  # where its spans were read (empty for spans not read from files)
    # where asked for (``Making.graphs``), a measured successful turn's dependency graph, or why its spans
    # give none (``PathError``'s message); None otherwise
    graph: TurnGraph | str | None = None


class Making(NamedTuple):
    """What ``facts_of`` makes of the turns besides each one's row."""

    keep_joined: bool = False  # a server's turn joined to its device's kept as a turn of its own too
    graphs: bool = False  # each measured successful turn's graph, made while its spans are at hand


PLAIN = Making()  # each turn's row and facts, a server's joined turn folded into its device's


def failed_stages(turn: TurnSpans) -> tuple[str, ...]:
    """Names of the turn's stage spans that ended in error, first failure first, each once."""
    seen: dict[str, None] = {}
    for child in turn.children:
        if child.status_code == names.STATUS_ERROR:
            seen.setdefault(child.name, None)
    return tuple(seen)


def queue_place(turn: TurnSpans, queue: ReadSpan) -> str:
    calls = turn.named(names.LLM_CALL)
    if any(c.start_ns <= queue.start_ns and queue.end_ns <= c.end_ns for c in calls):
        return Q_INSIDE
    if any(queue.end_ns <= c.start_ns for c in calls):
        return Q_BEFORE
    return Q_MIXED


def queue_places(turn: TurnSpans) -> tuple[str, ...]:
    return tuple(queue_place(turn, q) for q in turn.named(names.LLM_QUEUE))


def placement(places: Iterable[tuple[str, ...]]) -> str | None:
    """Where a set of turns' queue waits lie: all inside their calls, all before, mixed; None without any."""
    found = {p for turn in places for p in turn}
    return found.pop() if len(found) == 1 else (Q_MIXED if found else None)


def run_attributes(turn: ReadSpan, same: Callable[[str], str]) -> RunAttributes:
    a = turn.attributes
    count = a.get(names.QUESTION_COUNT)
    recorded = a.get(names.CONFIG_JSON)
    return RunAttributes(
        str(a.get(names.RUN_ID) or ""),
        str(a.get(names.CONDITION) or ""),
        str(a.get(names.CONFIG_ID) or ""),
        same(recorded) if isinstance(recorded, str) and recorded else None,
        count if isinstance(count, int) and not isinstance(count, bool) else None,
    )


def facts_of(
    turns: Sequence[TurnSpans],
    lines_of: Callable[[TurnSpans], tuple[LineRef, ...]] | None = None,
    kept: dict[Any, Any] | None = None,
    making: Making = PLAIN,
) -> tuple[list[TurnFacts], int]:
    """Each turn's facts, and how many server turns were left out as joined to their device's turn
    (the same turn seen from the other end: it gives the device's row the split of its first sound).
    With ``making.keep_joined`` none is left out: each server turn has its own facts too (a run's
    bench.csv and ``python -m pipeline.analyze`` give every turn span its row; the report folds them).
    With ``making.graphs`` each measured successful turn's graph is made too (``pipeline.whatif`` re-times
    every turn: made here, in the reader, while the spans are at hand, rather than read again).

    ``kept``: one copy of each distinct value the turns repeat (a run's settings and facts, the row's
    run id, condition, model, language...), kept across calls by a caller that makes facts a few turns
    at a time: a reader's answer then carries each once (pickle writes an object once), not once a
    turn, and the process it reaches holds one copy."""
    servers = servers_of(turns)
    served: set[str] = set() if making.keep_joined else {t.turn.span_id for t in servers.values()}
    known: dict[Any, Any] = {} if kept is None else kept

    def same(value: T) -> T:
        found: T = known.setdefault(value, value)
        return found

    keep = known.setdefault  # ``same`` without its call, for a row's many texts

    out = []
    for t in turns:
        if t.turn.span_id in served:
            continue
        server = servers.get(t.turn.span_id)
        row, sentence_ms = turn_row(t, server)
        for key in REPEATED:  # the row is new and seen by no one yet: its one change, before it is handed on
            text = getattr(row, key)
            force_setattr(row, key, keep(text, text))
        out.append(
            TurnFacts(
                t.turn.start_ns,
                t.turn.span_id,
                row,
                csv_line(row),
                sentence_ms,
                failed_stages(t),
                same(run_attributes(t.turn, same)),
                queue_places(t),
                lines_of(t) if lines_of is not None else (),
                _graph(t, server) if making.graphs and measured_ok(row) else None,
            )
        )
    return out, len(served)


def _graph(t: TurnSpans, server: TurnSpans | None) -> TurnGraph | str:
    try:
        return graph_of(t, server)
    except PathError as exc:
        return str(exc)


def facts_of_rows(
    rows: Sequence[TurnRow],
    sentence_ms: Sequence[tuple[float, ...]] | None = None,
    failed: Sequence[tuple[str, ...]] | None = None,
) -> list[TurnFacts]:
    """Facts of rows made without spans (a benchmark's synthetic rows, a test's): what the rows say
    of their runs, the sentences' times and failed stages given (index-aligned), nothing else."""
    out = []
    for i, row in enumerate(rows):
        run = RunAttributes(row.run_id, row.condition, row.config_id, None, None)
        sentences = sentence_ms[i] if sentence_ms is not None else ()
        stages = failed[i] if failed is not None else ()
        out.append(TurnFacts(row.turn_start_ns, "", row, None, sentences, stages, run, (), ()))
    return out
