"""The queue segment under load, in one run, printed side by side.

    .venv/bin/python scripts/bench_load.py [--devices 1,2,4] [--limit 3] [--rounds 2]

1. Devices against one model: N concurrent emulated devices (together, rotated question
   orders) replay the packaged fixtures through the real pipeline code, with the voice
   stages scripted (oracle ASR, stub TTS: the model is what is shared) and the LLM either
   the local one (qwen2.5-coder-0.5b in-process, the scheduler in front, one call at a time) or the
   emulated cloud (its own FIFO slots, 8 for fast-70b-api, and its own reported queue time).
   Printed per N: queue wait and whole-turn P90 over measured turns (warm-up round out).
   Queue for the local model is the scheduler's own measurement (``queue_wait_ms``); for the
   cloud it is what the emulated server reports (``server_queue_ms``).
2. Background load: one device, the local model, a summarisation job every ``--period-ms``,
   interactive P90 (queue wait and whole turn) with priority classes on and off; the ratio
   is the figure.

Every point is a whole ``pipeline.replay`` run with its own run id and config_id; bench.csv
and traces stay in ``--out`` for the report. Run it on a quiet machine: llama.cpp with
threads = cores slows several-fold when anything else runs.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import time
from pathlib import Path

from pipeline.analysis.numbers import measured_ok, quantile
from pipeline.records.bench_csv import read_bench_csv
from pipeline.records.turn_row import TurnRow, column
from pipeline.replay import main as replay

ROOT = Path(__file__).resolve().parent.parent

FIXTURES = ROOT / "audio_fixtures"
VOICE = (
    '[asr]\nimpl = "oracle"\n[tts]\nimpl = "stub"\n[vad]\nimpl = "energy"\n'
    '[run]\npacing = "realtime"\nturn_timeout_s = 120\n'
)
LOCAL = '[llm]\nimpl = "llama"\nmodel = "qwen2.5-coder-0.5b"\nmax_tokens = 48\n[scheduler]\nconcurrency = 1\n'
CLOUD = '[run]\ncondition = "A"\n[llm]\nimpl = "openai"\nmodel = "emulated-cloud"\nmax_tokens = 48\n'
CLOUD += '[cloud]\nemulator = "fast-70b-api"\n'


def p90(rows: list[TurnRow], name: str) -> float | None:
    get = column(name)
    values = [float(v) for r in rows if measured_ok(r) and isinstance(v := get(r), (int, float))]
    return round(quantile(values, 0.9), 1) if values else None


def point(out: Path, run_id: str, configs: list[str], args: list[str]) -> list[TurnRow]:
    """One replay run; its rows (the run's own, from bench.csv)."""
    paths = []
    for i, text in enumerate(configs):
        path = out / f"{run_id}-{i}.toml"
        path.write_text(text)
        paths += ["--config", str(path)]
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        code = replay([str(FIXTURES), *paths, "--out", str(out), "--run-id", run_id, "--quiet", *args])
    if code != 0:
        raise SystemExit(f"{run_id}: replay failed ({code}): {err.getvalue().strip()}")
    return [r for r in read_bench_csv(out / "bench.csv") if r.run_id == run_id]


def cell(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def devices_part(out: Path, counts: list[int], common: list[str]) -> None:
    print("1. Devices against one model (P90 over measured turns, ms)")
    print(f"{'devices':>8} {'local queue':>12} {'local turn':>11} {'cloud queue':>12} {'cloud turn':>11} {'turns':>6}")
    for n in counts:
        local = point(out, f"load-local-{n}", [VOICE, LOCAL], [*common, "--devices", str(n)])
        cloud = point(out, f"load-cloud-{n}", [VOICE, CLOUD], [*common, "--devices", str(n)])
        print(
            f"{n:>8} {cell(p90(local, 'queue_wait_ms')):>12} {cell(p90(local, 'whole_turn_ms')):>11} "
            f"{cell(p90(cloud, 'server_queue_ms')):>12} {cell(p90(cloud, 'whole_turn_ms')):>11} "
            f"{sum(map(measured_ok, local))}+{sum(map(measured_ok, cloud))}",
            flush=True,
        )


def background_part(out: Path, period_ms: int, common: list[str]) -> None:
    print(f"2. One device, the local model, a summarisation job every {period_ms} ms (interactive P90, ms)")
    figures = {}
    for priority in (True, False):
        extra = f'[scheduler]\npriority = {str(priority).lower()}\n[background]\njob = "summarise"\n'
        extra += f"period_ms = {period_ms}\nmax_tokens = 64\n"
        rows = point(out, f"load-background-priority-{priority}".lower(), [VOICE, LOCAL, extra], common)
        figures[priority] = (p90(rows, "queue_wait_ms"), p90(rows, "whole_turn_ms"))
        measured = [r for r in rows if not r.warmup]
        print(
            f"   priority {'on ' if priority else 'off'}: queue {cell(figures[priority][0])}, "
            f"whole turn {cell(figures[priority][1])} (ok {sum(map(measured_ok, rows))}/{len(measured)} measured)",
            flush=True,
        )
    (q_on, t_on), (q_off, t_off) = figures[True], figures[False]
    if q_on is not None and q_off:
        print(f"   queue P90 with priority / without: {q_on / q_off:.3f}x")
    if t_on is not None and t_off:
        print(f"   whole-turn P90 with priority / without: {t_on / t_off:.3f}x")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--devices", default="1,2,4", help="device counts, comma-separated")
    p.add_argument("--limit", type=int, default=3, help="questions per device")
    p.add_argument("--rounds", type=int, default=2, help="rounds (the first is a warm-up)")
    # a summarisation job takes about 3.2 s on the local model here (2 cores, quiet): one every 3 s
    # keeps the model just past full, so jobs queue up behind each other as on a busy device
    # (every 1.5 s the backlog outgrows the run and voice turns time out without priority)
    p.add_argument("--period-ms", type=int, default=3000, help="background job period")
    p.add_argument("--out", type=Path, help="where runs, traces and bench.csv go (default: bench-load/<time>)")
    p.add_argument("--skip-devices", action="store_true", help="only the background-load part")
    p.add_argument("--skip-background", action="store_true", help="only the devices part")
    args = p.parse_args()
    args.out = args.out or Path("bench-load") / time.strftime("%Y%m%d-%H%M%S")
    args.out.mkdir(parents=True, exist_ok=True)
    common = ["--limit", str(args.limit), "--rounds", str(args.rounds)]
    started = time.perf_counter()
    if not args.skip_devices:
        devices_part(args.out, [int(n) for n in args.devices.split(",")], common)
    if not args.skip_background:
        background_part(args.out, args.period_ms, common)
    print(f"({time.perf_counter() - started:.0f} s; rows and traces in {args.out})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
