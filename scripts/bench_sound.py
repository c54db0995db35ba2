"""The sound-server path measured: its own latency, and the emulator heard through it against its traces.

    python scripts/bench_sound.py [--clicks N] [--turns N] [--out DIR]

Starts a private PulseAudio daemon (a null sink and its monitor, ``pipeline.acoustic.sound_server``).

1. Clicks: N clicks played into the sink, the monitor recorded. Per click: from the output callback
   that handed it to PortAudio to the input callback that delivered it (the whole path's buffering:
   PortAudio's output buffer, the sink, its monitor, PortAudio's input buffer, each on the wall
   clock), and the difference between where the streams' time info said it would be heard and
   where it was (what the time info misses).
2. Turns: ``pipeline.serve`` with the stub stages, an emulated device voicing each question and
   playing each answer into the sink (``replay --voice --speaker``), the monitor recorded. Per turn:
   question start -> first audible from the sound (the clip found by cross-correlation, the answer
   after it) against the traces' (first frame's capture start -> ``first_audible_played``); and,
   ``pipeline.acoustic.measure``'s silence from the mono recording against the traces' from the same
   end of speech, matched as the report's check matches them (``labtools.heard.acoustic_minus_trace``):
   a row from its question's truth (every clip of ``audio_fixtures`` has one) against
   ``true_end_first_audible_ms``, a row from the VAD's end against ``first_audible_ms``; each line
   names the column compared.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import soundfile

from labtools.heard import acoustic_minus_trace, answer_onset, clip_pcm, find, trace_turns, traced
from labtools.transport_skews import start_serve, stop_serve
from pipeline import replay
from pipeline.acoustic.measure import measure_recording
from pipeline.acoustic.questions import load_questions as acoustic_questions
from pipeline.acoustic.sound import Pcm, Recorder, sounddevice
from pipeline.acoustic.sound_server import PulseServer
from pipeline.settings.config import load_config
from pipeline.settings.fixtures import load_questions

ROOT = Path(__file__).resolve().parent.parent

FIXTURES = ROOT / "audio_fixtures"
SIMULATOR = ROOT / "configs" / "simulator.toml"
RATE = 16000
BLOCK = 800


def clicks(count: int, every_blocks: int = 5) -> dict[str, list[float]]:
    """``count`` clicks through the sink: hand-over -> delivery (ms) and heard - expected by the time info (ms)."""
    sd = sounddevice()
    handed: list[tuple[float, int]] = []  # (output callback's wall time, the click's offset in its block)
    delivered: list[tuple[float, float, Pcm]] = []  # (input callback's wall time, first sample's ADC time, block)
    expected: list[float] = []  # the click's DAC time by the output's time info
    done = threading.Event()
    blocks = 0

    def out(outdata: Pcm, frames: int, info: Any, status: Any) -> None:
        nonlocal blocks
        outdata[:] = 0
        blocks += 1
        if blocks > 20 and blocks % every_blocks == 0 and len(handed) < count:
            outdata[100:116, 0] = 0.5
            handed.append((float(info.currentTime), 100))
            expected.append(float(info.outputBufferDacTime) + 100 / RATE)
        elif len(handed) >= count and blocks % every_blocks == 0:
            done.set()

    def inp(indata: Pcm, frames: int, info: Any, status: Any) -> None:
        delivered.append((float(info.currentTime), float(info.inputBufferAdcTime), indata[:, 0].copy()))

    kw: dict[str, Any] = {"samplerate": RATE, "channels": 1, "dtype": "float32", "blocksize": BLOCK, "latency": 0.1}
    with sd.InputStream(device="pulse", callback=inp, **kw), sd.OutputStream(device="pulse", callback=out, **kw):
        done.wait(60)
        time.sleep(1.0)
    found: list[tuple[float, float]] = []
    for when, adc, block in delivered:
        loud = np.flatnonzero(np.abs(block) > 0.25)
        if len(loud) and (not found or when - found[-1][0] > 0.1):
            found.append((when, adc + int(loud[0]) / RATE))
    path = [(got - (hand + offset / RATE)) * 1000 for (hand, offset), (got, _) in zip(handed, found, strict=False)]
    miss = [(heard - exp) * 1000 for exp, (_, heard) in zip(expected, found, strict=False)]
    return {"hand-over -> delivered (ms)": path, "heard - time info (ms)": miss}


def turns(count: int, out: Path) -> dict[str, list[float]]:
    """``count`` turns of the emulator through the sink: sound against traces (ms), per turn."""
    server, url = start_serve([str(FIXTURES), "--config", str(SIMULATOR)], out / "server", sys.stderr)
    argv = [str(FIXTURES), "--config", str(SIMULATOR), "--limit", str(count), "--rounds", "1", "--quiet"]
    argv += ["--server", url, "--speaker", "pulse", "--voice", "pulse", "--out", str(out / "dev")]
    try:
        with Recorder("pulse") as room:
            code = replay.main(argv, env={})
            heard = room.samples()
            lost = room.gaps_s
    finally:
        stop_serve(server)
    if code:
        raise SystemExit(f"the replay failed ({code})")
    wav = out / "room.wav"
    soundfile.write(wav, heard, RATE, subtype="PCM_16")
    trace = traced(out / "dev")
    questions = {q.id: q for q in load_questions(FIXTURES).questions}
    result: dict[str, list[float]] = {"simple: heard - traced (ms)": []}
    for qid, (start_to_audible, _) in trace.items():
        clip = clip_pcm(questions[qid].audio)
        at = find(heard, clip)
        onset = answer_onset(heard, clip, at)
        if onset is not None:
            result["simple: heard - traced (ms)"].append((onset - at) * 1000 / RATE - start_to_audible)
    played = acoustic_questions(FIXTURES, load_config([SIMULATOR]))
    rows = measure_recording(wav, played, layout="mono")
    by_column = acoustic_minus_trace(trace_turns(out / "dev"), rows)
    print(f"turns: {len(trace)} traced, recording {len(heard) / RATE:.1f} s, input lost {lost:.3f} s: {wav}")
    print(f"acoustic rows: {len(rows)}, compared {sum(map(len, by_column.values()))}")
    return result | acoustic_result(by_column)


def acoustic_result(by_column: dict[str, list[float]]) -> dict[str, list[float]]:
    """The recording's silence minus the traces', one entry per trace column compared, named in the entry, so a
    reader sees which end of speech both sides were measured from; one empty entry where none was compared."""
    if not by_column:
        return {"acoustic - trace silence (ms)": []}
    return {f"acoustic - trace {column} (ms)": values for column, values in by_column.items()}


def summary(name: str, values: list[float]) -> str:
    if not values:
        return f"  {name}: none"
    worst = max(values, key=abs)
    return (
        f"  {name}: n={len(values)} median {statistics.median(values):.1f} min {min(values):.1f} "
        f"max {max(values):.1f} worst |{abs(worst):.1f}|"
    )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--clicks", type=int, default=20)
    p.add_argument("--turns", type=int, default=6)
    p.add_argument("--out", type=Path, help="keep the recordings here (default: a temporary folder)")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = args.out or Path(tmp)
        out.mkdir(parents=True, exist_ok=True)
        with PulseServer(out / "pulse") as server:
            os.environ.update(server.env)  # this process's streams reach the daemon (libpulse reads them)
            if args.clicks:
                print(f"clicks through the null sink ({args.clicks}):")
                for name, values in clicks(args.clicks).items():
                    print(summary(name, values))
            if args.turns:
                for name, values in turns(args.turns, out).items():
                    print(summary(name, values))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
