"""Trace files -> every turn's facts, read by several processes at once when there is much to read.

A fleet's hundred thousand turns are about a gigabyte of trace lines, and decoding them, grouping
their spans into turns and computing the rows is Python work that one core does in most of a
minute. So the files are cut, at line ends and in file order, into shares (rounds of one per
core, each round's smaller than the last: ``share_weights``), each read by the next free one of
a forked worker process per core (``read_share``: spans grouped into turns, and each turn's
``TurnFacts`` handed back through a file, ``_read_share_to_file``); the facts are then put in the
order one process reading everything would have (by turn start, ties in reading order), and
problems are numbered by their lines in the whole file.

That is only the same as reading everything in one process when no turn's spans are divided
between two shares: each share reports the span ids it read, its turn span ids and the parents
it could not find, and where a parent is a turn of another share (a device's turn in one file and
its server's in another, or a turn cut across a share's edge), or one span id is in two shares,
the files are read again in one process. A small read (under ``PARALLEL_BYTES``) is one share.
"""

from __future__ import annotations

import os
import pickle
import tempfile
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures.process import BrokenProcessPool
from itertools import accumulate, repeat
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from pipeline.analysis.rows import TurnSpans, group_turns
from pipeline.analysis.traces import ReadProblems, SpanRecord, read_line_at, read_lines, unreadable_message
from pipeline.report import forked
from pipeline.report.turn_facts import LineRef, TurnFacts, facts_of
from pipeline.tracing import names

# Below this much to read, forking and handing results back costs more than a second core saves.
PARALLEL_BYTES = 32 << 20
MOST_WORKERS = 8
# Rounds of shares, each a share per worker (``share_weights``): a share's answer is pickled, sent and
# unpickled (in this process's result thread) while the workers read the next shares.
ROUNDS = 5
_CUT_SEARCH = 1 << 16  # how far ahead a cut looks for a line end at a time


class Piece(NamedTuple):
    """Bytes ``start`` to ``end`` (None: to the end) of a trace file: whole lines, in order."""

    path: str
    start: int
    end: int | None


class ShareResult(NamedTuple):
    facts: list[TurnFacts]
    joined: int  # server turns joined to their device's turns, left out
    read_problems: list[tuple[int, int, str]]  # (piece, line number within the piece (0: none), text)
    group_problems: list[str]
    lines: list[int]  # lines read from each piece
    span_hashes: np.ndarray  # hash of every span id read (first copies): a span id in two shares
    turn_ids: frozenset[str]
    dangling: frozenset[str]  # parent ids of spans whose parent this share did not read


class Read(NamedTuple):
    facts: list[TurnFacts]
    joined: int
    problems: list[str]
    workers: int  # processes that read the files (1: this one)


def read_share(pieces: Sequence[Piece], keep_joined: bool = False) -> ShareResult:
    """Read some pieces of trace files and turn them into turn facts (in a worker, or in this process);
    ``keep_joined``: as ``facts_of``."""
    share = _Share(keep_joined)
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

    def __init__(self, keep_joined: bool = False) -> None:
        self.keep_joined = keep_joined
        self.where: dict[str, LineRef] = {}  # span id -> the line of its first copy
        self.turn_ids: set[str] = set()
        self.unseen: set[str] = set()  # parents named by a span read before them (or never read)
        self.facts: list[TurnFacts] = []
        self.joined = 0
        self.grouped = ReadProblems()
        self.spread = False  # a turn's spans are in more than one line
        self.kept: dict[Any, Any] = {}  # one copy of each value the share's turns repeat (facts_of)

    def add(self, spans: list[SpanRecord], ref: LineRef) -> None:
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
            facts, joined = facts_of(group_turns(fresh, self.grouped), lambda t: (ref,), self.kept, self.keep_joined)
            self.facts.extend(facts)
            self.joined += joined

    def regroup(self, pieces: Sequence[Piece]) -> None:
        """The facts made again from all the share's spans grouped at once (read again: only facts were kept)."""
        first: dict[str, SpanRecord] = {}
        for piece in pieces:
            try:
                for line in read_lines(Path(piece.path), piece.start, piece.end):
                    for span in line.spans:
                        first.setdefault(span.span_id, span)
            except OSError:
                continue  # said when it was first read
        self.grouped = ReadProblems()
        turns = group_turns(first.values(), self.grouped)
        self.facts, self.joined = facts_of(turns, lambda t: _lines_of(t, self.where), self.kept, self.keep_joined)

    def result(self, problems: list[tuple[int, int, str]], counts: list[int]) -> ShareResult:
        where = self.where
        hashes = np.fromiter(map(hash, where), dtype=np.int64, count=len(where))
        dangling = frozenset(p for p in self.unseen if p not in where)
        return ShareResult(
            self.facts, self.joined, problems, self.grouped.messages, counts, hashes, frozenset(self.turn_ids), dangling
        )


def _lines_of(turn: TurnSpans, where: dict[str, LineRef]) -> tuple[LineRef, ...]:
    """The lines the turn's spans were read from, in reading order (the turn span's first)."""
    refs = {ref: None for s in (turn.turn, *turn.children) if (ref := where.get(s.span_id)) is not None}
    return tuple(refs)


def share_weights(workers: int) -> list[float]:
    """Shares' sizes, relative, in the order they are handed out: ``workers`` alike in each of ``ROUNDS``
    rounds, each round's half the size of the one before. Each reader takes the next share when it is
    done with its last, so the readers finish near together however their speeds differ (on this
    shared VM two alike processes do not read alike), and only a small share's answer is left to
    hand back after the readers are done."""
    return [0.5**r for r in range(ROUNDS) for _ in range(workers)]


