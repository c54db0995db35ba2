"""How many devices: the capacity figures of issue 32, in one run, printed side by side.

Parts (``--parts``, a comma list; each part is one function of ``PARTS``):

- ``fleet``: the load generator holds itself. A sink (``python -m pipeline.capacity.sink``, its own
  process: it answers hello and discards the rest) takes N realtime emulated devices from this
  process, for N in ``--counts`` (default 100, 500, 1000); each device streams its microphone as paced
  60 ms Opus frames. Once all are connected, for ``--hold`` seconds: devices still connected, frames
  sent, the generator's own send lateness (every paced send's start minus its due time) P50/P99/max,
  and the CPU of this process and of the sink (share of one core). Goal: P99 <= 5 ms at 1,000.
- ``server``: the lab's server (``configs/capacity-server.toml``) under realtime devices that stream all
  the time, a few of them asking (``scripts/capacity_server_bench.py``; ``--server-args`` passes it options,
  e.g. ``--profile 8`` for the server's py-spy top entries).
- ``ramp``: the lab's server ramped by ``pipeline.capacity`` (devices held, the goal >= 200) under several
  server variants one after another, side by side, with ``--before REF`` the code before a change and
  ``--profile N`` each server's py-spy top entries at N devices (``scripts/capacity_ramp_bench.py``;
  ``--ramp-args`` passes it options, split as a shell would: ``--ramp-args "--before main --profile 200"``).
- ``real``: the real xiaozhi-esp32-server over WebSocket and through the real MQTT gateway, and the lab's
  server, on the same fixed-latency stand-ins, each ramped by ``pipeline.capacity``
  (``scripts/interop/xiaozhi_server.py --capacity``; needs ``--real-server CHECKOUT``, and ``--gateway``).
- ``codec``: what each downlink Opus preset costs a server per frame and does to speech (wide-band PESQ):
  the trade-off of ``pipeline.serve --downlink-codec`` (``scripts/downlink_codec_bench.py``).
- ``shared``: one shared LLM (the emulated cloud's slots, a llama-server hub) against each device's own, the
  silence against devices and the headcount where they cross (``scripts/capacity_shared_bench.py``).

Run it on a quiet machine: every figure here is wall-clock time.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import importlib
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pipeline.capacity.probe import cpu_seconds
from pipeline.clock import RealClock, real_event_loop
from pipeline.transport.device.device import DeviceError, DeviceSettings, EmulatedDevice
from pipeline.transport.device.pacer import send_lateness

ROOT = Path(__file__).resolve().parent.parent

CONNECTING_AT_ONCE = 50  # devices dialling together: a thousand handshakes at once would time out on 2 cores


@dataclass(frozen=True, slots=True)
class FleetStep:
    """One fleet size held against the sink."""

    devices: int
    connected: int  # connected at the start of the hold and still connected at its end
    frames: int  # paced sends during the hold
    late_p50_ms: float
    late_p99_ms: float
    late_max_ms: float
    cpu_generator: float  # share of one core during the hold
    cpu_sink: float
    hold_s: float
    gc_max_ms: float  # the longest garbage collection during the hold
    gc_total_ms: float


class GcPauses:
    """How long each garbage collection stopped the loop, while installed (``gc.callbacks``)."""

    def __init__(self) -> None:
        self.pauses: list[float] = []
        self._start = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._start = time.perf_counter()
        else:
            self.pauses.append((time.perf_counter() - self._start) * 1000)

    def __enter__(self) -> GcPauses:
        gc.callbacks.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self)


class SinkProcess:
    """``python -m pipeline.capacity.sink`` on a free port, for as long as the ``with`` lasts."""

    def __enter__(self) -> SinkProcess:
        command = [sys.executable, "-m", "pipeline.capacity.sink", "--port", "0"]
        self.proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        self.url = self.proc.stdout.readline().strip()
        if not self.url.startswith("ws://"):
            self.proc.kill()
            raise RuntimeError(f"the sink did not start (it said {self.url!r})")
        return self

    def __exit__(self, *exc: object) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            out, _ = self.proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, _ = self.proc.communicate()
        self.said = out.strip()


async def _connect(devices: list[EmulatedDevice]) -> list[EmulatedDevice]:
    gate = asyncio.Semaphore(CONNECTING_AT_ONCE)

    async def one(device: EmulatedDevice) -> EmulatedDevice | None:
        async with gate:
            try:
                await device.__aenter__()
            except DeviceError as exc:
                print(f"  {device.settings.device_id}: {exc}", file=sys.stderr)
                return None
            return device

    return [d for d in await asyncio.gather(*(one(d) for d in devices)) if d is not None]


async def hold_fleet(url: str, count: int, hold_s: float, sink_pid: int) -> FleetStep:
    """``count`` realtime devices connected to ``url``, then held for ``hold_s``: what the hold cost."""
    clock = RealClock()
    devices = [
        EmulatedDevice(
            DeviceSettings(
                url=url, listen_mode="realtime", device_id=f"02:00:00:00:{i // 256:02x}:{i % 256:02x}", mcp_wait_s=0.0
            ),
            clock,
        )
        for i in range(count)
    ]
    connected = await _connect(devices)
    gc.collect()
    gc.freeze()  # what the fleet is made of lives for the whole hold: no collection need walk it again
    record = send_lateness()
    record.take()  # dialling is not holding
    with GcPauses() as pauses:
        cpu0, sink0, wall0 = time.process_time(), cpu_seconds(sink_pid), time.perf_counter()
        await asyncio.sleep(hold_s)
        late = record.take()
        cpu1, sink1, wall1 = time.process_time(), cpu_seconds(sink_pid), time.perf_counter()
    still = sum(d.link.is_open for d in connected)
    await asyncio.gather(*(d.__aexit__(None, None, None) for d in connected), return_exceptions=True)
    gc.unfreeze()
    wall = wall1 - wall0
    p50, p99, most = (float(v) for v in np.percentile(late, [50, 99, 100])) if late.size else (float("nan"),) * 3
    gc_max, gc_total = max(pauses.pauses, default=0.0), sum(pauses.pauses)
    cpu, sink_cpu = (cpu1 - cpu0) / wall, (sink1 - sink0) / wall
    return FleetStep(count, still, int(late.size), p50, p99, most, cpu, sink_cpu, wall, gc_max, gc_total)


def _loop_factory(name: str) -> Callable[[], asyncio.AbstractEventLoop]:
    if name == "uvloop":  # only to compare: measured, it did not help (README), so it is no dependency
        try:
            uvloop = importlib.import_module("uvloop")
        except ImportError:
            raise SystemExit("--loop uvloop: uvloop is not installed (pip install uvloop)") from None
        factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
        return factory
    return real_event_loop


def fleet(args: argparse.Namespace) -> None:
    """Part ``fleet``: the generator's own lateness and CPU at each fleet size against a sink."""
    steps: list[FleetStep] = []
    with SinkProcess() as sink:
        for count in args.counts:
            with asyncio.Runner(loop_factory=_loop_factory(args.loop)) as runner:
                step = runner.run(hold_fleet(sink.url, count, args.hold, sink.proc.pid))
            steps.append(step)
            print(f"  {count} devices: {step.connected} held, P99 {step.late_p99_ms:.2f} ms", file=sys.stderr)
    print(f"\n== fleet: realtime devices against a sink ({args.loop} loop, hold {args.hold:g} s) ==")
    columns = ("devices", "held", "frames", "late P50", "P99", "max", "CPU gen", "CPU sink", "GC max", "GC all")
    print(" ".join(f"{c:>9}" for c in columns))
    for s in steps:
        cells = [f"{s.devices}", f"{s.connected}", f"{s.frames}"]
        cells += [f"{v:.2f}" for v in (s.late_p50_ms, s.late_p99_ms, s.late_max_ms)]
        cells += [f"{s.cpu_generator:.0%}", f"{s.cpu_sink:.0%}", f"{s.gc_max_ms:.1f}", f"{s.gc_total_ms:.0f}"]
        print(" ".join(f"{c:>9}" for c in cells))
    print(f"(lateness and GC pauses in ms; CPU as a share of one core; the sink said: {sink.said})")


