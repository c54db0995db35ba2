"""Trace files -> every turn's facts and row: the one way in (``read_traces``), for ``pipeline.analyze``,
the report and the scripts; ``rows_from_spans`` is the same for spans already in memory (the run's
row sink, tests).

A share of the files (all of them, or a forked reader's part: ``parallel``) is read a line at a
time (``read_share``): its spans grouped into turns (``turns``), each turn's facts made (``facts``)
and only those kept. The facts are then put in the order one process reading everything would
have (by turn start, ties in reading order), and problems are numbered by their lines in the
whole file.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple

from pipeline.analysis import parallel
from pipeline.analysis.facts import PLAIN, LineRef, Making, TurnFacts, facts_of
from pipeline.analysis.parallel import Piece, ShareResult
from pipeline.analysis.path.graph import TurnGraph
from pipeline.analysis.path.graph_of import graph_if_any
from pipeline.analysis.traces import (
    ReadProblems,
    ReadSpan,
    read_line_at,
    read_lines,
    read_trace_file,
    unreadable_message,
)
from pipeline.analysis.turns import TurnSpans, group_turns, servers_of
from pipeline.records.turn_row import TurnRow
from pipeline.tracing import names


class Read(NamedTuple):
    """What ``read_traces`` read: every turn's facts, and what was joined, unreadable, and who read it."""

    facts: list[TurnFacts]  # one a turn, by turn start
    joined: int  # server turns joined to their device's turns, left out (none with keep_joined)
    problems: list[str]
    workers: int  # processes that read the files (1: this one)

    @property
    def rows(self) -> list[TurnRow]:
        return [f.row for f in self.facts]


def read_traces(
    files: Sequence[Path],
    workers: int | None = None,
    keep_joined: bool = False,
    meanwhile: Callable[[], object] | None = None,
    graphs: bool = False,
) -> Read:
    """Every turn's facts from ``files``, its row among them; ``workers`` (default: one per core, for a
    large read) processes; ``keep_joined``: a server's turn joined to its device's turn kept as a turn of
    its own (``facts_of``); ``meanwhile``: called once, while forked readers read (where this process
    reads, before it does); ``graphs``: each measured successful turn's graph made too (``facts.Making``)."""
    making = Making(keep_joined, graphs)
    later = _once(meanwhile)
    workers = parallel.workers_for(files) if workers is None else workers
    shares = parallel.cut(files, parallel.share_weights(workers)) if workers > 1 else []
    if len(shares) > 1:
        readers = min(workers, len(shares))
        results = parallel.read_apart(shares, readers, read_share, making, later)
        if results is not None:
            return _merged(shares, results, readers)
    later()
    whole = [Piece(str(f), 0, None) for f in files]
    return _merged([whole], [read_share(whole, making)], 1)


def rows_from_spans(spans: Iterable[ReadSpan], problems: ReadProblems | None = None) -> list[TurnRow]:
    """Every turn's row from spans in memory, as ``read_traces(..., keep_joined=True)`` gives them from files."""
    return [f.row for f in facts_from_spans(spans, problems)]


def facts_from_spans(spans: Iterable[ReadSpan], problems: ReadProblems | None = None) -> list[TurnFacts]:
    """Every turn's facts from spans in memory (each server turn kept, as a run's bench.csv has it)."""
    return facts_of(group_turns(spans, problems or ReadProblems()), making=Making(keep_joined=True))[0]


@contextmanager
def cyclic_gc_paused() -> Iterator[None]:
    """Cyclic garbage collection off while turns are read (and, in the report command, while the report
    is made from them). None of their records is in a cycle, but a fleet's millions of them set off
    collections again and again, each walking all of them."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _once(call: Callable[[], object] | None) -> Callable[[], None]:
    done = call is None

    def once() -> None:
        nonlocal done
        if not done:
            done = True
            assert call is not None
            call()

    return once


def read_share(pieces: Sequence[Piece], making: Making = PLAIN) -> ShareResult:
    """Read some pieces of trace files and turn them into turn facts (in a forked reader, or in this
    process); ``making``: as ``facts_of``'s."""
    share = _Share(making)
    problems: list[tuple[int, int, str]] = []
    counts = []
    read = []  # the pieces as far as they were read (a file still being written may have grown since)
    for i, piece in enumerate(pieces):
        path = Path(piece.path)
        number, end = 0, piece.start
        try:
            for line in read_lines(path, piece.start, piece.end):
                number, end = line.number, line.after
                if line.unreadable:
                    problems.append((i, number, line.unreadable))
                else:
                    share.add(line.spans, LineRef(piece.path, line.offset, line.part))
        except OSError as exc:
            problems.append((i, 0, f"{path}: could not be read ({exc})"))
        counts.append(number)
        read.append(Piece(piece.path, piece.start, end))
    if share.spread:
        share.regroup(read)
    return share.result(problems, counts)


