"""How many realtime devices the lab's own server holds (issue 32, part 4): the part ``server`` of bench_capacity.

The server is ``pipeline.serve``'s own code (``prepare``, ``serve_until_stopped``) under
``configs/capacity-server.toml`` (real Silero VAD and Opus, fixed-latency stand-ins for ASR, LLM
and TTS), in its own process, fresh for each step. The load is a lean generator in this process:
pre-encoded Opus packets paced at 60 ms over websockets, after the device's hello and ``listen
start`` in realtime mode, so the server runs its VAD on every stream all the time. Every device
streams a noise floor; ``--askers`` of them name a question (the ``lab`` message) and speak its
clip once during the hold, then go back to noise.

Per step of N devices, over the hold (after a warm-up): the server's event-loop lateness (a probe
task asks to wake every 5 ms; how late it wakes is how late any frame that arrives then is read),
the uplink lateness of the askers' frames as the server stamped them (bench_transport's measure:
arrival - k x 60 ms, minus the turn's smallest), the server's CPU (``/proc``), the generator's own
send lateness, and the askers' turns: answered or not, and the silence from the packet after the clip's last loud
frame (sent) to the first answer packet received. A step holds when the loop lateness P99 is within
``GOAL_P99_MS``, every asker was answered and no connection was lost; a step whose generator itself
sent late (P99 over the goal) is void. ``--profile S``: py-spy on the server for S s of the hold.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from websockets.asyncio.client import ClientConnection, connect

from pipeline.capacity.probe import cpu_seconds
from pipeline.events import FRAME_MS
from pipeline.settings.audio import load_audio
from pipeline.settings.fixtures import load_questions
from pipeline.transport.wire.messages import Hello, Lab, Listen, Tts, decode, encode
from pipeline.transport.wire.opus import OpusEncoder
from stages.vad.energy import frame_dbfs

ROOT = Path(__file__).resolve().parent.parent

FIXTURES = ROOT / "audio_fixtures"
CONFIG = ROOT / "configs" / "capacity-server.toml"
GOAL_P99_MS = 5.0
PROBE_S = 0.005
QUESTIONS = ("en01", "zh01", "en02", "zh02")
SPEECH_DBFS = -45.0  # the energy VAD's default: louder frames are speech


@dataclass(frozen=True, slots=True)
class Load:
    """One step: how many devices, how many of them ask, and for how long the fleet is held."""

    devices: int
    askers: int = 4
    warmup_s: float = 4.0
    hold_s: float = 20.0


@dataclass(slots=True)
class Fleet:
    """What the generator saw during one step."""

    send_late_ms: list[float] = field(default_factory=list)
    silences_ms: list[float] = field(default_factory=list)
    outcomes: Counter[str] = field(default_factory=Counter)


# --- the server's process -------------------------------------------------------------------------


def serve_process(argv: list[str], out: Any, commands: Any) -> None:
    """``pipeline.serve`` with a loop-lateness probe and the askers' uplink lateness, answered on request."""
    from pipeline import serve
    from pipeline.analysis.row_sink import RowSink
    from pipeline.clock import run_on_clock
    from pipeline.plan.run_plan import new_run_id
    from pipeline.run.server_run import ServedRequest, ServedTurns
    from pipeline.run.session import attach_scheduler
    from pipeline.tracing.export import Tracing
    from pipeline.tracing.timeline import TurnTimeline
    from pipeline.transport.server.websocket import WebSocketSettings

    lags: list[tuple[float, float]] = []  # (monotonic s, lateness ms)
    uplink: list[tuple[float, float]] = []

    class Measured(ServedTurns):
        def finished(self, request: ServedRequest, timeline: TurnTimeline) -> None:
            super().finished(request, timeline)
            arrivals = timeline.vad.frame_arrival_ns
            if arrivals:
                offsets = [t / 1e6 - seq * FRAME_MS for seq, t in arrivals.items()]
                now = time.monotonic()
                uplink.extend((now, o - min(offsets)) for o in offsets)

    async def probe() -> None:
        loop = asyncio.get_running_loop()
        while True:
            due = loop.time() + PROBE_S
            await asyncio.sleep(PROBE_S)
            lags.append((time.monotonic(), (loop.time() - due) * 1000))

    args = serve.parse_args(argv)
    p = serve.prepare(args, os.environ, new_run_id())
    attach_scheduler(p.run)
    tracing = Tracing(args.out / "traces" / f"{p.run.run_id}.jsonl", "capacity-server", None)
    turns = Measured(p.run, tracing, RowSink(p.bench, 0, lambda _message: None), p.language)
    settings = WebSocketSettings(host=args.host, port=args.port, session=p.session, door=p.door)

    def answer() -> None:  # a thread: the loop is busy serving
        while (window := commands.get()) is not None:
            t0, t1 = window
            out.put(([v for t, v in list(lags) if t0 <= t <= t1], [v for t, v in list(uplink) if t0 <= t <= t1]))

    threading.Thread(target=answer, daemon=True).start()

    async def main() -> None:
        task = asyncio.create_task(probe())
        try:
            await serve.serve_until_stopped(p.run, turns, settings)
        finally:
            task.cancel()

    try:
        run_on_clock(main(), p.run.clock)
    finally:
        tracing.shutdown()
        p.run.engines.close()


