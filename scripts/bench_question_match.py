"""How the speech services' fixture matcher's time grows with the upload: one ``FixtureEars.hear`` per length.

    python scripts/bench_question_match.py [--seconds 45,90,180] [--repeat 3] [--fixtures audio_fixtures]

Each upload is the fixture clips one after another with the device's noise floor between them, cut
to the length asked, as a talkative user's long turn would reach the services. Prints, per length, the
best of ``--repeat`` runs, the time per second of audio, and the ratio to the first length's time:
a linear matcher's ratios follow the lengths' (1, 2, 4), a quadratic one's their squares (1, 4, 16).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from pipeline.endpoints.speech.question_match import FixtureEars
from pipeline.events import SAMPLE_RATE
from pipeline.settings.audio import load_audio
from pipeline.settings.fixtures import load_questions

ROOT = Path(__file__).resolve().parent.parent


def talk(fixtures: Path, seconds: float) -> bytes:
    """The fixture clips with half a second of noise floor (about -60 dBFS) after each, to ``seconds`` long."""
    rng = np.random.default_rng(3)
    gap = rng.normal(0, 32768 * 10 ** (-60 / 20), SAMPLE_RATE // 2).astype("<i2").tobytes()
    clips = [b"".join(f.pcm for f in load_audio(q.audio).frames) + gap for q in load_questions(fixtures).questions]
    want = int(seconds * SAMPLE_RATE) * 2
    out = b""
    while len(out) < want:
        out += b"".join(clips)
    return out[:want]


def best_of(ears: FixtureEars, pcm: bytes, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        ears.hear(pcm)
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", default="45,90,180", help="upload lengths, comma-separated")
    p.add_argument("--repeat", type=int, default=3, help="runs per length; the best is shown")
    p.add_argument("--fixtures", type=Path, default=ROOT / "audio_fixtures")
    args = p.parse_args()
    lengths = [float(s) for s in args.seconds.split(",")]
    ears = FixtureEars.load(args.fixtures)
    print(f"{len(ears.clips)} fixture clips; best of {args.repeat}")
    print(f"{'upload s':>9} {'hear s':>9} {'ms per s':>9} {'x first':>8} {'length x':>9}")
    first = 0.0
    for seconds in lengths:
        took = best_of(ears, talk(args.fixtures, seconds), args.repeat)
        first = first or took
        print(f"{seconds:9g} {took:9.3f} {took / seconds * 1000:9.2f} {took / first:8.2f} {seconds / lengths[0]:9.2f}")


if __name__ == "__main__":
    main()
