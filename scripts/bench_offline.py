"""What the B' proof costs: condition B, and B' (the same replay in a network namespace, under strace and
the audit hook), with the same settings, side by side in one run: first token, TTS first frame, whole turn.

B' is run as by default (strace without stacks) and with ``--stacks`` (strace -k, which names the
library behind a native attempt): the variants alternate (B, B', B' --stacks, B, ...) so that a slow
spell of the machine does not land on one of them; each figure is the median over all measured
successful turns of that variant.

Run on a quiet machine, as root: ``python scripts/bench_offline.py [--limit N] [--rounds N] [--repeats N]``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from pipeline.analysis.numbers import measured_ok, median
from pipeline.records.bench_csv import read_bench_csv
from pipeline.records.turn_row import TurnRow, column

ROOT = Path(__file__).resolve().parent.parent

METRICS = ("first_token_ms", "tts_first_frame_ms", "whole_turn_ms", "asr_ms")
VARIANTS = {
    "B": ["-m", "pipeline.replay", "--condition", "B"],
    "Bp": ["-m", "pipeline.offline"],
    "Bp-stacks": ["-m", "pipeline.offline", "--stacks"],
}


def run(variant: str, out: Path, repeat: int, args: argparse.Namespace) -> None:
    common = ["audio_fixtures", "--limit", str(args.limit), "--rounds", str(args.rounds), "--out", str(out / variant)]
    common += ["--run-id", f"{variant}-{repeat}", "--quiet"]
    done = subprocess.run([sys.executable, *VARIANTS[variant], *common], cwd=ROOT, env=os.environ.copy())
    if done.returncode not in (0, 3):
        raise SystemExit(f"{variant} failed with exit status {done.returncode}")


def values(rows: list[TurnRow], metric: str) -> list[float]:
    get = column(metric)
    return [float(v) for r in rows if measured_ok(r) and isinstance((v := get(r)), (int, float))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    rows: dict[str, list[TurnRow]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for repeat in range(args.repeats):
            for variant in VARIANTS:
                run(variant, Path(tmp), repeat, args)
        for variant in VARIANTS:
            rows[variant] = read_bench_csv(Path(tmp) / variant / "bench.csv")
    print(f"B vs B' (same settings, {args.limit} questions x {args.rounds} rounds x {args.repeats} repeats each)")
    print(
        "  measured successful turns: " + ", ".join(f"{v} {len(values(r, 'whole_turn_ms'))}" for v, r in rows.items())
    )
    heads = ("median", "B", "B'", "B' --stacks", "B'/B", "stacks/B")
    print(f"  {heads[0]:<20}{heads[1]:>10}{heads[2]:>10}{heads[3]:>13}{heads[4]:>8}{heads[5]:>10}")
    for metric in METRICS:
        b, bp, bk = (values(rows[v], metric) for v in VARIANTS)
        if b and bp and bk:
            mb, mp, mk = median(b), median(bp), median(bk)
            print(f"  {metric:<20}{mb:>8.1f}ms{mp:>8.1f}ms{mk:>11.1f}ms{mp / mb:>7.3f}x{mk / mb:>9.3f}x")


if __name__ == "__main__":
    main()
