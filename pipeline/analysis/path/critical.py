"""The critical path to a target point (the first audible sample, the last sample played): the chain of
waits that decided its time, split by segment kind, and the work that ran beside it (slack); a turn's two
paths as its paths.csv row (``path_row``: the record is ``pipeline.records.path.PathRow``).
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from pipeline.analysis.path.graph import Dep, Moment, TurnGraph
from pipeline.records.path import SEGMENTS, SILENCE, WHOLE, WORK, PathRow


class PathStep(msgspec.Struct, frozen=True, gc=False):
    """One piece of a critical path: a point's own work, or the lag before it began."""

    kind: str
    label: str
    ns: int


class CriticalPath(msgspec.Struct, frozen=True, gc=False):
    """The steps that decided a target's time (they sum to it), and the work that ran beside them."""

    steps: tuple[PathStep, ...]  # from the end of speech to the target, in time order
    total_ns: int
    slack_ns: dict[str, int]  # off-path work before the target, by kind

    def by_kind(self) -> dict[str, int]:
        """The path's time in each segment kind (ns), every kind present, in path order."""
        out = dict.fromkeys(SEGMENTS, 0)
        for s in self.steps:
            out[s.kind] += s.ns
        return out


def critical_path(graph: TurnGraph, target: int, points: Sequence[Moment] | None = None) -> CriticalPath:
    """The chain of waits that decided ``target``'s time, and the work that ran beside it."""
    pts = points or graph.points
    t = graph.times(pts)
    steps: list[PathStep] = []
    on_path: set[int] = set()
    i: int | None = target
    while i is not None:
        on_path.add(i)
        p = pts[i]
        if p.duration_ns:
            steps.append(PathStep(p.kind, p.label, p.duration_ns))
        waited = _waited_for(p, t)
        if waited is not None and waited.lag_ns:
            steps.append(PathStep(waited.kind, f"{pts[waited.point].label} -> {p.label}", waited.lag_ns))
        i = None if waited is None else waited.point
    steps.reverse()
    return CriticalPath(tuple(steps), t[target], _slack(pts, t, on_path, t[target]))


def _waited_for(p: Moment, t: Sequence[int]) -> Dep | None:
    """The dependency that set the point's start: the latest (the first listed of equals)."""
    best: Dep | None = None
    for d in p.deps:  # of equals, one it waited for (a lag >= 0) before one done after it began
        if best is None or (t[d.point] + d.lag_ns, d.lag_ns >= 0) > (t[best.point] + best.lag_ns, best.lag_ns >= 0):
            best = d
    return best


def _slack(pts: Sequence[Moment], t: Sequence[int], on_path: set[int], until: int) -> dict[str, int]:
    """Work off the path that ran before ``until``: it happened beside the path and delayed nobody."""
    out: dict[str, int] = {}
    for i, p in enumerate(pts):
        if i in on_path or p.kind not in WORK or p.duration_ns <= 0:
            continue
        end = min(t[i], until)
        ran = end - max(0, t[i] - p.duration_ns)
        if ran > 0:
            out[p.kind] = out.get(p.kind, 0) + ran
    return out


def path_row(graph: TurnGraph) -> PathRow:
    """One turn's two critical paths by segment (ms), each summing exactly to its total, and the slack beside
    each."""
    values: dict[str, float] = {}
    for target, point in ((SILENCE, graph.first_audible), (WHOLE, graph.last_played)):
        path = critical_path(graph, point)
        values[f"{target}_ms"] = path.total_ns / 1e6
        for kind, ns in path.by_kind().items():
            values[f"{target}_{kind}_ms"] = ns / 1e6
        values[f"{target}_slack_ms"] = sum(path.slack_ns.values()) / 1e6
    return PathRow(graph.run_id, graph.condition, graph.question_id, graph.round, graph.device, **values)
