"""What the B' proof costs: condition B and B' (the same replay in a network namespace, under strace and
the audit hook) with the same settings, side by side in one run: first token, TTS first frame, whole turn.

The two alternate (B, B', B, B', ...) so that a slow spell of the machine does not land on one of
them; each figure is the median over all measured successful turns of that condition.

Run on a quiet machine, as root: ``python scripts/bench_offline.py [--limit N] [--rounds N] [--repeats N]``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pipeline.analysis.bench_csv import read_bench_csv  # noqa: E402
from pipeline.analysis.numbers import Row, measured_ok, median  # noqa: E402

METRICS = ("first_token_ms", "tts_first_frame_ms", "whole_turn_ms", "asr_ms")


def run(condition: str, out: Path, run_id: str, args: argparse.Namespace) -> None:
    common = ["audio_fixtures", "--limit", str(args.limit), "--rounds", str(args.rounds), "--out", str(out)]
    common += ["--run-id", run_id, "--quiet"]
    entry = ["-m", "pipeline.offline"] if condition == "B'" else ["-m", "pipeline.replay", "--condition", "B"]
    done = subprocess.run([sys.executable, *entry, *common], cwd=ROOT, env=os.environ.copy(), capture_output=True)
    if done.returncode not in (0, 3):
        raise SystemExit(f"{condition} failed ({done.returncode}): {done.stderr.decode(errors='replace')[-2000:]}")


def values(rows: list[Row], condition: str, metric: str) -> list[float]:
    return [float(v) for r in rows if r["condition"] == condition and measured_ok(r) if (v := r[metric]) is not None]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        for i in range(args.repeats):
            for condition in ("B", "B'"):
                run(condition, out, ("Bp" if condition == "B'" else "B") + f"-{i}", args)
        rows = read_bench_csv(out / "bench.csv")
    b_turns, bp_turns = (len([r for r in rows if r["condition"] == c and measured_ok(r)]) for c in ("B", "B'"))
    print(f"B vs B' (same settings, {args.limit} questions x {args.rounds} rounds x {args.repeats} repeats each)")
    print(f"  measured successful turns: B {b_turns}, B' {bp_turns}")
    heads = ("metric", "B median", "B' median", "B'/B")
    print(f"  {heads[0]:<22}{heads[1]:>12}{heads[2]:>12}{heads[3]:>9}")
    for metric in METRICS:
        b, bp = values(rows, "B", metric), values(rows, "B'", metric)
        if b and bp:
            print(f"  {metric:<22}{median(b):>10.1f}ms{median(bp):>10.1f}ms{median(bp) / median(b):>8.3f}x")


if __name__ == "__main__":
    main()
