"""What-if: measured turns re-timed along their own dependency graphs (``path.graph.TurnGraph``).

A change moves a segment (every occurrence of it: each call's first token, each sentence's
first TTS frame...) and only what waits on it: a point starts when the latest of its
dependencies is done, so a shorter first token shortens the silence but a faster synthesiser of
sentence 2 may change nothing the user hears. Three kinds of change:

- ``SEGMENT=+Nms`` / ``-Nms`` / ``+N%``: each occurrence of the segment longer or shorter;
- ``network.rtt=+Nms``: one round trip more per LLM call (the request out, its first byte back;
  streamed tokens then arrive as before), for turns whose LLM was reached over a network;
- a swap: another run's LLM segments (each call's first token and generation up to each cut),
  turn by turn for the same question, round and device. Where the LLM ran elsewhere in the other
  run (in this process in one, over a network or in its own server in the other), the TTS's
  segments come with it (``NEIGHBOURS``): the synthesiser runs while the LLM still generates, and an
  in-process LLM shares the CPU with it, so moving the LLM moves what the TTS costs (measured, the
  conditions interleaved: B's first TTS frame took 5.6 and 8.4 ms more than A's on the same words,
  ``scripts/bench_whatif.py``); the output says so (``carries_neighbours``). The ASR is done
  before the LLM starts and nothing of the LLM runs beside it, so its segment stays the turn's own.

What a graph cannot know it refuses, never guesses: a change that makes a segment shorter than
nothing, a network change for an in-process LLM, a swap whose answer differs (other sentences,
another number of calls: their TTS and playback were never measured).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from pipeline.analysis.numbers import measured
from pipeline.analysis.path.graph import Dep, Moment, TurnGraph
from pipeline.analysis.read import read_traces
from pipeline.records.path import (
    ASR,
    DEVICE_BUFFER,
    DOWNLINK,
    ENDPOINTING,
    LLM_FIRST_TOKEN,
    LLM_GENERATION,
    QUEUE,
    TOOL,
    TTS,
    TTS_FIRST_FRAME,
    UPLINK,
)

T = TypeVar("T")
NETWORK_RTT = "network.rtt"
# what ``--set`` may name -> the segment it moves (network.rtt: each LLM call's first token)
SETTABLE = {
    "uplink": UPLINK,
    "endpointing": ENDPOINTING,
    "asr": ASR,
    "queue": QUEUE,
    "llm.first_token": LLM_FIRST_TOKEN,
    "llm.generation": LLM_GENERATION,
    "tool": TOOL,
    "tts.first_frame": TTS_FIRST_FRAME,
    "tts": TTS,
    "downlink": DOWNLINK,
    "device_buffer": DEVICE_BUFFER,
    NETWORK_RTT: LLM_FIRST_TOKEN,
}
NOT_SETTABLE = {
    "playback": "it is the answer's own audio: a change to it is another answer",
    "handoff": "it is the pipeline's own hand-off between stages, not a stage",
}
SWAPPED = frozenset({LLM_FIRST_TOKEN, LLM_GENERATION})
NEIGHBOURS = frozenset({TTS_FIRST_FRAME, TTS})  # what runs beside a generating LLM
_VALUE = re.compile(r"^([+-])(\d*\.?\d+)(ms|s|%)$")
# on the path as a hand-off's lag (the first frame -> it plays), not as a point's own work
ON_EDGES = frozenset({DEVICE_BUFFER})
SCALED_ONLY = {"llm.generation": "it is scaled (+N%): a shift at every sentence cut has no meaning"}


class WhatIfError(ValueError):
    """A what-if that cannot be answered from the traces: what is missing or unknowable, and where."""


@dataclass(frozen=True, slots=True)
class Change:
    """A change to one segment: every occurrence of it lengthened by ``add_ns`` or scaled by ``factor``."""

    name: str  # as given: "llm.first_token"
    segment: str  # the kind of point it moves
    add_ns: int = 0
    factor: float = 1.0  # "+20%" -> 1.2

    def __str__(self) -> str:
        if self.factor != 1.0:
            return f"{self.name} {self.factor - 1:+.0%}"
        return f"{self.name} {self.add_ns / 1e6:+g} ms"


def parse_change(text: str) -> Change:
    """``llm.first_token=-200ms``, ``network.rtt=+150ms``, ``tts.first_frame=-20%``."""
    name, sep, value = text.partition("=")
    name = name.strip()
    if not sep:
        raise WhatIfError(f"--set {text!r}: expected SEGMENT=+Nms, SEGMENT=-Nms or SEGMENT=+N%")
    if name in NOT_SETTABLE:
        raise WhatIfError(f"--set {text!r}: {name} cannot be changed: {NOT_SETTABLE[name]}")
    if name not in SETTABLE:
        raise WhatIfError(f"--set {text!r}: unknown segment {name!r}; known: {', '.join(SETTABLE)}")
    found = _VALUE.match("".join(value.split()))
    if found is None:
        raise WhatIfError(f"--set {text!r}: the change must be signed, with a unit: +150ms, -0.2s, -20%")
    sign, number, unit = found.groups()
    amount = float(number) * (1 if sign == "+" else -1)
    if unit == "%":
        if name == NETWORK_RTT:
            raise WhatIfError(f"--set {text!r}: a round trip is added or taken away in ms, not scaled")
        return Change(name, SETTABLE[name], factor=1 + amount / 100)
    if name in SCALED_ONLY:
        raise WhatIfError(f"--set {text!r}: {name} {SCALED_ONLY[name]}")
    return Change(name, SETTABLE[name], add_ns=round(amount * (1000 if unit == "s" else 1) * 1_000_000))


def changed(graph: TurnGraph, changes: Sequence[Change], points: Sequence[Moment] | None = None) -> list[Moment]:
    """The graph's points with ``changes`` applied (to ``points``, a swap's, where given)."""
    out = list(points or graph.points)
    for change in changes:
        if change.name == NETWORK_RTT and not graph.remote_llm:
            raise WhatIfError(f"{change}: {graph.turn}'s LLM ran in-process: there is no network on its path")
        for i, p in enumerate(out):
            if change.segment in ON_EDGES:
                out[i] = _with_lags(graph, p, change)
            elif p.kind == change.segment:
                out[i] = _with_duration(p, _moved(graph, p.label, p.duration_ns, change))
    return out


def occurs(graph: TurnGraph, segment: str) -> bool:
    """Whether the segment is anywhere in the turn (a change to one it lacks moves nothing)."""
    if segment in ON_EDGES:
        return any(d.kind == segment for p in graph.points for d in p.deps)
    return any(p.kind == segment for p in graph.points)


def _moved(graph: TurnGraph, label: str, ns: int, change: Change) -> int:
    out = round(ns * change.factor) + change.add_ns
    if out < 0:
        raise WhatIfError(
            f"{change}: {graph.turn}'s {label} took {ns / 1e6:.3f} ms; it cannot become shorter than nothing"
        )
    return out


def _with_lags(graph: TurnGraph, p: Moment, change: Change) -> Moment:
    if not any(d.kind == change.segment for d in p.deps):
        return p
    deps = tuple(
        Dep(d.point, _moved(graph, p.label, d.lag_ns, change), d.kind)
        if d.kind == change.segment and d.lag_ns >= 0
        else d
        for d in p.deps
    )
    return Moment(p.label, p.kind, p.duration_ns, deps, p.call, p.sentence)


def carries_neighbours(graph: TurnGraph, other: TurnGraph) -> bool:
    """Whether a swap brings the other run's TTS segments too: the LLM ran elsewhere there."""
    return graph.remote_llm != other.remote_llm


