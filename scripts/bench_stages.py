"""Benchmark of the real stages, side by side in one run.

(The local LLM against llama-cpp-python, the prompt cache and streaming: scripts/bench_llm.py.)

1. ASR real-time factor (Whisper decode time / audio duration) on the fixtures.
2. VAD cost per 60 ms frame (Silero).
3. End of speech -> first audio, against the sum of the stages on its critical
   path (VAD end-point, ASR, LLM first token, first sentence complete, TTS first
   frame), from real replay traces: streaming should make them nearly equal.

Run: ``python scripts/bench_stages.py [--questions N] [--turns N]``.
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")

from pipeline.analysis.numbers import median
from pipeline.analysis.traces import ReadProblems, ReadSpan, read_trace_file
from pipeline.replay import main as replay
from pipeline.settings.audio import load_audio
from pipeline.settings.models import default_cache, resolve
from pipeline.tracing import names
from stages.asr.whisper import WhisperEngine
from stages.vad.silero import SileroClassifier, SileroModel

ROOT = Path(__file__).resolve().parent.parent

FIXTURES = ROOT / "audio_fixtures"
CACHE = default_cache(os.environ)
MAX_TOKENS = 48


def questions(n: int) -> list[tuple[str, str, str]]:
    with (FIXTURES / "manifest.csv").open(encoding="utf-8") as fh:
        return [(r["id"], r["language"], r["text"]) for r in csv.DictReader(fh)][:n]


def bench_asr(n: int) -> None:
    engine = WhisperEngine(resolve("whisper-base", CACHE), threads=2)
    rtf = {"zh": [], "en": []}  # type: dict[str, list[float]]
    for qid, lang, _text in questions(n):
        clip = load_audio(FIXTURES / f"{qid}.wav")
        pcm = b"".join(f.pcm for f in clip.frames)
        t0 = time.perf_counter()
        engine.transcribe(pcm, lang)
        rtf[lang].append((time.perf_counter() - t0) / (clip.duration_ms / 1000))
    print("ASR (Whisper base, int8, 2 threads, beam 1)")
    for lang, values in rtf.items():
        if values:
            print(
                f"  real-time factor {lang}: median {median(values):.3f}  max {max(values):.3f}  ({len(values)} clips)"
            )


def bench_vad() -> None:
    model = SileroModel(resolve("silero-vad", CACHE))
    classifier = SileroClassifier(model)
    frames = [f for q in ("en01", "zh01", "en05") for f in load_audio(FIXTURES / f"{q}.wav").frames]

    async def classify() -> float:  # one stream: every chunk is a batch of one
        t0 = time.perf_counter()
        for frame in frames:
            await classifier.speech_probability(frame.pcm)
        return (time.perf_counter() - t0) / len(frames)

    per = asyncio.run(classify())
    print(
        f"VAD (Silero ONNX, {len(frames)} frames): {1000 * per:.3f} ms per 60 ms frame"
        f" ({100 * per / 0.06:.2f} % of real time)"
    )


def bench_critical_path(turns: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        args = [str(FIXTURES), "--limit", str(turns), "--rounds", "2", "--out", tmp, "--run-id", "b", "--quiet"]
        args += ["--model-cache", str(CACHE)]
        with open(os.devnull, "w") as null:
            stdout, sys.stdout = sys.stdout, null
            try:
                replay(args)
            finally:
                sys.stdout = stdout
        spans = list(read_trace_file(Path(tmp) / "traces" / "b.jsonl", ReadProblems()))
    first_audio, path_sum = [], []
    for turn in (s for s in spans if s.name == names.TURN and s.attributes.get(names.OK) is True):
        if turn.attributes.get(names.WARMUP):
            continue
        kids: dict[str, list[ReadSpan]] = {}
        for s in spans:
            if s.parent_span_id == turn.span_id:
                kids.setdefault(s.name, []).append(s)
        end_of_speech = turn.event_ns(names.EV_USER_SPEECH_END)
        assert end_of_speech is not None
        vad, asr, call = kids[names.VAD][0], kids[names.ASR][0], min(kids[names.LLM_CALL], key=lambda s: s.start_ns)
        s0 = min(kids[names.SENTENCE], key=lambda s: s.start_ns)
        tts0 = min(kids[names.TTS], key=lambda s: s.start_ns)
        stages = [
            vad.end_ns - end_of_speech,
            asr.end_ns - asr.start_ns,
            # the LLM up to the first sentence's first token: every call before it (tool calls) included
            (s0.event_ns(names.EV_FIRST_TOKEN) or s0.start_ns) - call.start_ns,
            s0.end_ns - (s0.event_ns(names.EV_FIRST_TOKEN) or s0.start_ns),
            (tts0.event_ns(names.EV_FIRST_FRAME) or tts0.end_ns) - tts0.start_ns,
        ]
        path_sum.append(sum(stages) / 1e6)
        first_audio.append((kids[names.PLAYBACK][0].start_ns - end_of_speech) / 1e6)
    gaps = [a - b for a, b in zip(first_audio, path_sum, strict=True)]
    print(f"end of speech -> first audio ({len(first_audio)} measured turns, real models, real-time pacing)")
    print(f"  measured median {median(first_audio):8.1f} ms   sum of critical-path stages {median(path_sum):8.1f} ms")
    print(f"  difference (hand-offs between stages) median {median(gaps):.1f} ms, max {max(gaps):.1f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=12, help="clips for the ASR part")
    parser.add_argument("--turns", type=int, default=4, help="questions for the critical-path part (2 rounds)")
    args = parser.parse_args()
    bench_asr(args.questions)
    bench_vad()
    bench_critical_path(args.turns)


if __name__ == "__main__":
    main()