def cut(files: Sequence[Path], weights: Sequence[float]) -> list[list[Piece]]:
    """The files as runs of whole lines in file order, sized about as ``weights`` (one a run)."""
    sizes = [_size(f) for f in files]
    total = sum(sizes)
    scale = total / sum(weights)
    edges = list(accumulate(weight * scale for weight in weights))  # where each run ends
    out: list[list[Piece]] = [[]]
    done = 0  # bytes before the current file
    for path, size in zip(files, sizes, strict=True):
        start = 0
        while len(out) < len(weights) and done + size > edges[len(out) - 1] and size > 0:
            at = _line_end(path, max(start, int(edges[len(out) - 1] - done)))
            if at is None or at >= size:
                break
            if at > start:
                out[-1].append(Piece(str(path), start, at))
            out.append([])
            start = at
        out[-1].append(Piece(str(path), start, None))
        done += size
    return [share for share in out if share]


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0  # read as a whole, where its error is reported


def _line_end(path: Path, at: int) -> int | None:
    """The offset just after the first line end at or after ``at``."""
    try:
        with path.open("rb") as fh:
            fh.seek(at)
            offset = at
            while block := fh.read(_CUT_SEARCH):
                found = block.find(b"\n")
                if found >= 0:
                    return offset + found + 1
                offset += len(block)
    except OSError:
        return None
    return None


def read_files(
    files: Sequence[Path],
    workers: int | None = None,
    keep_joined: bool = False,
    meanwhile: Callable[[], object] | None = None,
) -> Read:
    """Every turn's facts from ``files``; ``workers`` (default: one per core, for a large read) processes;
    ``keep_joined``: a server's turn joined to its device's turn kept as a turn of its own (``facts_of``);
    ``meanwhile``: called once, while forked readers read (where this process reads, before it does)."""
    if workers is None:
        big = sum(_size(f) for f in files) >= PARALLEL_BYTES
        workers = min(forked.cores(), MOST_WORKERS) if big and forked.can_fork() else 1
    shares = cut(files, share_weights(workers)) if workers > 1 else []
    if len(shares) > 1:
        readers = min(workers, len(shares))
        # every share in a worker, this process only waiting: holding none of the spans itself, it
        # starts the report with a small heap (tried: reading a share here, its report was slower)
        try:
            with (
                tempfile.TemporaryDirectory(prefix="report-shares-", dir=_spill_root()) as folder,
                forked.pool(readers) as pool,
            ):
                spilled = pool.map(_read_share_to_file, shares, repeat(keep_joined), repeat(folder))
                if meanwhile is not None:
                    meanwhile()
                    meanwhile = None  # called: not again if this process has to read it all after all
                results = [_unspilled(path) for path in spilled]  # each as soon as it is there, in order
        except BrokenProcessPool:  # a reader killed (out of memory, say): this process reads it all
            results = []
        if results and _independent(results):
            return _merged(shares, results, readers)
    if meanwhile is not None:
        meanwhile()
    whole = [Piece(str(f), 0, None) for f in files]
    return _merged([whole], [read_share(whole, keep_joined)], 1)


def _read_share_to_file(pieces: Sequence[Piece], keep_joined: bool, folder: str) -> str:
    """``read_share`` in a worker, its answer pickled to a file in ``folder``: the file's name.

    Handed back through the pool's pipe, a share's answer (megabytes) kept its reader waiting until
    this process had received and unpickled the other reader's: reading ``scripts/bench_report.py``'s
    100,000 turns, a reader took 0.27 to 0.44 s from its first share's end to its second's start
    (each share's start and end logged by a wrapper around ``read_share``), 0.18 to 0.23 s written to
    a file (mostly the pickling). Written to a file, the reader goes on at once; only a name crosses
    the pipe."""
    result = read_share(pieces, keep_joined)
    with tempfile.NamedTemporaryFile(dir=folder, suffix=".pickle", delete=False) as fh:
        pickle.dump(result, fh, protocol=pickle.HIGHEST_PROTOCOL)
    return fh.name


def _unspilled(path: str) -> ShareResult:
    with open(path, "rb") as fh:
        result: ShareResult = pickle.load(fh)  # written by our own reader, in a folder only this user can read
    os.unlink(path)  # its memory back now, not when the folder goes
    return result


def _spill_root() -> str | None:
    """Memory-backed /dev/shm where there is one (nothing written back to disk), else the default."""
    return _SHM if os.path.isdir(_SHM) and os.access(_SHM, os.W_OK) else None


_SHM = "/dev/shm"


def _independent(results: Sequence[ShareResult]) -> bool:
    """No turn's spans divided between shares: what each share made of its turns is what one process would."""
    hashes = np.sort(np.concatenate([r.span_hashes for r in results]))
    if bool((hashes[1:] == hashes[:-1]).any()):  # a span id in two shares (or, rarely, two ids' hashes alike)
        return False
    for i, r in enumerate(results):
        others = (o.turn_ids for j, o in enumerate(results) if j != i)
        if any(not r.dangling.isdisjoint(ids) for ids in others):
            return False
    return True


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


def reread_turn(facts: TurnFacts) -> TurnSpans | None:
    """The spans of one turn read before, read again from the lines it was read from."""
    spans = [s for ref in facts.lines for s in read_line_at(Path(ref.path), ref.offset, ref.part)]
    found = [t for t in group_turns(spans, ReadProblems()) if t.turn.span_id == facts.span_id]
    return found[0] if found else None