def _script(path: str, argv: list[str]) -> None:
    """Another bench as its own process: each starts and stops its own servers."""
    print(f"\n== {path} {' '.join(argv)} ==", flush=True)
    done = subprocess.run([sys.executable, str(ROOT / path), *argv], check=False)
    if done.returncode:
        print(f"({path} ended with exit status {done.returncode})")


def server(args: argparse.Namespace) -> None:
    """Part ``server``: the lab's server under realtime devices (scripts/capacity_server_bench.py)."""
    _script("scripts/capacity_server_bench.py", args.server_args.split())


def ramp(args: argparse.Namespace) -> None:
    """Part ``ramp``: the lab's server's devices held, variant by variant (scripts/capacity_ramp_bench.py)."""
    _script("scripts/capacity_ramp_bench.py", shlex.split(args.ramp_args))


def real(args: argparse.Namespace) -> None:
    """Part ``real``: the real server and the lab's on the same stand-ins, each ramped by pipeline.capacity."""
    if args.real_server is None:
        print("\n== real: skipped (no --real-server CHECKOUT of github:xinnan-tech/xiaozhi-esp32-server) ==")
        return
    argv = [str(args.real_server), "--capacity", args.real_steps, *args.real_args.split()]
    if args.gateway is not None:
        argv += ["--gateway", str(args.gateway)]
    _script("scripts/interop/xiaozhi_server.py", argv)


