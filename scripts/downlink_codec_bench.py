"""What each downlink Opus preset costs a server per frame, and what it does to speech: the trade-off behind
``pipeline.serve --downlink-codec`` (issue 32, part 4; the part ``codec`` of bench_capacity).

A server encodes every answer it speaks, frame by frame: under a fleet of devices this is one of its
largest costs (py-spy, ``scripts/capacity_server_bench.py --profile``). For each preset of
``pipeline.transport.wire.opus.PRESETS`` this prints, in one run:

- the encoding's CPU time per 60 ms frame (the 16 -> 24 kHz resampling included where the preset has
  it), the median of ``--repeats`` passes over the same speech, one thread, this process;
- the speech's quality after encoding and decoding (at 16 kHz, as the emulated device decodes it): wide-band
  PESQ (ITU-T P.862.2, the ``pesq`` package: MOS-LQO, 1.0-4.64) against the original, per clip, median and
  worst over the clips.

The speech is the fixtures' questions (real voices, both languages), standing in for a TTS voice.
Run it on a quiet machine: the first column is CPU time.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np

from pipeline.events import FRAME_BYTES, SAMPLE_RATE
from pipeline.settings.audio import load_audio
from pipeline.settings.fixtures import load_questions
from pipeline.transport.wire.opus import PRESETS, OpusDecoder, OpusEncoder

ROOT = Path(__file__).resolve().parent.parent

FIXTURES = ROOT / "audio_fixtures"


def clips(folder: Path, limit: int) -> list[np.ndarray]:
    """The first ``limit`` questions' audio, 16 kHz int16, whole frames."""
    out = []
    for q in load_questions(folder).questions[:limit]:
        frames = load_audio(q.audio).frames
        pcm = np.frombuffer(b"".join(f.pcm for f in frames), dtype="<i2")
        out.append(pcm[: len(pcm) - len(pcm) % (FRAME_BYTES // 2)])
    return out


def frames_of(pcm: np.ndarray) -> list[bytes]:
    step = FRAME_BYTES // 2
    return [pcm[i : i + step].tobytes() for i in range(0, len(pcm), step)]


def encode_cost_us(preset: str, speech: list[list[bytes]], repeats: int) -> float:
    """Median over passes of the CPU time per frame, a fresh encoder per clip as per answer."""
    passes = []
    for _ in range(repeats):
        count, start = 0, time.process_time()
        for frames in speech:
            encoder = OpusEncoder(preset)
            for frame in frames:
                encoder.encode(frame)
            count += len(frames)
        passes.append((time.process_time() - start) / count * 1e6)
    return statistics.median(passes)


def round_trip(preset: str, frames: list[bytes]) -> np.ndarray:
    """The clip as a device hears it: encoded by the preset, decoded at 16 kHz."""
    encoder, decoder = OpusEncoder(preset), OpusDecoder(SAMPLE_RATE)
    return np.frombuffer(b"".join(decoder.decode(encoder.encode(f)) for f in frames), dtype=np.int16)


def quality(preset: str, speech: list[list[bytes]], originals: list[np.ndarray]) -> list[float]:
    """Wide-band PESQ of each clip after the round trip (P.862.2 aligns the delay itself)."""
    from pesq import pesq  # the benchmark's own dependency (dev extra)

    return [
        float(pesq(SAMPLE_RATE, ref.astype(np.float32), round_trip(preset, frames).astype(np.float32), "wb"))
        for frames, ref in zip(speech, originals, strict=True)
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fixtures", type=Path, default=FIXTURES)
    parser.add_argument("--clips", type=int, default=12, help="how many questions' audio")
    parser.add_argument("--repeats", type=int, default=5, help="timed passes over the speech per preset")
    args = parser.parse_args(argv)
    originals = clips(args.fixtures, args.clips)
    speech = [frames_of(pcm) for pcm in originals]
    seconds = sum(len(p) for p in originals) / SAMPLE_RATE
    print(f"downlink presets on {len(originals)} clips ({seconds:.1f} s of speech), {args.repeats} timed passes")
    head = ("preset", "rate", "cmplx", "us/frame", "cores/100 answers", "PESQ-WB med", "worst")
    print(f"{head[0]:<16}" + "".join(f"{h:>{w}}" for h, w in zip(head[1:], (7, 6, 10, 19, 13, 7), strict=True)))
    for name, p in PRESETS.items():
        cost = encode_cost_us(name, speech, args.repeats)
        scores = quality(name, speech, originals)
        per_100 = cost / 60_000 * 100  # 100 answers playing at once: 100 frames per 60 ms
        print(
            f"{name:<16}{p.sample_rate:>7}{p.complexity:>6}{cost:>10.1f}{per_100:>19.2f}"
            f"{statistics.median(scores):>13.2f}{min(scores):>7.2f}"
        )
    print("(us/frame: CPU time; cores/100 answers: the share of one core that 100 answers playing at once cost)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
