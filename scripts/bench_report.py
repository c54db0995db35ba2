"""How long the report takes, and how much memory, for a large experiment.

    .venv/bin/python scripts/bench_report.py [--span-turns 100000] [--baseline DIR] [--turns 100000]
                                             [--no-tracemalloc] [--analyze]

1. From trace files (issue 12: 100,000 turns to a finished report in under 10 s, reading
   included): the committed fixture traces copied (new ids, later rounds, later times) to
   ``--span-turns`` turns, then, in a fresh interpreter, the files read into rows and the whole
   report built and written. The goal is held to that whole process, as a user timing the command
   waits for it (interpreter start, imports and exit included), not to the sum of its steps.
   With ``--baseline DIR``, another checkout of this project (for the code before a change:
   ``git worktree add /tmp/base <commit>``), the same files go through that checkout's code the
   same way, and both are printed side by side with whether their bench.csv and report.md came
   out the same. Before each measured run what was written is flushed to disk and the files are
   read once, both untimed, so no run shares the CPU with the kernel's write-back and both find
   the files in the page cache: on this shared VM reading them from disk took 40 MiB/s one hour
   and the cache 4,500 MiB/s the next, and that is not the report's work. That read's own speed
   is printed beside it.
   With ``--analyze``, ``python -m pipeline.analyze`` of the same files too (each checkout's, in a
   fresh interpreter): its time, CPU time and peak memory, and whether the bench.csv it writes is the
   report's. No goal: it shows what a user recomputing a fleet's rows waits for.
2. From rows: ``--turns`` synthetic turns (A, B, B' in equal parts, 30 questions per round,
   round 1 warm-up, 1 % failures, B and B' with server timings, B with a temperature) built
   directly as bench rows, then the whole report: statistics, plots, Markdown, HTML and
   bench.csv written to a temporary folder. Goal: under 10 s on the 2-core machine.

Peak memory is the process's maximum resident size (``ru_maxrss``) before and after each
step, and, in a separate untimed pass, the peak of Python allocations seen by tracemalloc
during the report (tracemalloc slows allocation down, so its pass is not timed). Every
measurement prints the machine's load average beside it, and, for the trace files, the time a
fixed piece of work no checkout's code takes part in took just before and after it: on this
shared VM the same work ran a third slower some minutes than others, with nothing else
running, and a figure means little without the machine's speed at the time.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The checkout whose code is measured: this one, or, in a child run for --baseline, the one given.
CODE = Path(os.environ.get("BENCH_REPORT_CODE", str(ROOT)))
sys.path.insert(0, str(CODE))

# The parts (scripts/report_bench/) import the report's code where they use it, after the path set-up,
# and not in a --child run: that one imports what ``python -m pipeline.report`` imports, when it does.
from report_bench.fresh_runs import STEPS, analyze, child, measure, rows_file, same_bytes  # noqa: E402
from report_bench.machine import SPEED_LINES, load_text, timed  # noqa: E402
from report_bench.synthetic_rows import rows_step  # noqa: E402
from report_bench.trace_copies import spread_traces  # noqa: E402

GOAL_S = 10.0
STEP_NAMES = {
    "read": "trace files read, rows computed",
    "build": "statistics, tables and plots",
    "write": "Markdown, HTML and rows.csv written",
}


def analyze_step(traces: Path, work: Path, codes: dict[str, Path]) -> None:
    """``pipeline.analyze`` of the same trace files by each checkout, side by side (no goal: for comparison)."""
    runs = {name: analyze(code, traces, work / f"analyze-{i}.csv") for i, (name, code) in enumerate(codes.items())}
    print("python -m pipeline.analyze of the same files, bench.csv written (no goal)")
    print(f"  {'':<44}" + "".join(f"{name:>16}" for name in runs))
    print(f"  {'wall time':<44}" + "".join(f"{r['seconds']:14.2f} s" for r in runs.values()))
    print(
        f"  {'CPU time, its children too (user + system)':<44}" + "".join(f"{r['cpu']:14.2f} s" for r in runs.values())
    )
    print(f"  {'peak RSS (its largest process)':<44}" + "".join(f"{r['rss_mib']:12.0f} MiB" for r in runs.values()))
    for name, r in runs.items():
        before, after = r["speed"]
        print(
            f"  {name}: {r['rows']} rows, exit status {r['status']}; the machine's speed {before:.0f} ms just before, "
            f"{after:.0f} ms just after"
        )
    files = [work / f"analyze-{i}.csv" for i in range(len(runs))]
    print(f"  its bench.csv and the report's of this checkout: {same_bytes(files[0], rows_file(work / 'after'))}")
    if len(files) > 1:
        print(f"  its bench.csv of this checkout and of the baseline: {same_bytes(files[0], files[1])}")


def spans_step(turns: int, work: Path, baseline: Path | None) -> float:
    """Part 1: trace files -> finished report, this checkout (and the baseline); this one's whole process."""
    traces = work / "traces"
    traces.mkdir()
    written, _ = timed("trace files written (not counted)", lambda: spread_traces(turns, traces))
    # on disk before anything is measured: the kernel writing a gigabyte of dirty pages back in the
    # background took the CPU from the first run measured after it (its speed check: 250 ms, not 140)
    timed("trace files flushed to disk (not counted)", os.sync)
    size = sum(f.stat().st_size for f in traces.iterdir()) / 2**20
    print(f"  {written} turns in {size:.0f} MiB of trace files")
    runs = {"this checkout": measure(CODE, traces, work / "after")}
    if baseline is not None:
        runs["baseline"] = measure(baseline, traces, work / "before")
    print(f"  {'':<44}" + "".join(f"{name:>16}" for name in runs))
    for step in STEPS:
        print(f"  {STEP_NAMES[step]:<44}" + "".join(f"{r['seconds'][step]:14.2f} s" for r in runs.values()))
    totals = {name: float(sum(r["seconds"].values())) for name, r in runs.items()}
    print(f"  {'total, reading included':<44}" + "".join(f"{t:14.2f} s" for t in totals.values()))
    print(
        f"  {'the whole process (start, imports, exit)':<44}"
        + "".join(f"{r['process']:14.2f} s" for r in runs.values())
    )
    print(
        f"  {'CPU time, its children too (user + system)':<44}" + "".join(f"{r['cpu']:14.2f} s" for r in runs.values())
    )
    print(f"  {'processes that read the trace files':<44}" + "".join(f"{r['readers']:16d}" for r in runs.values()))
    print(f"  {'peak RSS':<44}" + "".join(f"{r['rss_mib']:12.0f} MiB" for r in runs.values()))
    print(
        f"  {'peak RSS of its largest child':<44}" + "".join(f"{r['child_rss_mib']:12.0f} MiB" for r in runs.values())
    )
    for name, r in runs.items():
        print(f"  {name}: {r['rows']} rows in its rows file, exit status {r['status']}; {r['load']} after its run")
        print(f"  {name}: {r['warmed']} (not counted)")
        before, after = r["speed"]
        print(
            f"  {name}: the machine's speed, a fixed piece of work ({SPEED_LINES} trace lines decoded by the "
            f"standard library, lower is faster): {before:.0f} ms just before its run, {after:.0f} ms just after"
        )
    if baseline is not None:
        same = same_bytes(rows_file(work / "after"), rows_file(work / "before"))
        print(f"  the rows (rows.csv or bench.csv) of this checkout and of the baseline: {same}")
        same = same_bytes(work / "after" / "report.md", work / "before" / "report.md")
        print(f"  report.md of this checkout and of the baseline: {same}")
    # the goal is the command's, as a user times it: start, imports and exit included
    return float(runs["this checkout"]["process"])