def codec(args: argparse.Namespace) -> None:
    """Part ``codec``: the downlink presets' cost and quality (scripts/downlink_codec_bench.py)."""
    _script("scripts/downlink_codec_bench.py", [])


def shared(args: argparse.Namespace) -> None:
    """Part ``shared``: a shared LLM against each device's own (scripts/capacity_shared_bench.py)."""
    _script("scripts/capacity_shared_bench.py", args.shared_args.split())


PARTS: dict[str, Callable[[argparse.Namespace], None]] = {
    "fleet": fleet,
    "server": server,
    "ramp": ramp,
    "real": real,
    "codec": codec,
    "shared": shared,
}


def _counts(text: str) -> list[int]:
    try:
        counts = [int(v) for v in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: a comma list of device counts, e.g. 100,500,1000") from None
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: every count is 1 or more")
    return counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--parts", default="fleet,ramp,real", help=f"comma list of: {', '.join(PARTS)}")
    parser.add_argument("--counts", type=_counts, default=[100, 500, 1000], help="fleet sizes (fleet)")
    parser.add_argument("--hold", type=float, default=30.0, help="seconds each fleet is held once connected")
    parser.add_argument("--loop", choices=("asyncio", "uvloop"), default="asyncio", help="the generator's event loop")
    parser.add_argument("--server-args", default="", help="options for scripts/capacity_server_bench.py (server)")
    parser.add_argument(
        "--ramp-args", default="", help="options for scripts/capacity_ramp_bench.py (ramp), split as a shell would"
    )
    parser.add_argument("--real-server", type=Path, help="a checkout of the real xiaozhi-esp32-server (real)")
    parser.add_argument("--gateway", type=Path, help="a checkout of the real xiaozhi-mqtt-gateway (real)")
    parser.add_argument("--real-steps", default="1,2,5,10,20,50", help="the real part's ramp steps")
    parser.add_argument("--real-args", default="", help="more options for scripts/interop/xiaozhi_server.py (real)")
    parser.add_argument("--shared-args", default="", help="options for scripts/capacity_shared_bench.py (shared)")
    args = parser.parse_args(argv)
    parts = args.parts.split(",")
    unknown = [p for p in parts if p not in PARTS]
    if unknown:
        parser.error(f"--parts: unknown {', '.join(unknown)}; known: {', '.join(PARTS)}")
    if args.hold <= 0:
        parser.error(f"--hold {args.hold:g}: more than 0 seconds")
    for part in parts:
        PARTS[part](args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