class _Share:
    """A share's spans grouped into turns, and their facts made, a line at a time.

    A line of ours holds one turn's whole trace, so its facts are made while its spans are fresh in
    the processor's cache (less time than grouping all the share's spans at the end), and only the
    facts are kept: one process holding 100,000 turns' spans peaked at 1,886 MiB
    (``scripts/bench_report.py --baseline`` on the code before this reading). That
    gives what grouping them all would only while no turn gains a span from another line: a span
    whose parent is a turn of an earlier line, or a turn named as parent by spans read before it.
    Where one is found, the share is read again at the end and its spans grouped all at once.
    (A span id read before is skipped, as grouping keeps a span's first copy.)
    """

    def __init__(self, making: Making = PLAIN) -> None:
        self.making = making
        self.where: dict[str, LineRef] = {}  # span id -> the line of its first copy
        self.turn_ids: set[str] = set()
        self.unseen: set[str] = set()  # parents named by a span read before them (or never read)
        self.facts: list[TurnFacts] = []
        self.joined = 0
        self.grouped = ReadProblems()
        self.spread = False  # a turn's spans are in more than one line
        self.kept: dict[Any, Any] = {}  # one copy of each value the share's turns repeat (facts_of)

    def add(self, spans: list[ReadSpan], ref: LineRef) -> None:
        where = self.where
        fresh = [s for s in spans if s.span_id not in where]
        for s in fresh:
            where.setdefault(s.span_id, ref)
        for s in fresh:
            parent = s.parent_span_id
            if s.name == names.TURN:
                if s.span_id in self.unseen:
                    self.spread = True
                self.turn_ids.add(s.span_id)
            if parent and where.get(parent) is not ref:  # its parent not in this line
                if parent in self.turn_ids:
                    self.spread = True
                elif parent not in where:
                    self.unseen.add(parent)
        if not self.spread:
            # every span grouped here is one of this line's first copies: each turn was read from this line alone
            facts, joined = facts_of(group_turns(fresh, self.grouped), lambda t: (ref,), self.kept, self.making)
            self.facts.extend(facts)
            self.joined += joined

    def regroup(self, pieces: Sequence[Piece]) -> None:
        """The facts made again from all the share's spans grouped at once (read again: only facts were kept)."""
        first: dict[str, ReadSpan] = {}
        for piece in pieces:
            try:
                for line in read_lines(Path(piece.path), piece.start, piece.end):
                    for span in line.spans:
                        first.setdefault(span.span_id, span)
            except OSError:
                continue  # said when it was first read
        self.grouped = ReadProblems()
        turns = group_turns(first.values(), self.grouped)
        self.facts, self.joined = facts_of(turns, lambda t: _lines_of(t, self.where), self.kept, self.making)

    def result(self, problems: list[tuple[int, int, str]], counts: list[int]) -> ShareResult:
        where = self.where
        hashes = parallel.span_hashes(where, len(where))
        dangling = frozenset(p for p in self.unseen if p not in where)
        return ShareResult(
            self.facts, self.joined, problems, self.grouped.messages, counts, hashes, frozenset(self.turn_ids), dangling
        )


def _lines_of(turn: TurnSpans, where: dict[str, LineRef]) -> tuple[LineRef, ...]:
    """The lines the turn's spans were read from, in reading order (the turn span's first)."""
    refs = {ref: None for s in (turn.turn, *turn.children) if (ref := where.get(s.span_id)) is not None}
    return tuple(refs)


def _merged(shares: Sequence[Sequence[Piece]], results: Sequence[ShareResult], workers: int) -> Read:
    facts = [f for r in results for f in r.facts]
    facts.sort(key=_start)  # stable: ties stay in reading order, as one process's sort leaves them
    return Read(facts, sum(r.joined for r in results), list(_problems(shares, results)), workers)


def _start(f: TurnFacts) -> int:
    return f.start_ns


def _problems(shares: Sequence[Sequence[Piece]], results: Sequence[ShareResult]) -> Iterator[str]:
    before: dict[str, int] = {}  # lines of a file in earlier pieces
    for pieces, r in zip(shares, results, strict=True):
        for i, number, text in r.read_problems:
            yield unreadable_message(pieces[i].path, before.get(pieces[i].path, 0) + number, text) if number else text
        for piece, count in zip(pieces, r.lines, strict=True):
            before[piece.path] = before.get(piece.path, 0) + count
    for r in results:
        yield from r.group_problems


def reread_graph(facts: TurnFacts) -> TurnGraph | None:
    """The turn's dependency graph (``analysis.path``), from the lines it was read from: a device's turn
    with its server's where both were read (the server's turn span is among its lines). None where the
    spans give none (a failed turn, one missing a span: ``python -m pipeline.whatif`` names what)."""
    found = reread_with_server(facts)
    return None if found is None else graph_if_any(*found)


def reread_with_server(facts: TurnFacts) -> tuple[TurnSpans, TurnSpans | None] | None:
    """The spans of one turn read before, read again from the lines it was read from, with its server's turn
    where both ends were read (``turns.servers_of``); None where its lines no longer hold it."""
    turns = _reread(facts)
    mine = next((t for t in turns if t.turn.span_id == facts.span_id), None)
    return None if mine is None else (mine, servers_of(turns).get(mine.turn.span_id))


def reread_turn(facts: TurnFacts) -> TurnSpans | None:
    """The spans of one turn read before, read again from the lines it was read from."""
    found = [t for t in _reread(facts) if t.turn.span_id == facts.span_id]
    return found[0] if found else None


def _reread(facts: TurnFacts) -> list[TurnSpans]:
    spans = [s for ref in facts.lines for s in read_line_at(Path(ref.path), ref.offset, ref.part)]
    return group_turns(spans, ReadProblems())


class SpansRead(NamedTuple):
    """Every readable span of some files, and what could not be read."""

    spans: list[ReadSpan]
    problems: list[str]


def read_spans(files: Sequence[Path]) -> SpansRead:
    """Every readable span of ``files``, whatever it belongs to, in one process: for spans that are no turn's
    (the lab's speech services' and LLM relay's, ``server_segments``), which ``read_traces`` does not keep."""
    problems = ReadProblems()
    spans = [s for f in files for s in read_trace_file(f, problems)]
    return SpansRead(spans, problems.messages)