def verdict(total: float, what: str) -> str:
    """Whether ``total`` met the goal, in words."""
    return f"verdict: {'met' if total < GOAL_S else 'MISSED'} the {GOAL_S:.0f} s goal for {what} ({total:.2f} s)"


def main() -> int:
    """Both measurements (or the child run a parent started), and their verdicts."""
    if sys.argv[1:2] == ["--child"]:
        child(Path(sys.argv[2]), Path(sys.argv[3]))
        return 0
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--span-turns", type=int, default=100_000, help="0 skips the from-trace-files measurement")
    p.add_argument("--baseline", type=Path, help="another checkout: its code measured on the same trace files")
    p.add_argument("--turns", type=int, default=100_000, help="synthetic rows; 0 skips the from-rows measurement")
    p.add_argument("--no-tracemalloc", action="store_true", help="skip the untimed tracemalloc pass")
    p.add_argument("--analyze", action="store_true", help="also time python -m pipeline.analyze of the trace files")
    args = p.parse_args()
    verdicts = []
    print(f"machine: {os.cpu_count()} CPUs, {load_text()}")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        if args.span_turns:
            print(
                f"report from {args.span_turns} turns of trace files, reading included (goal: the whole process "
                f"under {GOAL_S:.0f} s)"
            )
            total = spans_step(args.span_turns, work, args.baseline)
            verdicts.append(verdict(total, f"{args.span_turns} turns from trace files"))
            if args.analyze:
                codes = {"this checkout": CODE, **({"baseline": args.baseline} if args.baseline else {})}
                analyze_step(work / "traces", work, codes)
        if args.turns:
            print(f"report from {args.turns} synthetic rows (goal: under {GOAL_S:.0f} s)")
            total = rows_step(args.turns, work, not args.no_tracemalloc)
            verdicts.append(verdict(total, f"{args.turns} synthetic rows"))
    print("\n".join(verdicts))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
