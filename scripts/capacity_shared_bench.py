"""Centralised against distributed, measured (METHOD M21 (3)): one shared LLM serving N devices against every
device with its own LLM; the silence against N and the headcount where the two cross.

    .venv/bin/python scripts/capacity_shared_bench.py [--cloud-steps 1,16,32,48] [--hub-steps 1,2,3]
        [--hub-slots 2] [--hold 40s] [--min-turns 5] [--out DIR]
    .venv/bin/python scripts/capacity_shared_bench.py --read DIR     # print a measured folder again

Three ramps of ``python -m pipeline.capacity`` against ``python -m pipeline.serve`` (each server its own
process, on loopback), the voice stages the lab's fixed stand-ins (oracle ASR, stub TTS, energy VAD) so that
what is shared is the LLM, the same questions and users (think 3 s, realtime microphone) every time:

- cloud: the emulated cloud, compute profile ``busy`` (2 slots and a FIFO queue; its latencies are
  scripted estimates), behind the ``internet`` network profile: condition A, one model for everyone;
- hub: llama-server with ``--parallel K`` slots on the local model (qwen2.5-coder-0.5b): a home hub;
- device: the same llama-server with 1 slot and 1 device: condition B, what every device would have on
  its own hardware (the distributed figure: measured at 1 device, an estimate beyond, M12).

Each ramp is followed past its knee (``--margin`` wide): the crossing lies where the shared LLM's silence
reaches the device's own, usually beyond the step where its users start to wait. Prints the curves side by
side and each crossing, and writes DIR/crossover.json naming the three capacity folders (the report reads
it beside M21 (3)). Run it under ``flock -x /tmp/lab-bench.lock``: on a 2-core machine the local model
shares the cores with the server and the devices, which is part of what a hub on such hardware is.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from labtools.transport_skews import start_serve, stop_serve
from pipeline.analysis.crossing import Comparison, compare, describe, headcounts
from pipeline.records.crossover import RECORD, Arm, Record, RecordError, write_record

ROOT = Path(__file__).resolve().parent.parent

FIXTURES = ROOT / "audio_fixtures"
SERVER_START_S = 180.0  # a llama-server hub loads its model first
VOICE = '[asr]\nimpl = "oracle"\n[tts]\nimpl = "stub"\n[vad]\nimpl = "energy"\n'
# one thread: llama.cpp's busy-waiting threads on both cores starve the server and the devices beside it
# (seen here, two devices on a 2-slot hub, one trial each: first audible 14-45 s at threads = 2, 13-22 s at 1)
LOCAL = '[run]\ncondition = "B"\n[llm]\nimpl = "server"\nmodel = "qwen2.5-coder-0.5b"\nmax_tokens = 48\nthreads = 1\n'
CLOUD = (
    '[run]\ncondition = "A"\n[llm]\nimpl = "openai"\nmodel = "emulated-cloud"\nmax_tokens = 48\n'
    '[cloud]\nemulator = "busy"\n[network]\nprofile = "internet"\n'
)
WIDE_MARGIN = "100000%"  # follow each curve past its knee: where it crosses is the question here


@dataclass(frozen=True, slots=True)
class Ramp:
    """One server's settings, the ramp's steps against it, and what it is in words."""

    name: str
    what: str
    llm: str
    steps: str


def ramps(args: argparse.Namespace) -> tuple[Ramp, Ramp, list[Ramp]]:
    """(the distributed figure's ramp, then the shared ones)."""
    device = Ramp(
        "device",
        "each device its own LLM (qwen2.5-coder-0.5b, llama-server 1 slot, threads 1)",
        LOCAL + "parallel = 1\n",
        "1",
    )
    cloud = Ramp(
        "cloud",
        "emulated cloud 'busy' (2 slots, FIFO queue; scripted), internet network",
        CLOUD,
        args.cloud_steps,
    )
    hub = Ramp(
        "hub",
        f"home hub: llama-server --parallel {args.hub_slots} (qwen2.5-coder-0.5b, threads 1)",
        LOCAL + f"parallel = {args.hub_slots}\n",
        args.hub_steps,
    )
    return device, cloud, [r for r in (cloud, hub) if r.steps]


def start_server(configs: Sequence[Path], out: Path, log: IO[str]) -> tuple[subprocess.Popen[bytes], str]:
    """``pipeline.serve`` on a free loopback port; its URL once it says it serves."""
    return start_serve([str(FIXTURES), *(a for c in configs for a in ("--config", str(c)))], out, log, SERVER_START_S)


def run_ramp(ramp: Ramp, args: argparse.Namespace, out: Path) -> None:
    """The ramp against a fresh server of its own: out/<name>/ is the capacity folder."""
    here = out / ramp.name
    here.mkdir(parents=True)
    configs = [here / "voice.toml", here / "llm.toml"]
    configs[0].write_text(VOICE)
    configs[1].write_text(ramp.llm)
    print(f"{ramp.name}: {ramp.what}; steps {ramp.steps}", flush=True)
    with (here / "server.log").open("w", encoding="utf-8") as log:
        server, url = start_server(configs, here / "server", log)
        try:
            command = [sys.executable, "-m", "pipeline.capacity", str(FIXTURES), "--server", url, "--out", str(here)]
            command += ["--steps", ramp.steps, "--hold", args.hold, "--min-turns", str(args.min_turns)]
            command += ["--margin", WIDE_MARGIN, "--server-pid", str(server.pid), "--label", ramp.what]
            command += [a for c in configs for a in ("--config", str(c))]
            done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
        finally:
            stop_serve(server)
    (here / "capacity.log").write_text(done.stdout + done.stderr)
    for line in done.stdout.splitlines():
        print(f"   {line.strip()}", flush=True)
    if done.returncode != 0:
        print(f"   (pipeline.capacity exit {done.returncode}: {done.stderr.strip()[-600:]})", flush=True)


def cell(value: float | None, label: str = "") -> str:
    if value is None:
        return "-"
    return f"{value:.0f}{'*' if label == 'estimated' else ''}"


def print_comparison(found: Comparison) -> None:
    """The curves side by side (P50/P90 silence, ms) and each crossing, every figure labelled."""
    curves = [found.device, *(s.curve for s in found.shared)]
    names = ["device", *(f"shared {i + 1}" for i in range(len(found.shared)))]
    print("\nsilence (end of speech -> first audible), P50/P90 ms; * estimated, every other figure measured")
    print(f"  device: {found.device_what}")
    for i, s in enumerate(found.shared):
        print(f"  shared {i + 1}: {s.what}")
    print(f"{'devices':>8}" + "".join(f"{n:>18}" for n in names))
    for n in headcounts(curves):
        cells = []
        for c in curves:
            p = c.point(n)
            cells.append("-" if p is None else f"{cell(p.p50_ms, p.label)}/{cell(p.p90_ms, p.label)}")
        print(f"{n:>8}" + "".join(f"{x:>18}" for x in cells))
    print("(past a shared LLM's saturation its queue grows through each hold: figures there depend on --hold)")
    print("where one shared LLM reaches a device's own:")
    for i, s in enumerate(found.shared):
        for x in s.crossings:
            print(f"  shared {i + 1}: {describe(x, 'the shared LLM')}")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cloud-steps", default="1,16,32,48", help="devices per step against the emulated cloud ('' skips)")
    p.add_argument("--hub-steps", default="1,2,3", help="devices per step against the hub ('' skips)")
    p.add_argument("--hub-slots", type=int, default=2, help="the hub's llama-server --parallel")
    p.add_argument("--hold", default="40s", help="each step's hold (pipeline.capacity --hold)")
    p.add_argument("--min-turns", type=int, default=5, help="turns a step needs (pipeline.capacity --min-turns)")
    p.add_argument("--out", type=Path, help="where the ramps go (default: bench-capacity/shared-<time>)")
    p.add_argument("--read", type=Path, help="only print an already measured folder (its crossover.json)")
    p.add_argument(
        "--ramps",
        default="device,cloud,hub",
        help="which ramps to run into --out now (the rest may be there already; each may be run apart, "
        "so that no one lock is held long)",
    )
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.read:
        return show(args.read / RECORD)
    out = args.out or ROOT / "bench-capacity" / time.strftime("shared-%Y%m%d-%H%M%S")
    started = time.perf_counter()
    device, _cloud, shared = ramps(args)
    wanted = {name.strip() for name in args.ramps.split(",") if name.strip()}
    unknown = wanted - {r.name for r in (device, *shared)}
    if unknown:
        raise SystemExit(f"--ramps: unknown {', '.join(sorted(unknown))}; choose from device, cloud, hub")
    for ramp in (device, *shared):
        if ramp.name in wanted:
            run_ramp(ramp, args, out)
    done = [r for r in shared if (out / r.name / "capacity.json").is_file()]
    if not (out / device.name / "capacity.json").is_file() or not done:
        print(f"(the device ramp and a shared one are both needed for the crossing; ramps so far in {out})")
        return 0
    record = write_record(out, Record(Arm(device.name, device.what), [Arm(r.name, r.what) for r in done]))
    code = show(record)
    print(f"({time.perf_counter() - started:.0f} s; ramps in {out})")
    return code


def show(record: Path) -> int:
    try:
        print_comparison(compare(record))
    except RecordError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
