"""How long the report takes, and how much memory, for a large experiment.

    .venv/bin/python scripts/bench_report.py [--span-turns 100000] [--baseline DIR | --before REF]
                                             [--rounds N] [--turns 100000] [--no-tracemalloc] [--analyze]

1. From trace files (issue 12: 100,000 turns to a finished report in under 10 s, reading
   included): the committed fixture traces copied (new ids, later rounds, later times) to
   ``--span-turns`` turns, then, in a fresh interpreter, the files read into rows and the whole
   report built and written. The goal is held to that whole process, as a user timing the command
   waits for it (interpreter start, imports and exit included), not to the sum of its steps.
   With ``--baseline DIR``, another checkout of this project (for the code before a change:
   ``git worktree add /tmp/base <commit>``), the same files go through that checkout's code the
   same way, and both are printed side by side with whether their bench.csv and report.md came
   out the same. ``--before REF`` does the same with the project at a git ref (``git worktree add``
   into the temporary folder, removed afterwards): before and after in one run. ``--rounds N`` runs
   each checkout's report N times, the order turned round each round (this, baseline; baseline,
   this; ...) so the machine's drift falls on both alike; each round's times and their ratio are
   printed with the median, and every file the reports wrote is compared. Before each measured run
   what was written is flushed to disk and the files are read once, both untimed, so no run shares
   the CPU with the kernel's write-back and both find the files in the page cache: on this shared
   VM reading them from disk took 40 MiB/s one hour and the cache 4,500 MiB/s the next, and that is
   not the report's work. That read's own speed is printed beside it.
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
import statistics
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from labtools.git_worktree import checkout_at
from labtools.report_bench.fresh_runs import STEPS, analyze, child, measure, rows_file, same_bytes
from labtools.report_bench.machine import SPEED_LINES, load_text, timed
from labtools.report_bench.synthetic_rows import rows_step
from labtools.report_bench.trace_copies import spread_traces

# The parts (labtools/report_bench/) import the report's code where they use it, and not in a --child run:
# that one imports what ``python -m pipeline.report`` imports, when it does, from the checkout its parent
# put first on its PYTHONPATH (this one, or the baseline's).
ROOT = Path(__file__).resolve().parent.parent
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


def spans_step(turns: int, work: Path, baseline: Path | None, rounds: int = 1) -> float:
    """Part 1: trace files -> finished report, this checkout (and the baseline), ``rounds`` times each in
    alternating order; this one's whole process (the median over its rounds)."""
    traces = work / "traces"
    traces.mkdir()
    written, _ = timed("trace files written (not counted)", lambda: spread_traces(turns, traces))
    # on disk before anything is measured: the kernel writing a gigabyte of dirty pages back in the
    # background took the CPU from the first run measured after it (its speed check: 250 ms, not 140)
    timed("trace files flushed to disk (not counted)", os.sync)
    size = sum(f.stat().st_size for f in traces.iterdir()) / 2**20
    print(f"  {written} turns in {size:.0f} MiB of trace files")
    codes = {"this checkout": (ROOT, work / "after"), **({"baseline": (baseline, work / "before")} if baseline else {})}
    rounds_run = measured_rounds(codes, traces, rounds)
    # each checkout's median run by its whole process (of an even count, the lower middle one)
    runs = {name: sorted(done, key=lambda r: r["process"])[(len(done) - 1) // 2] for name, done in rounds_run.items()}
    if rounds > 1:
        print(f"  the median run of each checkout over {rounds} rounds, by its whole process:")
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
        print_rounds(rounds_run)
        for what, same in same_outputs(work / "after", work / "before"):
            print(f"  {what} of this checkout and of the baseline: {same}")
    # the goal is the command's, as a user times it: start, imports and exit included
    return float(runs["this checkout"]["process"])


def measured_rounds(codes: dict[str, tuple[Path, Path]], traces: Path, rounds: int) -> dict[str, list[dict[str, Any]]]:
    """Each checkout's report of ``traces`` ``rounds`` times, the checkouts' order turned round each round
    (this, baseline; baseline, this; ...) so that a machine growing slower or faster weighs on both alike."""
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in codes}
    for k in range(rounds):
        for name in list(codes) if k % 2 == 0 else list(reversed(codes)):
            code, out = codes[name]
            runs[name].append(measure(code, traces, out))
            runs[name][-1]["order"] = k
    return runs


def print_rounds(runs: dict[str, list[dict[str, Any]]]) -> None:
    """Each round's whole process of both checkouts side by side, their ratio, and the machine's speed."""
    print("  round by round (the whole process; speed: the fixed work just before each run, ms):")
    print(f"  {'round':>7}{'first':>16}{'this checkout':>16}{'baseline':>16}{'this / baseline':>18}{'speed':>14}")
    for k, (mine, base) in enumerate(zip(runs["this checkout"], runs["baseline"], strict=True)):
        first = "this checkout" if k % 2 == 0 else "baseline"
        speeds = f"{mine['speed'][0]:.0f} / {base['speed'][0]:.0f}"
        ratio = mine["process"] / base["process"]
        print(f"  {k + 1:>7}{first:>16}{mine['process']:14.2f} s{base['process']:14.2f} s{ratio:18.3f}{speeds:>14}")
    mine_s = statistics.median(r["process"] for r in runs["this checkout"])
    base_s = statistics.median(r["process"] for r in runs["baseline"])
    print(f"  {'median':>7}{'':>16}{mine_s:14.2f} s{base_s:14.2f} s{mine_s / base_s:18.3f}")


def same_outputs(mine: Path, base: Path) -> list[tuple[str, str]]:
    """Whether each file the two reports wrote holds the same bytes (their last rounds'), in words."""
    plots = sorted({p.name for out in (mine, base) for p in (out / "plots").glob("*.png")})
    return [
        ("the rows (rows.csv or bench.csv)", same_bytes(rows_file(mine), rows_file(base))),
        ("report.md", same_bytes(mine / "report.md", base / "report.md")),
        ("report.html", same_bytes(mine / "report.html", base / "report.html")),
        *((f"plots/{name}", same_bytes(mine / "plots" / name, base / "plots" / name)) for name in plots),
    ]


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
    p.add_argument(
        "--before", metavar="REF", help="as --baseline, the project at git ref REF (a worktree, removed after)"
    )
    p.add_argument("--rounds", type=int, default=1, help="runs of each checkout's report, in alternating order")
    p.add_argument("--turns", type=int, default=100_000, help="synthetic rows; 0 skips the from-rows measurement")
    p.add_argument("--no-tracemalloc", action="store_true", help="skip the untimed tracemalloc pass")
    p.add_argument("--analyze", action="store_true", help="also time python -m pipeline.analyze of the trace files")
    args = p.parse_args()
    if args.before and args.baseline:
        p.error("give --baseline DIR or --before REF, not both")
    if args.rounds < 1:
        p.error("--rounds must be at least 1")
    verdicts = []
    print(f"machine: {os.cpu_count()} CPUs, {load_text()}")
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        work = Path(tmp)
        if args.before:
            args.baseline = stack.enter_context(checkout_at(ROOT, args.before, work / "checkout-before"))
        if args.span_turns:
            print(
                f"report from {args.span_turns} turns of trace files, reading included (goal: the whole process "
                f"under {GOAL_S:.0f} s)"
            )
            total = spans_step(args.span_turns, work, args.baseline, args.rounds)
            verdicts.append(verdict(total, f"{args.span_turns} turns from trace files"))
            if args.analyze:
                codes = {"this checkout": ROOT, **({"baseline": args.baseline} if args.baseline else {})}
                analyze_step(work / "traces", work, codes)
        if args.turns:
            print(f"report from {args.turns} synthetic rows (goal: under {GOAL_S:.0f} s)")
            total = rows_step(args.turns, work, not args.no_tracemalloc)
            verdicts.append(verdict(total, f"{args.turns} synthetic rows"))
    print("\n".join(verdicts))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
