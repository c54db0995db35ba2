"""What the xiaozhi transports cost, in one run, printed side by side.

1. Opus encode and decode per 60 ms frame, over the packaged fixtures' audio.
2. A turn over each transport, WebSocket and MQTT + UDP (a private Mosquitto; gateway and
   device emulator in this process, loopback) against the same turn in-process: same scripted
   stages (configs/simulator.toml), same clip, real clock, real-time pacing; medians, ratios.
   A transport turn includes what the protocol does on purpose: the server's paced downlink
   and the device's jitter buffer.
3. How many devices one server process (scripted stages, its own process) holds at real-time
   pace: N devices stream a clip each, started over one frame time; the server stamps each
   uplink frame's arrival, and a frame's lateness is how far it arrived behind the schedule its
   turn's earliest frame sets (arrival - k x 60 ms, minus the smallest such value of the turn).
   N grows until the median over tries of the P99 lateness passes 5 ms (goal: at least 200 devices). The load
   generator sends pre-encoded packets, so its own Opus cost is not the server's.
4. The skews issue 23 removes, from real runs of ``python -m pipeline.replay --server`` against
   ``python -m pipeline.serve`` (``labtools.transport_skews``).

Run it on a quiet machine: every figure here is wall-clock time.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import multiprocessing as mp
import os
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
from websockets.asyncio.client import connect

from labtools.transport_skews import SkewArgs, skews
from pipeline.clock import RealClock, run_on_clock
from pipeline.events import FRAME_BYTES, FRAME_MS, AudioFrame
from pipeline.run.assembly import Engines, build_stages, load_engines
from pipeline.run.device_side import Ask, speech_end_ms
from pipeline.run.turn import ServerStages, run_turn
from pipeline.settings.audio import load_audio
from pipeline.settings.config import Config, load_config
from pipeline.settings.fixtures import Question, load_questions
from pipeline.settings.models import default_cache
from pipeline.tracing.timeline import TurnTimeline
from pipeline.transport.device.device import DeviceSettings, EmulatedDevice
from pipeline.transport.server.mqtt_front import MqttFrontEnd, MqttFrontSettings
from pipeline.transport.server.requests import TurnRequest
from pipeline.transport.server.server_settings import FloodSettings, SessionSettings
from pipeline.transport.server.websocket import WebSocketSettings, start_websocket_server
from pipeline.transport.wire.messages import Hello, LabTag, Listen, Tts, decode, encode
from pipeline.transport.wire.opus import PRESETS, OpusDecoder, OpusEncoder

ROOT = Path(__file__).resolve().parent.parent

FIXTURES = ROOT / "audio_fixtures"
SIMULATOR = ROOT / "configs" / "simulator.toml"
GOAL_P99_MS = 5.0


@functools.cache  # read once per process: every part of the run uses the same settings and clip
def setup() -> tuple[Config, Engines, Question, list[AudioFrame]]:
    cfg = load_config([SIMULATOR], {})
    engines = load_engines(cfg, default_cache(os.environ))
    question = next(q for q in load_questions(FIXTURES, "").questions if q.id == "en01")
    return cfg, engines, question, list(load_audio(question.audio).frames)


def opus_costs(frames: list[AudioFrame], repeats: int, preset: str = "lab") -> tuple[float, float, float]:
    """Median microseconds per frame to encode (as ``preset``) and to decode to 16 kHz, and the mean packet size."""
    encoder, decoder = OpusEncoder(preset), OpusDecoder()
    packets = [encoder.encode(f.pcm) for f in frames]
    enc, dec = [], []
    for _ in range(repeats):
        t = time.perf_counter()
        for f in frames:
            encoder.encode(f.pcm)
        enc.append((time.perf_counter() - t) / len(frames) * 1e6)
        t = time.perf_counter()
        for p in packets:
            decoder.decode(p)
        dec.append((time.perf_counter() - t) / len(frames) * 1e6)
    return statistics.median(enc), statistics.median(dec), float(np.mean([len(p) for p in packets]))


class ScriptedTurns:
    """The lab side of a transport server (``Turns``): every turn gets the scripted stages of the one clip, and its
    timeline is kept for the tables."""

    def __init__(self, cfg: Config, engines: Engines, question: Question) -> None:
        self.cfg, self.engines, self.question = cfg, engines, question
        self.done: list[TurnTimeline] = []
        self.count = 0

    def stages(self, request: TurnRequest) -> ServerStages:
        self.count += 1
        return build_stages(self.cfg, self.engines, self.question, self.count)

    def finished(self, request: TurnRequest, timeline: TurnTimeline) -> None:
        self.done.append(timeline)

    async def cached_reply(self, text: str, session_id: str) -> list[bytes]:
        return []  # no device here says a wake word

    def ended(self, session_id: str) -> None:
        pass  # nothing kept by session


def _ms(a: int | None, b: int | None) -> float:
    return (b - a) / 1e6 if a is not None and b is not None else float("nan")


async def _device_turns(url: str, turns: int, clock: RealClock) -> list[TurnTimeline]:
    cfg, engines, question, frames = setup()
    out = []
    async with EmulatedDevice(DeviceSettings(url=url), clock) as device:
        end = await speech_end_ms(build_stages(cfg, engines, question, 0).vad, frames)
        for i in range(turns):
            out.append(await device.turn(Ask(frames, end, question.id, i + 1, "")))
    return out


async def overhead(turns: int) -> dict[str, tuple[float, float]]:
    """Median first audio (first frame played) and whole turn: in-process, over WebSocket, over MQTT + UDP (ms)."""
    cfg, engines, question, frames = setup()
    clock = RealClock()
    runs: dict[str, list[TurnTimeline]] = {"in-process": []}
    for i in range(turns):
        runs["in-process"].append(await run_turn(frames, build_stages(cfg, engines, question, i + 1), clock))
    server = await start_websocket_server(WebSocketSettings(port=0), ScriptedTurns(cfg, engines, question), clock)
    async with server:
        url = f"ws://127.0.0.1:{server.sockets[0].getsockname()[1]}/xiaozhi/v1/"
        runs["websocket"] = await _device_turns(url, turns, clock)
    async with MqttFrontEnd(MqttFrontSettings(port=0), ScriptedTurns(cfg, engines, question), clock) as mqtt:
        runs["mqtt+udp"] = await _device_turns(f"mqtt://127.0.0.1:{mqtt.mqtt_address[1]}", turns, clock)
    out = {}
    for name, timelines in runs.items():
        bad = [tl.error_type for tl in timelines if not tl.ok]
        if bad:
            raise SystemExit(f"{name}: failed turns {bad}")
        first = [_ms(tl.vad.user_speech_end_ns, tl.playback.first_start_ns) for tl in timelines]
        whole = [_ms(tl.vad.user_speech_end_ns, tl.playback.last_end_ns) for tl in timelines]
        out[name] = (statistics.median(first), statistics.median(whole))
    return out


def serve_forever(port: Any, lateness: Any) -> None:
    """The server process: scripted stages; each finished turn's uplink lateness goes to the queue."""
    cfg, engines, question, _frames = setup()

    class Report(ScriptedTurns):
        def finished(self, request: TurnRequest, timeline: TurnTimeline) -> None:
            arrivals = timeline.vad.frame_arrival_ns
            if arrivals:
                # each frame against the schedule its earliest frame (relative to pace) sets: never negative
                offsets = [t / 1e6 - seq * FRAME_MS for seq, t in arrivals.items()]
                lateness.put((timeline.ok, [o - min(offsets) for o in offsets]))

    async def main() -> None:
        unmetered = SessionSettings(flood=FloodSettings(max_backlog_s=0, max_control_per_s=0))
        server = await start_websocket_server(
            WebSocketSettings(port=0, session=unmetered), Report(cfg, engines, question), RealClock()
        )
        async with server:
            port.value = server.sockets[0].getsockname()[1]
            await asyncio.Event().wait()

    run_on_clock(main(), RealClock())