# --- the generator -------------------------------------------------------------------------------


def packets(path: Path, encoder: OpusEncoder) -> list[bytes]:
    return [encoder.encode(f.pcm) for f in load_audio(path).frames]


def speech_ends(path: Path) -> int:
    """How many of the clip's frames run to the end of its last loud one (the end of speech, by level)."""
    loud = [i for i, f in enumerate(load_audio(path).frames) if frame_dbfs(f.pcm) > SPEECH_DBFS]
    return loud[-1] + 1 if loud else 0


async def _read(ws: ClientConnection, fleet: Fleet, asked: dict[str, float]) -> None:
    """Everything the server says; an asker's first answer packet after its question closes the silence."""
    async for message in ws:
        if isinstance(message, bytes):
            if "sent" in asked and "heard" not in asked:
                asked["heard"] = time.monotonic()
                fleet.silences_ms.append((asked["heard"] - asked["sent"]) * 1000)
        elif isinstance(stop := decode(message), Tts) and stop.state == "stop" and "heard" in asked:
            asked["stopped"] = time.monotonic()


async def device(
    url: str,
    noise: list[bytes],
    question: tuple[str, list[bytes], int] | None,
    start: float,
    ask_at: float,
    until: float,
    fleet: Fleet,
) -> None:
    """One realtime device: hello, ``listen start`` realtime, then paced packets until ``until``; an asker
    names its question and speaks it from ``ask_at``."""
    loop = asyncio.get_running_loop()
    await asyncio.sleep(max(0.0, start - loop.time()))
    asked: dict[str, float] = {}
    try:
        async with connect(url, compression=None, open_timeout=30) as ws:
            await ws.send(encode(Hello()))
            answer = decode(await ws.recv())
            sid = answer.session_id if isinstance(answer, Hello) else None
            await ws.send(encode(Listen("start", mode="realtime", session_id=sid)))
            reader = asyncio.create_task(_read(ws, fleet, asked))
            t0, k, q = loop.time(), 0, -1
            while (due := t0 + k * FRAME_MS / 1000) < until:
                await asyncio.sleep(max(0.0, due - loop.time()))
                fleet.send_late_ms.append((loop.time() - due) * 1000)
                if question is not None and q < 0 and due >= ask_at:
                    await ws.send(encode(Lab(question_id=question[0], round=1, session_id=sid)))
                    q = 0
                if question is not None and 0 <= q < len(question[1]):
                    await ws.send(question[1][q])
                    q += 1
                    if q == question[2]:
                        asked["sent"] = time.monotonic()
                else:
                    await ws.send(noise[k % len(noise)])
                k += 1
            reader.cancel()
        fleet.outcomes["asked, answered" if "stopped" in asked else "asked, no answer" if question else "streamed"] += 1
    except Exception as exc:  # counted by kind: a step that loses devices does not hold
        fleet.outcomes[f"lost: {type(exc).__name__}"] += 1


