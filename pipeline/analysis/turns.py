"""Spans -> turns: each turn span with its child spans, and a device's turn joined to its server's.

A turn is everything a row is computed from: its turn span and the spans whose parent it is
(``group_turns``). Where both ends of a turn were traced and read together (the server's turn
span a child of the device's, ``servers_of``), the device's row gains the split of its first
sound from its server's spans.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from operator import attrgetter

from pipeline.analysis.traces import ReadProblems, ReadSpan
from pipeline.tracing import names


@dataclass(slots=True)
class TurnSpans:
    """A turn span and its child spans, in time order, looked up by name."""

    turn: ReadSpan
    children: list[ReadSpan] = field(default_factory=list)
    # children by name, built at the first lookup: a row looks children up by name over a dozen times.
    # Tuples, as the garbage collector stops walking a tuple of plain records (a fleet holds a million).
    _by_name: dict[str, tuple[ReadSpan, ...]] = field(default_factory=dict, init=False, repr=False, compare=False)
    _indexed: int = field(default=-1, init=False, repr=False, compare=False)  # len(children) when built

    def _reindex(self) -> None:
        found: dict[str, list[ReadSpan]] = {}
        for s in self.children:
            found.setdefault(s.name, []).append(s)
        self._by_name = {name: tuple(spans) for name, spans in found.items()}
        self._indexed = len(self.children)

    def named(self, name: str) -> list[ReadSpan]:
        return list(self.spans(name))

    def spans(self, name: str) -> tuple[ReadSpan, ...]:
        """``named`` without the copy, for reading only."""
        if self._indexed != len(self.children):  # first lookup, or children added since
            self._reindex()
        return self._by_name.get(name, ())

    def first(self, name: str) -> ReadSpan | None:
        if self._indexed != len(self.children):
            self._reindex()
        found = self._by_name.get(name)
        return found[0] if found else None


_START = attrgetter("start_ns")  # sort keys for a million spans: cheaper than a lambda's call
_TURN_START = attrgetter("turn.start_ns")


def group_turns(spans: Iterable[ReadSpan], problems: ReadProblems) -> list[TurnSpans]:
    """Find every turn span and its children; duplicates (same span id) count once."""
    by_id: dict[str, ReadSpan] = {}
    for span in spans:
        by_id.setdefault(span.span_id, span)
    turns = {sid: TurnSpans(s) for sid, s in by_id.items() if s.name == names.TURN}
    for span in by_id.values():
        parent = turns.get(span.parent_span_id)
        if parent is not None:
            parent.children.append(span)
    out = []
    for t in turns.values():
        version = t.turn.attributes.get(names.SCHEMA)
        if version != names.SCHEMA_VERSION:
            problems.add(
                f"turn span {t.turn.span_id}: trace schema version {version!r} is not {names.SCHEMA_VERSION!r}; skipped"
            )
            continue
        t.children.sort(key=_START)
        out.append(t)
    out.sort(key=_TURN_START)
    return out


def servers_of(turns: Sequence[TurnSpans]) -> dict[str, TurnSpans]:
    """Device turn span id -> its server's turn, where both ends' spans are among ``turns`` (joined
    traces: the server's turn span is a child of the device's, filed among its children)."""
    by_id = {t.turn.span_id: t for t in turns}
    out = {}
    for t in turns:
        server = t.first(names.TURN) if t.first(names.DEVICE) is not None else None
        if server is not None and server.span_id in by_id:
            out[t.turn.span_id] = by_id[server.span_id]
    return out
