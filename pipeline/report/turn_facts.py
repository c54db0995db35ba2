"""What the report keeps of one turn's spans: its row and the few things a row cannot hold.

A report needs every turn's bench.csv row, but of the spans behind it only a little more:
each sentence's first-token time, which stages failed, the run's recorded settings, where
the turn's queue waits lay against its LLM calls, and, for the one turn a waterfall shows,
where its spans were read so they can be read again. ``TurnFacts`` holds exactly that, as
plain tuples and strings, so a worker process can hand a hundred thousand of them back
cheaply and the spans themselves never have to cross. The three records are msgspec structs,
not named tuples: pickle takes a named tuple apart and puts it together again by calling
Python code, a struct in C, and one turn has two.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

import msgspec

from pipeline.analysis.bench_csv import csv_line_of
from pipeline.analysis.numbers import Row
from pipeline.analysis.rows import TurnSpans, servers_of, turn_row_and_sentences
from pipeline.analysis.traces import SpanRecord
from pipeline.tracing import names

T = TypeVar("T")

# A row's texts that many turns share (a run's, a question's, a model's...), kept once by ``facts_of``;
# the others (trace id, each call's first tokens) are a turn's own.
REPEATED_TEXTS = (
    "run_id",
    "condition",
    "config_id",
    "question_id",
    "error",
    "note",
    "llm_model",
    "llm_endpoint",
    "asr_error_metric",
    "language",
    "category",
    "scripted",
    "clock",
    "transport",
)

# where a turn's llm.queue spans lie against its LLM calls
Q_INSIDE, Q_BEFORE, Q_MIXED = "inside", "before", "mixed"


class LineRef(msgspec.Struct, frozen=True, gc=False):
    """A line of a trace file: the file, its physical line's byte offset, and which part of it (see ``read_lines``)."""

    path: str
    offset: int
    part: int


class RunFacts(msgspec.Struct, frozen=True, gc=False):
    """What a turn span says of its run (``report.load`` gathers them into ``RunInfo``)."""

    run_id: str
    condition: str
    config_id: str
    config_json: str | None
    question_count: int | None


class TurnFacts(msgspec.Struct, frozen=True, gc=False):
    start_ns: int
    span_id: str
    row: Row  # in COLUMNS order, as bench.csv's columns
    csv_line: str  # the row as bench.csv writes it
    sentence_ms: tuple[float, ...]
    failed: tuple[str, ...]
    run: RunFacts
    queue: tuple[str, ...]  # Q_* of each llm.queue span, in span order
    lines: tuple[LineRef, ...]  # where its spans were read (empty for spans not read from files)


def failed_stages(turn: TurnSpans) -> tuple[str, ...]:
    """Names of the turn's stage spans that ended in error, first failure first, each once."""
    seen: dict[str, None] = {}
    for child in turn.children:
        if child.status_code == names.STATUS_ERROR:
            seen.setdefault(child.name, None)
    return tuple(seen)


def queue_place(turn: TurnSpans, queue: SpanRecord) -> str:
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


def run_facts(turn: SpanRecord, same: Callable[[str], str]) -> RunFacts:
    a = turn.attributes
    count = a.get(names.QUESTION_COUNT)
    recorded = a.get(names.CONFIG_JSON)
    return RunFacts(
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
    keep_joined: bool = False,
) -> tuple[list[TurnFacts], int]:
    """Each turn's facts, and how many server turns were left out as joined to their device's turn
    (the same turn seen from the other end: it gives the device's row the split of its first sound).
    With ``keep_joined`` none is left out: each server turn has its own facts too, as ``turn_rows``
    gives it a row of its own (``python -m pipeline.analyze`` writes both ends' rows).

    ``kept``: one copy of each distinct value the turns repeat (a run's settings and facts, the row's
    run id, condition, model, language...), kept across calls by a caller that makes facts a few turns
    at a time: a worker's answer then carries each once (pickle writes an object once), not once a
    turn, and the process it reaches holds one copy."""
    servers = servers_of(turns)
    served: set[str] = set() if keep_joined else {t.turn.span_id for t in servers.values()}
    known: dict[Any, Any] = {} if kept is None else kept

    def same(value: T) -> T:
        found: T = known.setdefault(value, value)
        return found

    keep = known.setdefault  # ``same`` without its call, for a row's many texts

    out = []
    for t in turns:
        if t.turn.span_id in served:
            continue
        row, sentence_ms = turn_row_and_sentences(t, servers.get(t.turn.span_id))  # in COLUMNS order
        for key in REPEATED_TEXTS:
            text = row[key]
            row[key] = keep(text, text)
        out.append(
            TurnFacts(
                t.turn.start_ns,
                t.turn.span_id,
                row,
                csv_line_of(row.values()),
                sentence_ms,
                failed_stages(t),
                same(run_facts(t.turn, same)),
                queue_places(t),
                lines_of(t) if lines_of is not None else (),
            )
        )
    return out, len(served)
