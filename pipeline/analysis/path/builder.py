"""How a turn's graph is put together: points added in time order, each from its measured start and end.

Used by ``build`` (the server's stages) and ``playback`` (the answer played), which add the points.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from pipeline.analysis.path.graph import Dep, Moment
from pipeline.records.path import HANDOFF


def attr_int(value: object, default: int = 0) -> int:
    """An attribute as a whole number (a call's, a sentence's index...); ``default`` where it is none."""
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else default


class Builder:
    """Points added in time order, each from its measured start and end (absolute ns)."""

    def __init__(self, zero_ns: int) -> None:
        """Moment 0: the end of speech, at ``zero_ns``."""
        self.points: list[Moment] = [Moment("end of speech", HANDOFF, 0, ())]
        self.at: list[int] = [zero_ns]

    def add(
        self,
        label: str,
        kind: str,
        start_ns: int,
        end_ns: int,
        waits_on: Sequence[tuple[int, str]],
        call: int | None = None,
        sentence: int | None = None,
    ) -> int:
        """A point whose work ran ``start_ns`` -> ``end_ns`` after what it ``waits_on`` (point, lag kind).
        The latest dependency done by its start is the one it waited for; one done later it did not wait
        for (its lag is negative), so re-timed without a change the point starts exactly where it did."""
        done = [(self.at[i], i, kind) for i, kind in waits_on]
        before = [d for d in done if d[0] <= start_ns]
        if not before:  # began before anything it waits on was done: counted from the earliest
            first = min(done)
            start_ns = first[0]
            before = [first]
        waited = max(before, key=_done_at)[1]  # the latest done (the first listed of equals)
        deps = tuple(Dep(i, start_ns - at if i == waited else min(0, start_ns - at), k) for at, i, k in done)
        self.points.append(Moment(label, kind, end_ns - start_ns, deps, call, sentence))
        self.at.append(end_ns)
        return len(self.points) - 1


def _done_at(dep: tuple[int, int, str]) -> int:
    return dep[0]


class SentenceTts(msgspec.Struct, frozen=True, gc=False):
    """A sentence's TTS in the graph: the points of its first frame and of its end, and its audio's length."""

    sentence: int
    first_frame: int  # its point
    done: int  # its point
    audio_ms: int
