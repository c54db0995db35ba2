"""Does the what-if tell the truth? Condition A predicted from condition B's traces, against A measured.

1. B0, the packaged default (configs/local.toml), on the first N fixture questions that expect no
   tool, one warm-up and one measured round: its measured answers become a derived question set
   (DIR/questions_A: the same audio, symlinked; ``text`` = B0's transcript, the key the emulated
   cloud looks answers up by; ``answer`` = B0's sentences joined), so the emulated cloud answers A
   with B's very words.
2. B, A2 and A1 on that set, **interleaved turn by turn** (``pipeline.run.interleave``: each run's
   process started at once and kept warm, the turns taken B A2 A1 | A1 A2 B | ...), so whatever
   slows the machine over the minutes falls on all three alike, and the two runs the what-if holds
   against each other (B and A2) take neighbouring turns in every block, where the machine's speed
   has had the least time to wander (``--order sequential``: one run
   after another, the old way). A (emulated cloud ``fast-70b-api`` behind a link profile, the same
   VAD, ASR and TTS) twice: A1 gives the LLM segments, A2 is the truth. A predicted = B's graphs
   with A1's LLM segments (``--swap llm=A1``), against A2 measured: first audible and whole turn,
   medians and P90s.
3. The other way: B predicted from A2's graphs with B's LLM segments, against B measured (the run
   the segments came from; ``--independent`` runs B2, interleaved too, as the truth).
4. The stages the runs share (VAD, ASR and TTS: the same components on the same audio and, A
   answering with B's words, the same text), run against run: median difference with its 95 %
   bootstrap interval. A difference beyond its interval means something other than the LLM moved
   (METHOD M15): the what-if's error is then partly the machine's.
5. Where a median misses (off by more than 5 %, or outside the measured run's interval): per
   segment, the median of (measured - predicted) along that target's critical path, which names
   the interaction the graph lacks, or the stage that ran slower in one run than in the other.

The emulated cloud draws its delays from a fixed seed, request by request, so A1's LLM segments
are A2's to within the scheduling of the event loop: the benchmark tests the graph (how the
rest of the pipeline moves around the LLM), not the cloud's spread.

Left out, with the reason printed: questions where B's model called a tool (after a tool the
emulated cloud always says its fixed TOOL_DONE, answers.py, never B's words), where the emulated
cloud would call a tool on B's transcript (answers.pick_tool), and where B never succeeded.

Run on a quiet machine: ``.venv/bin/python scripts/bench_whatif.py [--limit 6] [--rounds 3]``.
Every figure is wall-clock time; predictions are labelled predicted, runs measured (M12).
"""

from __future__ import annotations

import argparse
import csv
import os
import shutil
import tempfile
import tomllib
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

# The parts (labtools/whatif_bench/) import the lab's code
from labtools.whatif_bench.lanes import replay, replay_command, shared_stages, together
from labtools.whatif_bench.words import EMULATOR, a_config, choose, manifest_rows, observe, question_set
from pipeline.analysis.bootstrap import Interval, quantile_interval
from pipeline.analysis.numbers import median, quantile
from pipeline.analysis.path.critical import critical_path
from pipeline.analysis.path.graph import TurnGraph
from pipeline.analysis.retiming import (
    WhatIfError,
    carries_neighbours,
    partners,
    predict,
    read_graphs,
    swapped,
)
from pipeline.analysis.traces import trace_files
from pipeline.endpoints.cloud.answers import tokens_of
from pipeline.endpoints.link.profiles import PROFILES
from pipeline.records.path import SEGMENTS

ROOT = Path(__file__).resolve().parent.parent

LOCAL = ROOT / "configs" / "local.toml"
RUNS = ("questions_B", "B0", "B", "questions_A", "a.toml", "A1", "A2", "B2")  # what a benchmark writes in --out
LANES = ("B", "A1", "A2", "B2")
GOAL = 0.05  # the predicted median within 5 % of the measured one
MIN_PAIRS = 16  # and on at least this many turn pairs per direction (issue 34)
ROW = "  {:<22}{:>16}{:>14}{:>14}{:>10}{:>9}  {:<6}{}"
TARGETS: dict[str, Callable[[TurnGraph], int]] = {
    "first audible": lambda g: g.first_audible,
    "whole turn": lambda g: g.last_played,
}


