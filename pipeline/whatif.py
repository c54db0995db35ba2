"""``python -m pipeline.whatif TRACES --set llm.first_token=-200ms``: what a change would do to measured turns.

Each measured turn is re-timed along its own dependency graph (``pipeline.analysis.path``): a
changed segment moves only what waits on it. The predicted first audible sample and whole turn
are printed beside the measured ones, medians and P90s with 95 % bootstrap intervals, labelled
as predicted from measured traces: never measurements. Also the silence's critical path by
segment (``--paths-csv``: every turn's two paths as columns). What the traces cannot tell (an
answer of another length, a network for an in-process LLM) is refused with the reason.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from pipeline.analysis.bootstrap import quantile_interval
from pipeline.analysis.numbers import median, quantile
from pipeline.analysis.path.critical import critical_path, path_row
from pipeline.analysis.path.graph import TurnGraph
from pipeline.analysis.retiming import (
    Change,
    Graphs,
    Prediction,
    WhatIfError,
    carries_neighbours,
    occurs,
    parse_change,
    partners,
    predict,
    read_graphs,
    same_questions,
)
from pipeline.analysis.traces import trace_files
from pipeline.records.path import SEGMENTS, paths_csv

LABEL = "predicted from measured traces, not measured"


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m pipeline.whatif", description=__doc__.splitlines()[0])
    p.add_argument(
        "traces",
        type=Path,
        nargs="+",
        help="trace files or folders of them (a run's traces/; a device's run with its server's, to join them)",
    )
    p.add_argument("--set", action="append", default=[], metavar="SEGMENT=CHANGE", help="e.g. llm.first_token=-200ms")
    p.add_argument("--swap", metavar="llm=OTHER_TRACES", help="the LLM segments of another run, question by question")
    p.add_argument("--paths-csv", type=Path, help="write every measured turn's critical paths here")
    args = p.parse_args(argv)
    try:
        changes = [parse_change(text) for text in args.set]
        base = _read(*args.traces)
        others = _swap_source(args.swap, base) if args.swap else None
        theirs: list[TurnGraph | None] = list(others) if others is not None else [None] * len(base.graphs)
        predictions = [predict(g, changes, o) for g, o in zip(base.graphs, theirs, strict=True)]
    except WhatIfError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for message in base.problems:
        print(f"warning: {message}", file=sys.stderr)
    for change in changes:
        if not any(occurs(g, change.segment) for g in base.graphs):
            print(f"warning: {change.name}: no turn here has it; the change moves nothing", file=sys.stderr)
    print(_counts(base))
    print(_path_table(base))
    if changes or others is not None:
        carried = sum(1 for g, o in zip(base.graphs, theirs, strict=True) if o is not None and carries_neighbours(g, o))
        print(_prediction_table(predictions, _describe(changes, args.swap, carried)))
    if args.paths_csv:
        _write_paths(args.paths_csv, base)
        print(f"critical paths of {len(base.graphs)} turn(s): {args.paths_csv}")
    return 0


def _read(*paths: Path) -> Graphs:
    files = []
    for path in paths:
        if not path.exists():
            raise WhatIfError(f"{path}: not found")
        found = trace_files(path)
        if not found:
            raise WhatIfError(f"{path}: no trace files (*.jsonl)")
        files += found
    graphs = read_graphs(files)
    if not graphs.graphs:
        names = ", ".join(map(str, paths))
        raise WhatIfError(f"{names}: no measured successful turn to re-time ({_counts(graphs)})")
    return graphs


def _swap_source(text: str, base: Graphs) -> list[TurnGraph]:
    role, sep, where = text.partition("=")
    if role != "llm" or not sep or not where:
        raise WhatIfError(f"--swap {text!r}: expected llm=OTHER_TRACES (only the LLM's segments can be swapped)")
    others = _read(Path(where)).graphs
    same_questions((g.question_id for g in base.graphs), (g.question_id for g in others))
    return partners(base.graphs, others)


def _describe(changes: Sequence[Change], swap: str | None, carried: int = 0) -> str:
    """The change in words; a swap that brought the other run's TTS segments says so."""
    neighbours = (
        f" (and, in {carried} turn(s) whose LLM ran elsewhere there, its TTS segments: the synthesiser runs "
        "while the LLM generates, and an in-process LLM shares the CPU with it)"
        if carried
        else ""
    )
    parts = [str(c) for c in changes] + ([f"the LLM of {swap.partition('=')[2]}{neighbours}"] if swap else [])
    return ", ".join(parts)


def _counts(g: Graphs) -> str:
    failed = f"; {len(g.failed)} failed turn(s) have no path ({', '.join(sorted(set(g.failed)))})" if g.failed else ""
    return f"{len(g.graphs)} measured successful turn(s); {g.warmup} warm-up turn(s) left out (M6){failed}"


def _path_table(g: Graphs) -> str:
    """The silence's critical path: each segment's median and P90 over the turns, and its share."""
    paths = [critical_path(x, x.first_audible) for x in g.graphs]
    by_kind = [p.by_kind() for p in paths]
    total = sum(p.total_ns for p in paths)
    lines = [f"the silence's critical path (end of speech -> first audible), n = {len(paths)}, measured:"]
    lines.append(f"  {'segment':<16} {'median ms':>10} {'P90 ms':>10} {'share':>7}")
    for kind in sorted(SEGMENTS, key=lambda k: -sum(b[k] for b in by_kind)):
        values = [b[kind] / 1e6 for b in by_kind]
        owned = sum(b[kind] for b in by_kind)
        if owned == 0:
            continue
        lines.append(f"  {kind:<16} {median(values):>10.1f} {quantile(values, 0.9):>10.1f} {owned / total:>7.1%}")
    silences = [p.total_ns / 1e6 for p in paths]
    lines.append(f"  {'silence':<16} {median(silences):>10.1f} {quantile(silences, 0.9):>10.1f} {1:>7.1%}")
    return "\n".join(lines)


def _prediction_table(predictions: Sequence[Prediction], what: str) -> str:
    lines = [f"what if: {what} ({LABEL}), n = {len(predictions)}"]
    lines.append(f"  {'':<14} {'':<7} {'measured ms':>24} {'predicted ms':>24} {'change':>10}")
    for name, measured, predicted in (
        ("first audible", [p.measured_audible_ns for p in predictions], [p.audible_ns for p in predictions]),
        ("whole turn", [p.measured_whole_ns for p in predictions], [p.whole_ns for p in predictions]),
    ):
        for q, label in ((0.5, "median"), (0.9, "P90")):
            m, pr = _with_interval(measured, q, f"measured|{name}"), _with_interval(predicted, q, f"predicted|{name}")
            change = quantile(np.asarray(predicted) / 1e6, q) - quantile(np.asarray(measured) / 1e6, q)
            lines.append(f"  {name:<14} {label:<7} {m:>24} {pr:>24} {change:>+10.1f}")
    return "\n".join(lines)


def _with_interval(values_ns: Sequence[int], q: float, name: str) -> str:
    values = np.sort(np.asarray(values_ns, dtype=np.float64) / 1e6)
    ci = quantile_interval(values, q, name)
    around = f" [{ci.low:.0f}, {ci.high:.0f}]" if ci is not None else ""
    return f"{quantile(values, q):.1f}{around}"


def _write_paths(path: Path, g: Graphs) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(paths_csv(map(path_row, g.graphs)), encoding="utf-8")


if __name__ == "__main__":
    raise SystemExit(main())