async def lean_device(url: str, packets: list[bytes], delay_s: float, sent_late: list[float]) -> bool:
    """A device reduced to its wire behaviour: hello, listen, paced packets, read until tts stop."""
    await asyncio.sleep(delay_s)
    async with connect(url, compression=None) as ws:
        await ws.send(encode(Hello()))
        answer = decode(await ws.recv())
        session = answer.session_id if isinstance(answer, Hello) else None
        await ws.send(encode(Listen("start", mode="auto", session_id=session, lab=LabTag())))

        async def until_stop() -> bool:
            while True:
                message = await ws.recv()
                if isinstance(message, str) and isinstance(stop := decode(message), Tts) and stop.state == "stop":
                    return True

        reader = asyncio.create_task(until_stop())
        loop = asyncio.get_running_loop()
        start = loop.time()
        for k, packet in enumerate(packets):
            due = start + k * FRAME_MS / 1000
            await asyncio.sleep(max(0.0, due - loop.time()))
            sent_late.append((loop.time() - due) * 1000)
            if reader.done():
                break
            await ws.send(packet)
        async with asyncio.timeout(30):
            return await reader


def _fleet_once(url: str, packets: list[bytes], n: int, lateness: Any) -> tuple[int, int, float, float, float]:
    """N devices once: answered, server turns ok, lateness median and P99, the generator's send P99 (ms)."""
    sent_late: list[float] = []

    async def fleet() -> list[bool | BaseException]:
        spread = FRAME_MS / 1000 / n
        jobs = [lean_device(url, packets, i * spread, sent_late) for i in range(n)]
        return await asyncio.gather(*jobs, return_exceptions=True)

    outcomes = run_on_clock(fleet(), RealClock())
    late: list[float] = []
    ok_turns = 0
    for _ in range(n):
        turn_ok, values = lateness.get(timeout=60)
        ok_turns += turn_ok
        late += values
    answered = sum(1 for o in outcomes if o is True)
    p99 = float(np.percentile(late, 99)) if late else float("nan")
    return answered, ok_turns, float(np.median(late)), p99, float(np.percentile(sent_late, 99))


