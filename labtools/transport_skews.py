"""The skews issue 23 removed, measured from real runs: ``scripts/bench_transport.py --parts skews``.

``python -m pipeline.replay --server`` against ``python -m pipeline.serve`` (each its own process,
WebSocket on loopback, same fixtures and settings): the device's first audible sample and whole turn
(median, P90) with the server's old pacing against the real server's (``--pacing lab-v1`` vs
``xiaozhi-server``, the device holding no frames), and with the device's old jitter hold against none
(``--jitter-frames`` 2 vs 0, the real server's pacing); each pair as the ratio old / new.

Its server, ``pipeline.serve`` on a free loopback port started and stopped (``start_serve``, ``stop_serve``),
is the one ``scripts/bench_acoustic.py``, ``scripts/bench_sound.py`` and ``scripts/capacity_shared_bench.py``
start too.
"""

from __future__ import annotations

import os
import re
import select
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import numpy as np

from pipeline.records.bench_csv import read_bench_csv
from pipeline.records.turn_row import column

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True, slots=True)
class DeviceRun:
    """One server + device run of the skew comparison: the server's pacing, the device's jitter hold."""

    pacing: str
    jitter_frames: int


OLD_PACING, NEW_PACING = DeviceRun("lab-v1", 0), DeviceRun("xiaozhi-server", 0)
OLD_JITTER, NEW_JITTER = DeviceRun("xiaozhi-server", 2), DeviceRun("xiaozhi-server", 0)
SKEWS = (
    ("pacing lab-v1 / xiaozhi-server (jitter_frames 0)", OLD_PACING, NEW_PACING),
    ("jitter_frames 2 / 0 (pacing xiaozhi-server)", OLD_JITTER, NEW_JITTER),
)
MEASURES = (("first audible sample", "first_audible_ms"), ("whole turn", "whole_turn_ms"))
SERVING = re.compile(r"serving (ws://\S+)")
SERVER_START_S = 120.0


@dataclass(frozen=True, slots=True)
class SkewArgs:
    """What every run of the skew comparison shares: the questions, the settings, how many turns, the link."""

    fixtures: Path
    configs: tuple[Path, ...]
    limit: int
    rounds: int
    link_profile: str | None


def _start_server(run: DeviceRun, args: SkewArgs, out: Path, log: IO[str]) -> tuple[subprocess.Popen[bytes], str]:
    """``pipeline.serve`` on a free loopback port with this pacing; its URL once it says it serves."""
    configs = [a for c in args.configs for a in ("--config", str(c))]
    return start_serve([str(args.fixtures), *configs, "--pacing", run.pacing], out, log)


def start_serve(
    argv: list[str], out: Path, log: IO[str], start_s: float = SERVER_START_S
) -> tuple[subprocess.Popen[bytes], str]:
    """``pipeline.serve ARGV`` on a free loopback port (a bench's server); its URL once it says it serves
    (within ``start_s``)."""
    command = [sys.executable, "-m", "pipeline.serve", *argv, "--port", "0", "--out", str(out), "--quiet"]
    server = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=log, bufsize=0)
    assert server.stdout is not None
    said = b""
    deadline = time.monotonic() + start_s
    while (left := deadline - time.monotonic()) > 0:
        readable, _, _ = select.select([server.stdout], [], [], left)
        chunk = os.read(server.stdout.fileno(), 4096) if readable else b""
        if not chunk:  # it exited, or said nothing in time
            break
        said += chunk
        if found := SERVING.search(said.decode("utf-8", "replace")):
            return server, found.group(1)
    stop_serve(server)
    log.flush()
    raise SystemExit(f"pipeline.serve {' '.join(argv)} did not start:\n{Path(log.name).read_text()[-2000:]}")


def stop_serve(server: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then kill after 30 s: the server stops whatever it was doing."""
    server.send_signal(signal.SIGTERM)
    try:
        server.wait(30)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()


def device_run(run: DeviceRun, args: SkewArgs, folder: Path) -> dict[str, list[float]]:
    """One run of replayed questions against a fresh server: each measure over the measured (not warm-up) turns."""
    name = f"{run.pacing}-jitter{run.jitter_frames}"
    here = folder / name
    here.mkdir()
    with (here / "server.log").open("w", encoding="utf-8") as log:
        server, url = _start_server(run, args, here / "server", log)
        try:
            configs = [a for c in args.configs for a in ("--config", str(c))]
            command = [sys.executable, "-m", "pipeline.replay", str(args.fixtures), *configs, "--server", url]
            command += ["--jitter-frames", str(run.jitter_frames), "--limit", str(args.limit)]
            command += ["--rounds", str(args.rounds), "--out", str(here / "device"), "--quiet"]
            if args.link_profile:
                command += ["--link-profile", args.link_profile]
            done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
        finally:
            stop_serve(server)
    if done.returncode != 0:
        raise SystemExit(
            f"pipeline.replay against --pacing {run.pacing}: exit {done.returncode}\n{done.stderr[-2000:]}"
        )
    rows = [r for r in read_bench_csv(here / "device" / "bench.csv") if not r.warmup]
    bad = [str(r.error) for r in rows if not r.ok]
    if bad or not rows:
        raise SystemExit(f"{name}: failed turns {bad}" if bad else f"{name}: no measured turns")
    getters = {name: column(name) for _label, name in MEASURES}
    return {name: [float(v) for r in rows if isinstance(v := get(r), int | float)] for name, get in getters.items()}


def skews(args: SkewArgs) -> None:
    """Print, for the same fixtures, each skew's old and new median and P90, and the ratio old / new."""
    with tempfile.TemporaryDirectory(prefix="bench-transport-") as tmp:
        needed = dict.fromkeys(run for _title, old, new in SKEWS for run in (old, new))
        runs = {run: device_run(run, args, Path(tmp)) for run in needed}
    turns = min(len(v) for values in runs.values() for v in values.values())
    print(f"the skews issue 23 removes, the device's view (ms, at least {turns} measured turns a run; old / new):")
    columns = f"{'median old':>10s} {'new':>8s} {'ratio':>7s}   {'P90 old':>8s} {'new':>8s} {'ratio':>7s}"
    print(f"  {'':48s} {'':20s} {columns}")
    for skew, old, new in SKEWS:
        for i, (label, name) in enumerate(MEASURES):
            title = skew if i == 0 else ""
            a, b = runs[old][name], runs[new][name]
            if not a or not b:
                print(f"  {title:48s} {label:20s} (no values)")
                continue
            med = (statistics.median(a), statistics.median(b))
            p90 = (float(np.percentile(a, 90)), float(np.percentile(b, 90)))
            print(
                f"  {title:48s} {label:20s} {med[0]:10.1f} {med[1]:8.1f} {med[0] / med[1]:6.3f}x   "
                f"{p90[0]:8.1f} {p90[1]:8.1f} {p90[0] / p90[1]:6.3f}x"
            )