def swapped(graph: TurnGraph, other: TurnGraph) -> list[Moment]:
    """The graph's points with ``other``'s LLM segments (each call's first token and generation), and its
    TTS segments where its LLM ran elsewhere (``carries_neighbours``)."""
    if graph.calls != other.calls:
        raise WhatIfError(
            f"--swap llm: {graph.turn} made {graph.calls} LLM call(s), {other.turn} {other.calls}: "
            "the other calls' TTS and tools were never measured here"
        )
    if _normal(graph.sentence_texts) != _normal(other.sentence_texts):
        raise WhatIfError(
            f"--swap llm: {graph.turn} and {other.turn} answered differently "
            f"({len(graph.sentence_texts)} vs {len(other.sentence_texts)} sentence(s)"
            f"{_first_difference(graph.sentence_texts, other.sentence_texts)}): "
            "the other answer's TTS and playback were never measured here"
        )
    kinds = SWAPPED | NEIGHBOURS if carries_neighbours(graph, other) else SWAPPED
    theirs = {p.label: p for p in other.points if p.kind in kinds}
    out = []
    for p in graph.points:
        if p.kind in kinds:
            found = theirs.get(p.label)
            if found is None:
                raise WhatIfError(f"--swap llm: {other.turn} has no {p.label}")
            p = _with_duration(p, found.duration_ns)
        out.append(p)
    return out