def capacity(counts: list[int], tries: int) -> list[tuple[int, bool, list[float]]]:
    """Each count ``tries`` times (this VM's scheduling varies run to run); held: the median P99 is within goal."""
    _cfg, _engines, _question, frames = setup()
    encoder = OpusEncoder()
    tail = [bytes(FRAME_BYTES)] * 20  # auto mode: silence after the clip until the server answers
    packets = [encoder.encode(f.pcm) for f in frames] + [encoder.encode(p) for p in tail]
    ctx = mp.get_context("spawn")
    port, lateness = ctx.Value("i", 0), ctx.Queue()
    server = ctx.Process(target=serve_forever, args=(port, lateness), daemon=True)
    server.start()
    try:
        while port.value == 0:
            time.sleep(0.05)
        url = f"ws://127.0.0.1:{port.value}/xiaozhi/v1/"
        results = []
        for n in counts:
            runs = [_fleet_once(url, packets, n, lateness) for _ in range(tries)]
            p99s = [r[3] for r in runs]
            held = all(r[0] == n for r in runs) and statistics.median(p99s) <= GOAL_P99_MS
            results.append((n, held, p99s))
            print(
                f"  {n:4d} devices, {tries} tries: answered {min(r[0] for r in runs)}/{n} at worst, "
                f"server turns ok {min(r[1] for r in runs)}/{n} at worst; uplink lateness P99 "
                f"{', '.join(f'{v:.2f}' for v in p99s)} ms (median {statistics.median(p99s):.2f}); "
                f"load generator's own send lateness P99 {', '.join(f'{r[4]:.2f}' for r in runs)} ms",
                flush=True,
            )
            if not held:
                break
        return results
    finally:
        server.terminate()
        server.join(10)


PARTS = ("opus", "overhead", "capacity", "skews")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated (default: {','.join(PARTS)})")
    p.add_argument("--turns", type=int, default=6, help="turns each way for the overhead comparison")
    p.add_argument("--repeats", type=int, default=5, help="passes over the audio for the Opus costs")
    p.add_argument("--devices", default="25,50,100,200,300,400", help="device counts to try, in order")
    p.add_argument("--tries", type=int, default=3, help="runs of each device count")
    skew = p.add_argument_group("skews: pipeline.replay --server against pipeline.serve")
    skew.add_argument("--fixtures", type=Path, default=FIXTURES, help="fixtures folder both ends use")
    skew.add_argument(
        "--config", type=Path, action="append", help=f"TOML settings for both ends (repeatable; default {SIMULATOR})"
    )
    skew.add_argument("--limit", type=int, default=5, help="the first N questions")
    skew.add_argument("--rounds", type=int, default=3, help="rounds over them (the first is a warm-up)")
    skew.add_argument("--link-profile", help="a network profile between device and server (default: none)")
    args = p.parse_args()
    parts = args.parts.split(",")
    unknown = sorted(set(parts) - set(PARTS))
    if unknown:
        p.error(f"--parts: unknown {', '.join(unknown)}; known: {', '.join(PARTS)}")
    os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")
    print(f"machine: {os.cpu_count()} CPU(s), load average {os.getloadavg()[0]:.2f} at start")
    if "opus" in parts:
        _cfg, _engines, _question, frames = setup()
        for preset in PRESETS:
            enc, dec, size = opus_costs(frames * 4, args.repeats, preset)
            print(
                f"Opus per 60 ms frame, preset {preset:14s}: encode {enc:6.1f} us, decode to 16 kHz {dec:6.1f} us, "
                f"packet {size:.0f} bytes (mean)"
            )
    if "overhead" in parts:
        sides = run_on_clock(overhead(args.turns), RealClock())
        lf, lw = sides["in-process"]
        print(f"turn, median of {args.turns} (ms)      in-process   transport    ratio   difference")
        for name in ("websocket", "mqtt+udp"):
            tf, tw = sides[name]
            print(f"  {name:9s} first audio played {lf:10.1f}  {tf:10.1f}  {tf / lf:6.3f}x  {tf - lf:+8.1f}")
            print(f"  {name:9s} whole turn         {lw:10.1f}  {tw:10.1f}  {tw / lw:6.3f}x  {tw - lw:+8.1f}")
    if "capacity" in parts:
        print(f"devices one server process holds at real-time pace (goal: P99 lateness <= {GOAL_P99_MS} ms at 200):")
        results = capacity([int(n) for n in args.devices.split(",")], args.tries)
        held = [n for n, ok, _p99s in results if ok]
        print(f"held: {max(held) if held else 0} devices (largest count whose median P99 <= {GOAL_P99_MS} ms)")
    if "skews" in parts:
        configs = tuple(c.resolve() for c in args.config or [SIMULATOR])
        skews(SkewArgs(args.fixtures.resolve(), configs, args.limit, args.rounds, args.link_profile))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