async def fleet_step(url: str, load: Load, noise: list[bytes], clips: list[tuple[str, list[bytes], int]]) -> Fleet:
    loop = asyncio.get_running_loop()
    fleet = Fleet()
    ramp_s = min(3.0, 0.01 * load.devices)
    begin = loop.time()
    hold0 = begin + ramp_s + load.warmup_s
    until = hold0 + load.hold_s
    jobs = []
    for i in range(load.devices):
        asker = i < load.askers
        ask_at = hold0 + 1.0 + max(0.0, load.hold_s - 10.0) * i / max(1, load.askers)
        clip = clips[i % len(clips)] if asker else None
        jobs.append(device(url, noise, clip, begin + ramp_s * i / load.devices, ask_at, until, fleet))
    await asyncio.gather(*jobs)
    return fleet


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def p99(values: list[float]) -> float:
    return float(np.percentile(values, 99)) if values else float("nan")


@dataclass(frozen=True, slots=True)
class Step:
    """One device count held against the server: its lateness, CPU and answers."""

    load: Load
    loop_p99_ms: float
    uplink_p99_ms: float
    cpu_share: float
    send_p99_ms: float
    answered: int
    silence_median_ms: float
    outcomes: dict[str, int]

    @property
    def void(self) -> bool:
        return self.send_p99_ms > GOAL_P99_MS

    @property
    def held(self) -> bool:
        lost = sum(v for k, v in self.outcomes.items() if k.startswith("lost"))
        return not self.void and not lost and self.answered == self.load.askers and self.loop_p99_ms <= GOAL_P99_MS

    def line(self) -> str:
        verdict = "VOID (generator late)" if self.void else "held" if self.held else "NOT held"
        return (
            f"{self.load.devices:4d} devices ({self.load.askers} asking): server loop lateness P99 "
            f"{self.loop_p99_ms:7.2f} ms, askers' uplink lateness P99 {self.uplink_p99_ms:7.2f} ms, server CPU "
            f"{self.cpu_share * 100:5.1f}% of a core, answered {self.answered}/{self.load.askers}, silence median "
            f"{self.silence_median_ms:6.0f} ms, generator send P99 {self.send_p99_ms:5.2f} ms; "
            f"{dict(self.outcomes)}: {verdict}"
        )


def run_step(load: Load, configs: list[Path], profile_s: float, out: Path) -> Step:
    """One step against a fresh server process."""
    encoder = OpusEncoder()
    noise = packets(FIXTURES / "edge" / "noise.wav", encoder)
    by_id = {q.id: q for q in load_questions(FIXTURES, "").questions}
    clips = [(qid, packets(by_id[qid].audio, encoder), speech_ends(by_id[qid].audio)) for qid in QUESTIONS]
    port = free_port()
    argv = [str(FIXTURES), "--port", str(port), "--out", str(out / f"n{load.devices}"), "--quiet"]
    argv += [arg for c in configs for arg in ("--config", str(c))]
    ctx = mp.get_context("spawn")
    results, commands = ctx.Queue(), ctx.Queue()
    server = ctx.Process(target=serve_process, args=(argv, results, commands), daemon=True)
    server.start()
    pid = server.pid
    assert pid is not None
    try:
        _wait_for(port, server)
        url = f"ws://127.0.0.1:{port}/xiaozhi/v1/"
        ramp_s = min(3.0, 0.01 * load.devices)
        marks: dict[str, float] = {}

        async def measured() -> Fleet:
            loop = asyncio.get_running_loop()
            loop.call_later(ramp_s + load.warmup_s, lambda: marks.update(t0=time.monotonic(), c0=cpu_seconds(pid)))
            task = asyncio.create_task(fleet_step(url, load, noise, clips))
            spy = None
            if profile_s:
                await asyncio.sleep(ramp_s + load.warmup_s)
                spy = _py_spy(pid, profile_s, out / f"profile-n{load.devices}.txt")
            fleet = await task
            if spy is not None:
                await asyncio.to_thread(spy.wait)
            return fleet

        fleet = asyncio.run(measured())
        t1, c1 = time.monotonic(), cpu_seconds(pid)
        commands.put((marks["t0"], t1))
        lags, uplink = results.get(timeout=30)
        commands.put(None)
        return Step(
            load,
            p99(lags),
            p99(uplink),
            (c1 - marks["c0"]) / (t1 - marks["t0"]),
            p99(fleet.send_late_ms),
            fleet.outcomes["asked, answered"],
            statistics.median(fleet.silences_ms) if fleet.silences_ms else float("nan"),
            dict(fleet.outcomes),
        )
    finally:
        server.terminate()
        server.join(15)


