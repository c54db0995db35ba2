"""The benchmark's runs of ``pipeline.replay``: one at a time, or several interleaved turn by turn
(``pipeline.run.interleave``), the load before and after each; and the stages the lanes share."""

from __future__ import annotations

import argparse
import io
import os
import shlex
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from pipeline.analysis.shared_stages import CPU_STAGES, HEADER, STAGES, moved, spent, waves
from pipeline.analysis.traces import trace_files
from pipeline.records.bench_csv import read_bench_csv
from pipeline.run.interleave import conduct, described

ROOT = Path(__file__).resolve().parent.parent.parent


def load() -> str:
    return "load average {:.2f} {:.2f} {:.2f}".format(*os.getloadavg())


def replay_command(
    folder: Path, out: Path, configs: Sequence[Path], args: argparse.Namespace, run_id: str, extra: Sequence[str] = ()
) -> list[str]:
    cmd = [".venv/bin/python", "-m", "pipeline.replay", str(folder)]
    for c in configs:
        cmd += ["--config", str(c)]
    return [*cmd, "--rounds", str(args.rounds), "--out", str(out), "--run-id", run_id, "--quiet", *extra]


def replay(
    folder: Path, out: Path, configs: Sequence[Path], args: argparse.Namespace, run_id: str, extra: Sequence[str] = ()
) -> list[Path]:
    """One run of ``pipeline.replay``; returns its trace files."""
    cmd = replay_command(folder, out, configs, args, run_id, extra)
    print(f"\n$ {shlex.join(cmd)}\n  before: {load()}", flush=True)
    began = time.monotonic()
    done = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    took = f"{time.monotonic() - began:.0f} s"
    print(f"  after:  {load()}\n  exit status {done.returncode} after {took}; " + _summary(done.stdout), flush=True)
    if done.returncode != 0:
        raise SystemExit(f"{run_id} failed (exit status {done.returncode}):\n{done.stdout}")
    return trace_files(out / "traces")


def together(lanes: dict[str, list[str]], outs: dict[str, Path], order: str) -> dict[str, list[Path]]:
    """The lanes' runs, interleaved turn by turn (or one after another); each one's trace files."""
    if order == "sequential":
        for name, cmd in lanes.items():
            print(f"\n$ {shlex.join(cmd)}\n  before: {load()}", flush=True)
            if subprocess.run(cmd, cwd=ROOT, stdout=subprocess.DEVNULL).returncode != 0:
                raise SystemExit(f"{name} failed")
        return {name: trace_files(outs[name] / "traces") for name in lanes}
    print(f"\ninterleaved turn by turn: {described(list(lanes))}")
    for name, cmd in lanes.items():
        print(f"  {name}: $ {shlex.join(cmd)}")
    print(f"  before: {load()}", flush=True)
    began = time.monotonic()
    quiet = io.StringIO()  # each run's summary table: the benchmark prints its own figures
    codes = conduct(lanes, ROOT, lambda m: print(f"  {m}", flush=True), quiet)
    print(f"  after:  {load()}; {time.monotonic() - began:.0f} s; exit status {codes}", flush=True)
    failed = [name for name, code in codes.items() if code != 0]
    if failed:
        raise SystemExit(f"{', '.join(failed)} failed:\n{quiet.getvalue()}")
    return {name: trace_files(outs[name] / "traces") for name in lanes}


def _summary(stdout: str) -> str:
    return next((line.strip() for line in stdout.splitlines() if line.startswith("run ")), "no summary line")


def shared_stages(outs: dict[str, Path], pairs: Sequence[tuple[str, str]], keep: set[str]) -> list[str]:
    """The stages the lanes share (the same components, audio and, A speaking B's words, text), lane
    against lane: median difference with its 95 % interval. Returns those found beyond it, but for
    B's TTS against A's: B's LLM generates beside it in the same process, so their difference is the
    on-device LLM's cost to a neighbour (M17), which the what-if carries with the LLM
    (``carries_neighbours``): shown, not counted as a confounder. The VAD and the ASR are."""
    rows = {n: [r for r in read_bench_csv(folder / "bench.csv") if r.question_id in keep] for n, folder in outs.items()}
    print("\nthe stages the runs share: median difference, 95 % CI (METHOD M15: they should not move)")
    print(HEADER)
    found = []
    for x, base in pairs:
        for stage, column in STAGES.items():
            m = moved(x, rows[x], base, rows[base], stage, column)
            beside = stage == "TTS" and (x[0] == "B") != (base[0] == "B")
            note = (
                "  (B's LLM generates beside it: its cost to a neighbour, M17; the what-if carries it)"
                if beside
                else ""
            )
            print((m.line() if m else f"  {x} - {base:<4}{stage:<8}  fewer than 2 values on a side") + note)
            if m is not None and m.beyond and not beside:
                found.append(f"{x} - {base} {stage} {m.difference:+.1f} ms")
        for stage, column in CPU_STAGES.items():  # what explains a move: the same work, or waiting
            m = moved(x, rows[x], base, rows[base], stage, column)
            print(m.line() if m else f"  {x} - {base:<4}{stage:<8}  no CPU figures")
    print("what the shared stages spent, per lane (medians; steal summed):")
    print("\n".join(spent(rows)))
    print("the machine's speed over the run (what a sequential run would have put on one condition):")
    w = waves(list(rows.values()), STAGES["ASR"])
    print(w.line("ASR") if w else "  too few turns")
    return found