def _normal(texts: Sequence[str]) -> tuple[str, ...]:
    return tuple(" ".join(t.split()) for t in texts)


def _first_difference(a: Sequence[str], b: Sequence[str]) -> str:
    for x, y in zip(_normal(a), _normal(b), strict=False):
        if x != y:
            return f"; {x!r} vs {y!r}"
    return ""


def _with_duration(p: Moment, ns: int) -> Moment:
    return Moment(p.label, p.kind, ns, p.deps, p.call, p.sentence)


@dataclass(frozen=True, slots=True)
class Prediction:
    """One turn: measured and predicted (ns after the end of speech)."""

    turn: str
    measured_audible_ns: int
    measured_whole_ns: int
    audible_ns: int
    whole_ns: int


def predict(graph: TurnGraph, changes: Sequence[Change] = (), other: TurnGraph | None = None) -> Prediction:
    points = swapped(graph, other) if other is not None else list(graph.points)
    points = changed(graph, changes, points)
    measured = graph.times()
    times = graph.times(points)
    return Prediction(
        graph.turn,
        measured[graph.first_audible],
        measured[graph.last_played],
        times[graph.first_audible],
        times[graph.last_played],
    )


def same_questions(asked: Iterable[str], other: Iterable[str]) -> None:
    """Refuses two trace sets that asked different questions (a swap pairs them question by question)."""
    mine, theirs = set(asked), set(other)
    if mine != theirs:
        only_mine, only_theirs = sorted(mine - theirs), sorted(theirs - mine)
        raise WhatIfError(
            "--swap llm: the two trace sets asked different questions"
            + (f"; only in the traces: {', '.join(only_mine)}" if only_mine else "")
            + (f"; only in the other traces: {', '.join(only_theirs)}" if only_theirs else "")
        )


Place = tuple[str, int, int]  # question, round, device: a turn's place in its run


def place(graph: TurnGraph) -> Place:
    return (graph.question_id, graph.round, graph.device)


def paired(wanted: Sequence[Place], places: Sequence[tuple[Place, T]]) -> list[T]:
    """For each wanted place, the other run's turn at the same place (question, round, device), or without
    one, that question's turns in order; every wanted question must be among ``places``."""
    exact = dict(places)
    by_question: dict[str, list[T]] = {}
    for (question, _, _), turn in places:
        by_question.setdefault(question, []).append(turn)
    missing = sorted({q for q, _, _ in wanted} - by_question.keys())
    if missing:
        raise WhatIfError(f"--swap llm: the other traces never asked {', '.join(missing)}")
    out = []
    seen: dict[str, int] = {}
    for key in wanted:
        found = exact.get(key)
        if found is None:
            n = seen[key[0]] = seen.get(key[0], -1) + 1
            pool = by_question[key[0]]
            found = pool[n % len(pool)]
        out.append(found)
    return out


def partners(graphs: Sequence[TurnGraph], others: Sequence[TurnGraph]) -> list[TurnGraph]:
    """For each graph, the other run's turn of the same question, round and device (``paired``). ``graphs``
    may be a sample of a run: call ``same_questions`` on the whole runs first."""
    return paired([place(g) for g in graphs], [(place(o), o) for o in others])


@dataclass
class Graphs:
    """A trace set's measured turns as graphs, and what was left out of them (and why)."""

    graphs: list[TurnGraph]
    warmup: int  # warm-up turns (M6): not measured
    failed: list[str]  # measured turns that failed: no path (M7: counted, never dropped silently)
    problems: list[str]  # unreadable lines and files


def read_graphs(files: Sequence[Path]) -> Graphs:
    """Every measured turn's graph; ``WhatIfError`` where a successful turn lacks the spans a path needs.

    Read as every reader reads (``read.read_traces``: a forked reader per core for a large read, the
    trace schema checked, a server's turn joined to its device's folded into it), the turns that count
    told by their rows (``numbers.measured``, M6; failed turns counted, M7), each graph made by the
    reader that read the turn's spans (``facts.Making.graphs``)."""
    read = read_traces(files, graphs=True)
    out = Graphs([], 0, [], read.problems)
    for facts in read.facts:
        row = facts.row
        if not measured(row):
            out.warmup += 1
        elif not row.ok:
            out.failed.append(row.question_id or "?")
        elif isinstance(facts.graph, TurnGraph):
            out.graphs.append(facts.graph)
        else:  # why its spans give no path
            raise WhatIfError(f"{', '.join(map(str, files))}: {facts.graph}")
    return out
