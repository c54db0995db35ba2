"""What an on-device LLM costs its neighbours: the same audio's VAD, ASR and TTS with the LLM in the
pipeline's process, in its own process, and in the (emulated) cloud, interleaved turn by turn.

Three lanes on the same questions, each a ``pipeline.replay`` process kept warm and told when to take
each turn (``pipeline.run.interleave``: A B Bs | Bs B A | ...), so that the machine's drift falls on
all three alike (METHOD M15):

- ``A``: configs/local.toml with the LLM in the emulated cloud (``fast-70b-api``, no compute here);
- ``B``: configs/local.toml, the LLM in-process (llama.cpp, its threads beside the ASR's);
- ``Bs``: the same model in llama.cpp's own ``llama-server`` process (``[llm] impl = "server"``).

Printed: each shared stage lane against lane, median difference with its 95 % bootstrap interval;
B against Bs is the in-process LLM's cost to its neighbours (the same words, so TTS compares too);
B against A is what moving the LLM onto the device costs them here (different words: TTS is not
comparable). Then what each lane's process used while it waited through the others' turns (a warm
process should use nothing), and the LLM's own first token in B and Bs.

Run on a quiet machine: ``.venv/bin/python scripts/bench_neighbours.py [--limit 8] [--rounds 3]``.
Every figure is measured wall-clock time on this machine (M12); the load is printed before and after.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from labtools.whatif_bench.lanes import together
from pipeline.analysis.shared_stages import CPU_STAGES, HEADER, STAGES, moved, spent, waves
from pipeline.records.bench_csv import read_bench_csv

ROOT = Path(__file__).resolve().parent.parent

FIXTURES = ROOT / "audio_fixtures"
LOCAL = ROOT / "configs" / "local.toml"
PAIRS = (("B", "Bs", tuple(STAGES)), ("B", "A", ("VAD", "ASR")), ("Bs", "A", ("VAD", "ASR")))


def lane_configs(out: Path) -> dict[str, list[Path]]:
    cloud = out / "a.toml"
    cloud.write_text(
        '[llm]\nimpl = "openai"\nmodel = "emulated-cloud"\n[cloud]\nemulator = "fast-70b-api"\n'
        '[network]\nprofile = "internet"\n',
        encoding="utf-8",
    )
    server = out / "bs.toml"
    server.write_text('[llm]\nimpl = "server"\n', encoding="utf-8")
    return {"A": [LOCAL, cloud], "B": [LOCAL], "Bs": [LOCAL, server]}


def command(name: str, configs: Sequence[Path], args: argparse.Namespace, out: Path) -> list[str]:
    cmd = [sys.executable, "-m", "pipeline.replay", str(args.fixtures), "--quiet", "--run-id", f"neighbours-{name}"]
    for c in configs:
        cmd += ["--config", str(c)]
    condition = "A" if name == "A" else "B"
    return [*cmd, "--condition", condition, "--rounds", str(args.rounds), "--limit", str(args.limit), "--out", str(out)]


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--fixtures", type=Path, default=FIXTURES)
    p.add_argument("--limit", type=int, default=8, help="the first N questions")
    p.add_argument("--rounds", type=int, default=3, help="rounds per lane; the first is the warm-up (M6)")
    p.add_argument("--out", type=Path, help="where the runs go (default: a new folder under /tmp, removed after)")
    args = p.parse_args(argv)
    if args.rounds < 2 or args.limit < 1:
        p.error("--rounds must be at least 2 (the first is a warm-up) and --limit at least 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    out: Path = args.out or Path(tempfile.mkdtemp(prefix="bench_neighbours_", dir="/tmp"))
    out.mkdir(parents=True, exist_ok=True)
    try:
        return run(args, out)
    finally:
        if args.out is None:
            shutil.rmtree(out, ignore_errors=True)


def run(args: argparse.Namespace, out: Path) -> int:
    lanes = {name: command(name, configs, args, out / name) for name, configs in lane_configs(out).items()}
    print(f"{args.limit} question(s) x {args.rounds} round(s) (round 1 warm-up); cpus {os.cpu_count()}")
    together(lanes, {name: out / name for name in lanes}, "interleaved")  # exits, naming a lane that failed
    rows = {name: read_bench_csv(out / name / "bench.csv") for name in lanes}
    print("\nthe stages the lanes share: median difference, 95 % CI")
    print(HEADER)
    for x, base, stages in PAIRS:
        for stage in stages:
            m = moved(x, rows[x], base, rows[base], stage, STAGES[stage])
            print(m.line() if m else f"  {x} - {base:<4}{stage:<8}  fewer than 2 values on a side")
        for stage, column in CPU_STAGES.items():
            m = moved(x, rows[x], base, rows[base], stage, column)
            print(m.line() if m else f"  {x} - {base:<4}{stage:<8}  no CPU figures")
    print("what the shared stages spent, per lane (medians; steal summed):")
    print("\n".join(spent(rows)))
    w = waves(list(rows.values()), STAGES["ASR"])
    print("the machine's speed over the run:\n" + (w.line("ASR") if w else "  too few turns"))
    print("\nthe LLM itself (first LLM request -> first token), in-process against its own process:")
    m = moved("B", rows["B"], "Bs", rows["Bs"], "LLM", "first_token_ms")
    print(HEADER.replace("stage", "     ") if m else "  fewer than 2 values on a side")
    if m:
        print(m.line())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
