"""A turn's dependency graph: its points (work of one segment kind), what each waited on, and its times.

msgspec structs, as the reader's records are: a graph is some thirty points, made once a turn, and a
struct is built in C.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from pipeline.records.path import HANDOFF


class PathError(ValueError):
    """A turn whose spans cannot give its path: which span or event is missing, and in which turn."""


class Dep(msgspec.Struct, frozen=True, gc=False):
    """A point's dependency: the point it waits on, and the lag from that point done to this one's start."""

    point: int  # index of the point waited on
    lag_ns: int  # that point done -> this point's work begins (negative: it did not wait for it)
    kind: str = HANDOFF  # what the lag is, on the path


class Moment(msgspec.Struct, frozen=True, gc=False):
    """A moment the spans record, as the end of work of one kind that began once its dependencies were done."""

    label: str  # "call 1 first token", "sentence 0 cut", ...
    kind: str  # the segment its work is
    duration_ns: int
    deps: tuple[Dep, ...]
    call: int | None = None  # the LLM call it belongs to (queue, first token, generation)
    sentence: int | None = None


class TurnGraph(msgspec.Struct, frozen=True, gc=False):
    """One turn's points in an order where each comes after what it waits on; times are ns after the
    end of speech (point 0)."""

    turn: str  # "run_id question_id round N" (device M), for messages
    run_id: str
    condition: str
    question_id: str
    round: int
    device: int
    points: tuple[Moment, ...]
    first_audible: int  # the point of the first answer audio starting to play
    last_played: int  # the point of the last sample played
    remote_llm: bool  # the LLM was reached over a network (its first tokens include a round trip)
    sentence_texts: tuple[str, ...]
    calls: int

    def times(self, points: Sequence[Moment] | None = None) -> list[int]:
        """Each point's time: measured with the graph's own points, predicted with changed ones."""
        out: list[int] = []
        for p in points or self.points:
            start = max((out[d.point] + d.lag_ns for d in p.deps), default=0)
            out.append(start + p.duration_ns)
        return out