def _wait_for(port: int, server: Any) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if not server.is_alive():
            raise SystemExit(f"the server exited ({server.exitcode}) before it listened")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise SystemExit("the server did not listen within 120 s")


def _py_spy(pid: int, seconds: float, path: Path) -> subprocess.Popen[bytes]:
    exe = Path(sys.executable).parent / "py-spy"
    if not exe.exists():
        raise SystemExit(f"--profile: no py-spy beside {sys.executable} (the dev extra has it: make test installs it)")
    raw = path.with_suffix(".raw")
    cmd = [str(exe), "record", "-p", str(pid), "-d", str(int(seconds)), "-f", "raw", "-o", str(raw), "-r", "200"]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def top_entries(raw: Path, n: int = 15) -> list[str]:
    """The event loop thread's functions most py-spy samples were in (self) and under (inclusive); other threads
    are left out (py-spy counts threads blocked in C, this script's reader and idle codec threads, as busy)."""
    own: Counter[str] = Counter()
    under: Counter[str] = Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if "run_forever" not in stack:
            continue
        frames = [_frame(f) for f in stack.split(";")]
        total += int(count)
        own[frames[-1]] += int(count)
        for f in set(frames):
            under[f] += int(count)
    lines = [f"{total} samples of the event loop's thread; self:"]
    lines += [f"  {v / total * 100:5.1f}%  {k}" for k, v in own.most_common(n)]
    lines += ["inclusive (below the loop's own frames):"]
    lines += [f"  {v / total * 100:5.1f}%  {k}" for k, v in under.most_common(n + 12)[12:]]
    return lines


def _frame(entry: str) -> str:
    """``function (path/to/file.py:line)`` as ``function (file.py)``."""
    name, _, where = entry.partition(" (")
    return f"{name} ({where.split(':')[0].rsplit('/', 1)[-1]})" if where else name


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--devices", default="50,100,200,300", help="device counts, in order")
    p.add_argument("--askers", type=int, default=4, help="devices per step that ask a question")
    p.add_argument("--hold", type=float, default=20.0, help="seconds each step is measured")
    p.add_argument("--config", type=Path, action="append", help=f"server config (default {CONFIG})")
    p.add_argument("--profile", type=float, default=0.0, help="py-spy the server for this many seconds of each hold")
    p.add_argument("--out", type=Path, default=Path("/tmp/capacity-server"), help="server runs and profiles")
    p.add_argument("--keep-going", action="store_true", help="measure every count, past the first not held")
    args = p.parse_args(argv)
    os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")
    args.out.mkdir(parents=True, exist_ok=True)
    print(f"lab server, realtime devices: machine {os.cpu_count()} CPU(s), load {os.getloadavg()[0]:.2f} at start")
    held = 0
    for n in (int(v) for v in args.devices.split(",")):
        step = run_step(Load(n, min(args.askers, n), hold_s=args.hold), args.config or [CONFIG], args.profile, args.out)
        print("  " + step.line(), flush=True)
        if args.profile:
            for line in top_entries(args.out / f"profile-n{n}.raw"):
                print("    " + line)
        if step.held:
            held = n
        elif not args.keep_going:
            break
    print(f"devices held: {held} (loop lateness P99 <= {GOAL_P99_MS} ms, every asker answered, no device lost)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