def graphs(files: Sequence[Path], name: str, keep: set[str]) -> list[TurnGraph]:
    g = read_graphs(files)
    for message in g.problems:
        print(f"warning: {name}: {message}")
    failed = f"; failed, no path (M7): {', '.join(g.failed)}" if g.failed else ""
    print(f"  {name}: {len(g.graphs)} measured successful turn(s), {g.warmup} warm-up left out (M6){failed}")
    return [x for x in g.graphs if x.question_id in keep]


def with_ci(values: Sequence[float], q: float, name: str) -> tuple[float, str, Interval | None]:
    ordered = np.sort(np.asarray(values, dtype=np.float64))
    ci = quantile_interval(ordered, q, name)
    return quantile(ordered, q), f"[{ci.low:.0f}, {ci.high:.0f}]" if ci else "[n < 2]", ci


def compare(
    title: str, base: list[TurnGraph], source: list[TurnGraph], truth: list[TurnGraph], truth_name: str
) -> list[str]:
    """``base`` re-timed with ``source``'s LLM segments, against ``truth`` measured; what missed the goal
    (median within 5 % and inside the measured run's 95 % interval, on at least ``MIN_PAIRS`` turn pairs)."""
    print(f"\n== {title} ==")
    common = {g.question_id for g in base} & {g.question_id for g in source} & {g.question_id for g in truth}
    lost = sorted({g.question_id for g in (*base, *source, *truth)} - common)
    if lost:
        print(f"  left out (no successful measured turn in one of the runs): {', '.join(lost)}")
    base, source, truth = ([g for g in x if g.question_id in common] for x in (base, source, truth))
    if not base:
        print("  nothing to compare")
        return [f"{title}: nothing to compare"]
    rows: list[tuple[TurnGraph, TurnGraph, TurnGraph]] = []
    for g, o, t in zip(base, partners(base, source), partners(base, truth), strict=True):
        try:
            predict(g, (), o)
            rows.append((g, o, t))
        except WhatIfError as exc:
            print(f"  refused: {exc}")
    asked = {g.question_id for g, _, _ in rows}
    truth = [t for t in truth if t.question_id in asked]
    print(
        f"  predicted turns {len(rows)} of {len(base)}; {truth_name} measured turns {len(truth)};"
        f" questions {len(asked)}"
    )
    carried = sum(1 for g, o, _ in rows if carries_neighbours(g, o))
    if carried:
        print(f"  in {carried} turn(s) the swap brings the source run's TTS segments too (its LLM ran elsewhere)")
    if not rows:
        return [f"{title}: no turn predicted"]
    print(ROW.format("", f"measured {truth_name} ms", "its 95 % CI", "predicted ms", "error ms", "error", "in CI", ""))
    off: list[str] = []
    outside: list[str] = []
    missed: list[str] = []
    for target, point in TARGETS.items():
        predicted = [_predicted(g, o, target) / 1e6 for g, o, _ in rows]
        measured = [t.times()[point(t)] / 1e6 for t in truth]
        for q, label in ((0.5, "median"), (0.9, "P90")):
            m, ci_text, ci = with_ci(measured, q, f"{truth_name}|{target}")
            p = quantile(predicted, q)
            err = p - m
            inside = "-" if ci is None else ("yes" if ci.low <= p <= ci.high else "no")
            goal = (
                ("goal met" if abs(err) <= GOAL * m else "goal MISSED") + " (median error within 5 %)"
                if q == 0.5
                else ""
            )
            print(
                ROW.format(
                    f"{target} {label}", f"{m:.1f}", ci_text, f"{p:.1f}", f"{err:+.1f}", f"{err / m:+.1%}", inside, goal
                )
            )
            if q == 0.5 and abs(err) > GOAL * m:
                off.append(target)
            if q == 0.5 and inside != "yes":
                outside.append(target)
                missed.append(f"{target} median outside the measured run's 95 % interval")
    for target in dict.fromkeys(off + outside):  # either way it missed, the segments say where
        _segments(rows, target)
    missed += [f"{target} median off by more than 5 %" for target in off]
    if len(rows) < MIN_PAIRS:
        missed.append(f"{len(rows)} turn pairs, fewer than {MIN_PAIRS}")
    print(f"  {len(rows)} turn pair(s); goal {'MISSED: ' + '; '.join(missed) if missed else 'met'}")
    return [f"{title.split(' (')[0]}: {m}" for m in missed]


