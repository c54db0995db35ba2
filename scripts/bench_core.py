"""Benchmark of the core: tracing overhead per turn and timing accuracy, in one run.

1. Tracing overhead: the same scripted turns on the real clock, run without tracing
   and with it (spans built, OTLP JSON line written, row computed from the line);
   the ratio of wall time per turn, and the tracing work as a share of turn time.
   Also on the virtual clock, where only CPU work counts, as a worst case.
2. Timing accuracy: scripted stages with known latencies (no jitter) on the real
   clock; each stage time measured from the traces against its configured value:
   median and P99 absolute error and the bias, on the event loop real runs use
   (timers to the microsecond) beside asyncio's stock loop (timers rounded up to
   the next millisecond by epoll).

Goals (issue 2): overhead under 2 % of turn time, median error under 1 ms.
Run: ``python scripts/bench_core.py [--turns N]``.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

import numpy as np

from pipeline.analysis.numbers import median, quantile
from pipeline.analysis.read import rows_from_spans
from pipeline.analysis.traces import spans_from_traces_data
from pipeline.clock import Clock, RealClock, VirtualClock, run_on_clock
from pipeline.events import SAMPLE_RATE, AudioFrame, LatencyProfile
from pipeline.records.turn_row import TurnRow, column
from pipeline.run.turn import ServerStages, run_turn
from pipeline.settings.audio import frames_from_pcm
from pipeline.tracing import names
from pipeline.tracing.export import Tracing
from stages.asr.oracle import OracleAsr
from stages.llm import LlmSettings, LlmStage
from stages.llm.scripted import ScriptedBackend, ScriptedReply
from stages.sentences import SentenceSplitter
from stages.tts.stub import StubTts
from stages.vad.endpointer import FrameVad
from stages.vad.energy import EnergyClassifier

SILENCE_MS, ASR_MS, TTFT_MS, PER_TOKEN_MS, TTS_FIRST_MS = 300, 100, 120, 20, 50
EXPECTED = {
    "vad_endpoint_ms": SILENCE_MS,
    "asr_ms": ASR_MS,
    "first_token_ms": TTFT_MS,
    "tts_first_frame_ms": TTS_FIRST_MS,
}


def clip() -> tuple[AudioFrame, ...]:
    t = np.arange(int(SAMPLE_RATE * 1.5)) / SAMPLE_RATE
    voiced = (t >= 0.3) & (t < 0.9)
    pcm = (np.where(voiced, 0.25 * np.sin(2 * np.pi * 300 * t), 0.0) * 32767).astype("<i2").tobytes()
    return frames_from_pcm(pcm)


def server() -> ServerStages:
    reply = ScriptedReply("Yes. It is done.")
    return ServerStages(
        vad=FrameVad(EnergyClassifier(), silence_ms=SILENCE_MS),
        asr=OracleAsr("do it", "en", LatencyProfile(ASR_MS)),
        llm=LlmStage(ScriptedBackend(reply, LatencyProfile(TTFT_MS, PER_TOKEN_MS)), LlmSettings()),
        sentences=SentenceSplitter(),
        tts=StubTts(LatencyProfile(TTS_FIRST_MS), real_time_factor=0.2),
    )


async def session(clock: Clock, turns: int, tracing: Tracing | None) -> tuple[list[float], list[float], list[TurnRow]]:
    """Per-turn wall seconds, per-turn tracing seconds, and the rows read back from the traces."""
    frames = clip()
    walls, tracing_s, rows = [], [], []
    for i in range(turns):
        start = time.perf_counter()
        tl = await run_turn(frames, server(), clock)
        if tracing is not None:
            t0 = time.perf_counter()
            attrs = {names.SCHEMA: names.SCHEMA_VERSION, names.QUESTION_ID: f"q{i}", names.ROUND: 1}
            line = tracing.emit_turn(tl, attrs)  # type: ignore[arg-type]
            rows.extend(rows_from_spans(spans_from_traces_data(line)))
            tracing_s.append(time.perf_counter() - t0)
        walls.append(time.perf_counter() - start)
        await asyncio.sleep(0)
    return walls, tracing_s, rows


def run(
    clock_kind: str, turns: int, traced: bool, default_loop: bool = False
) -> tuple[list[float], list[float], list[TurnRow]]:
    """``default_loop``: asyncio's stock loop instead of run_on_clock's, to show what the fine timers change."""
    clock: Clock = VirtualClock() if clock_kind == "virtual" else RealClock()
    with tempfile.TemporaryDirectory() as tmp:
        tracing = Tracing(Path(tmp) / "bench.jsonl", "bench") if traced else None
        try:
            if default_loop:
                return asyncio.run(session(clock, turns, tracing))
            return run_on_clock(session(clock, turns, tracing), clock)
        finally:
            if tracing is not None:
                tracing.shutdown()


def errors_ms(rows: list[TurnRow], metric: str, expected: float) -> list[float]:
    """Signed errors, measured minus configured."""
    get = column(metric)
    return [float(v) - expected for r in rows if isinstance(v := get(r), (int, float))]


def accuracy_table(by_loop: dict[str, list[TurnRow]]) -> None:
    loops = list(by_loop)
    print(f"  {'':<20} {'':>17}   " + "   ".join(f"{name:^31}" for name in loops))
    print(f"  {'':<20} {'':>17}   " + "   ".join(f"{'median |err|  P99 |err|  bias':>31}" for _ in loops))
    pooled: dict[str, list[float]] = {name: [] for name in loops}
    for metric, expected in EXPECTED.items():
        cells = []
        for name in loops:
            signed = errors_ms(by_loop[name], metric, expected)
            pooled[name] += signed
            cells.append(cell(signed))
        print(f"  {metric:<20} configured {expected:6.1f}   " + "   ".join(cells))
    print(f"  {'all stages':<20} {'(goal: < 1 ms)':>17}   " + "   ".join(cell(pooled[n]) for n in loops))
    for name in loops:
        print(f"  failed turns, {name}: {sum(1 for r in by_loop[name] if not r.ok)}")


def cell(signed: list[float]) -> str:
    absolute = sorted(abs(e) for e in signed)
    return f"{quantile(absolute, 0.5):9.3f} ms {quantile(absolute, 0.99):7.3f} ms {median(signed):+6.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=12, help="real-clock turns per variant")
    args = parser.parse_args()

    print(f"tracing overhead per turn ({args.turns} real-clock turns per variant, scripted stages)")
    plain, _, _ = run("real", args.turns, traced=False)
    traced, trace_work, rows = run("real", args.turns, traced=True)
    ratio = median(traced) / median(plain)
    share = median(trace_work) / median(plain)
    print(f"  median turn wall time  without tracing {1000 * median(plain):9.2f} ms")
    print(f"  median turn wall time  with tracing    {1000 * median(traced):9.2f} ms")
    print(f"  ratio with/without                     {ratio:9.4f}x  (goal: < 1.02)")
    print(f"  tracing work per turn (median)         {1000 * median(trace_work):9.3f} ms")
    print(f"  tracing work / turn time               {100 * share:9.3f} %  (goal: < 2 %)")
    vplain, _, _ = run("virtual", 200, traced=False)
    vtraced, _, _ = run("virtual", 200, traced=True)
    vratio = median(vtraced) / median(vplain)
    print("  virtual clock, CPU work only (200 turns per variant):")
    print(
        f"    median CPU-bound turn without {1000 * median(vplain):.3f} ms, "
        f"with {1000 * median(vtraced):.3f} ms, ratio {vratio:.3f}x"
    )

    _, _, default_rows = run("real", args.turns, traced=True, default_loop=True)
    print(f"\ntiming accuracy (stage times from the traces vs scripted latencies, {len(rows)} turns per loop)")
    print("  bias = median signed error (measured - configured); asyncio's stock loop waits in whole ms")
    accuracy_table({"run_on_clock's loop (fine timers)": rows, "asyncio's stock loop (epoll)": default_rows})


if __name__ == "__main__":
    main()