def _predicted(g: TurnGraph, o: TurnGraph, target: str) -> int:
    p = predict(g, (), o)
    return p.audible_ns if target == "first audible" else p.whole_ns


def _segments(rows: Sequence[tuple[TurnGraph, TurnGraph, TurnGraph]], target: str) -> None:
    """Per segment kind along the target's critical path: median over turns of measured - predicted."""
    point = TARGETS[target]
    diffs: dict[str, list[float]] = {k: [] for k in SEGMENTS}
    for g, o, t in rows:
        predicted = critical_path(g, point(g), swapped(g, o)).by_kind()
        measured = critical_path(t, point(t)).by_kind()
        for k in SEGMENTS:
            diffs[k].append((measured[k] - predicted[k]) / 1e6)
    print(f"  {target} missed: its critical path, measured - predicted, median over {len(rows)} turn pair(s):")
    for k in sorted(SEGMENTS, key=lambda k: -abs(median(diffs[k]))):
        if any(diffs[k]):
            print(f"    {k:<16}{median(diffs[k]):>+10.1f} ms")


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--limit", type=int, default=6, help="B's questions: the first N fixtures that expect no tool")
    p.add_argument("--rounds", type=int, default=3, help="rounds per run; the first is the warm-up (M6)")
    p.add_argument("--out", type=Path, help="where the runs go (default: a new folder under /tmp)")
    p.add_argument("--profile", default="internet", choices=sorted(PROFILES), help="condition A's link profile")
    p.add_argument("--independent", action="store_true", help="run B a second time as the truth of B predicted")
    p.add_argument("--keep", action="store_true", help="keep the default temporary folder")
    p.add_argument("--reread", type=Path, metavar="DIR", help="read an earlier benchmark's runs (its --out) again")
    p.add_argument(
        "--order",
        choices=("interleaved", "sequential"),
        default="interleaved",
        help="B, A2, A1 (and B2) taking turns, each process warm (default), or one run after another",
    )
    args = p.parse_args(argv)
    if args.rounds < 2 or args.limit < 1:
        p.error("--rounds must be at least 2 (the first is a warm-up) and --limit at least 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    if args.reread is not None:  # the runs of an earlier benchmark, read again
        evaluate(args.reread, {p.name: trace_files(p / "traces") for p in args.reread.iterdir() if p.name in LANES})
        return 0
    temporary = args.out is None
    out: Path = args.out or Path(tempfile.mkdtemp(prefix="bench_whatif_", dir="/tmp"))
    out.mkdir(parents=True, exist_ok=True)
    taken = [p.name for p in out.iterdir() if p.name in RUNS]
    if taken:
        raise SystemExit(f"{out} already holds {', '.join(taken)}: choose a new --out folder")
    print(f"output: {out}; {args.limit} question(s) x {args.rounds} round(s) (round 1 warm-up); cpus {os.cpu_count()}")
    print(f"condition A: emulated cloud {EMULATOR}, link profile {args.profile} (estimated, profiles.py)")
    try:
        run(args, out)
    finally:
        if temporary and not args.keep:
            shutil.rmtree(out, ignore_errors=True)
            print(f"removed {out} (--keep keeps it)")
    return 0


def run(args: argparse.Namespace, out: Path) -> None:
    rows = manifest_rows()
    # a tool question can never be answered alike (B's model echoes the tool's result, the emulated
    # cloud says TOOL_DONE), so B is not spent on them
    b_rows = [r for r in rows if not (r.get("tool") or "").strip()][: args.limit]
    b_set = question_set(out / "questions_B", b_rows)
    b0_files = replay(b_set, out / "B0", [LOCAL], args, "whatif-B0", ["--condition", "B", "--rounds", "2"])
    kept = choose(observe(b0_files))
    if not kept:
        raise SystemExit("no question A can answer with B's words: nothing to compare")
    a_rows = [
        {**r, "text": kept[r["id"]][0], "answer": kept[r["id"]][1], "tool": "", "tool_arguments": "{}"}
        for r in b_rows
        if r["id"] in kept
    ]
    a_set = question_set(out / "questions_A", a_rows)
    b_max = int(tomllib.loads(LOCAL.read_text(encoding="utf-8"))["llm"]["max_tokens"])
    need = max(len(tokens_of(a)) for _, a in kept.values())
    if need > b_max:  # the emulated cloud counts its own tokens: B's full answer must fit
        print(f"A's [llm] max_tokens raised to {need} (B's {b_max}) so the emulated cloud says B's whole answer")
    a_toml = a_config(out / "a.toml", args.profile, max(b_max, need))
    print(f"questions_A: {', '.join(kept)} (text = B0's transcript, answer = B0's words); {a_toml}:")
    print("  " + a_toml.read_text(encoding="utf-8").strip().replace("\n", "\n  "))
    a_args = ["--condition", "A", "--limit", "0"]
    b_args = ["--condition", "B", "--limit", "0"]
    # B and A2 side by side: the turns each what-if direction compares come one after the other
    lanes = {"B": ([LOCAL], b_args), "A2": ([LOCAL, a_toml], a_args), "A1": ([LOCAL, a_toml], a_args)}
    if args.independent:
        lanes["B2"] = ([LOCAL], b_args)
    outs = {name: out / name for name in lanes}
    commands = {n: replay_command(a_set, outs[n], c, args, f"whatif-{n}", x) for n, (c, x) in lanes.items()}
    evaluate(out, together(commands, outs, args.order))


def evaluate(out: Path, files: dict[str, list[Path]]) -> None:
    """The lanes' runs in ``out`` (their trace files): shared stages, then the what-if both ways."""
    with (out / "questions_A" / "manifest.csv").open(encoding="utf-8", newline="") as fh:
        keep = {row["id"] for row in csv.DictReader(fh)}
    outs = {name: out / name for name in files}
    print("\nturns read:")
    b, a1, a2 = graphs(files["B"], "B", keep), graphs(files["A1"], "A1", keep), graphs(files["A2"], "A2", keep)
    b2 = graphs(files["B2"], "B2", keep) if "B2" in files else b
    pairs = [("A2", "B"), ("A1", "A2")] + ([("B2", "B")] if "B2" in files else [])
    shifted = shared_stages(outs, pairs, keep)
    a_title = "A predicted from B's traces with A1's LLM segments (--swap llm=A1), against A2 measured"
    missed = compare(a_title, b, a1, a2, "A2")
    truth = "B2 (a second run of B)" if "B2" in files else "B (the same run the LLM and TTS segments came from)"
    print(f"\nthe other way: the truth is {truth}")
    b_title = "B predicted from A2's traces with B's LLM segments (--swap llm=B)"
    missed += compare(b_title, a2, b, b2, "B2" if "B2" in files else "B")
    print(f"\nwhat-if, both ways: {'goal MISSED: ' + '; '.join(missed) if missed else 'goal met'}")
    if shifted:
        print(f"warning: shared stages moved between runs (M15): {'; '.join(shifted)}: some of any error is theirs")


if __name__ == "__main__":
    raise SystemExit(main())
