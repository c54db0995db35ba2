"""Recordings built for the acoustic tests: questions and answers placed at known samples, so every figure
a measurement gives has a truth to be compared with.

A recording is laid out as the emulator writes one (``--record-audio``: left the microphone, right the
speaker, 16-bit PCM): each question's clip on the left, a synthetic answer on the right after the end of
its speech, then a pause, then the next question. ``Truth`` holds, per turn, the samples a measurement
must find: the end of speech, and the answer's first and last sample above the audibility threshold.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile
import soxr

from pipeline.acoustic.questions import PlayedQuestion, load_questions
from pipeline.settings.config import Config, VadConfig

THRESHOLD = 64  # int16: the audibility threshold the contract names
FIXTURES = Path(__file__).resolve().parent.parent / "audio_fixtures"
ENERGY = Config(vad=VadConfig(impl="energy"))  # the simulator's VAD: no model to load


@functools.cache
def fixture_questions() -> tuple[PlayedQuestion, ...]:
    """The shipped fixtures' questions (English and Chinese), their speech ends by the energy VAD."""
    return tuple(load_questions(FIXTURES, ENERGY))


def of_language(language: str, count: int, skip: int = 0) -> list[PlayedQuestion]:
    """``count`` questions of one language (ids start with it), after ``skip`` of them."""
    return [q for q in fixture_questions() if q.question_id.startswith(language)][skip : skip + count]


@dataclass(frozen=True, slots=True)
class Turn:
    """What a measurement must find for one turn, in samples of the recording."""

    question_id: str
    round: int
    speech_end: int
    first_audible: int
    last_audible: int


@dataclass(frozen=True, slots=True)
class Built:
    """A built recording: its int16 samples (samples x 2) at ``rate``, and the truth of every turn."""

    samples: np.ndarray
    rate: int
    turns: tuple[Turn, ...]

    def write(self, path: Path, channels: int = 2) -> Path:
        data = self.samples if channels == 2 else self.samples[:, 0]
        soundfile.write(str(path), data, self.rate, subtype="PCM_16")
        return path


def answer(seconds: float, rate: int, seed: int, level: float = 0.1) -> np.ndarray:
    """A voice-like answer (harmonics of a wandering pitch, syllables, a 10 ms attack), float -1..1."""
    rng = np.random.default_rng(seed)
    t = np.arange(round(seconds * rate)) / rate
    pitch = 140 + 30 * np.sin(2 * np.pi * 0.7 * t + rng.uniform(0, 6))
    phase = 2 * np.pi * np.cumsum(pitch) / rate
    voice = sum(np.sin(k * phase) / k for k in range(1, 12))
    syllables = 0.55 + 0.45 * np.sin(2 * np.pi * 3.5 * t - np.pi / 2 + 0.3) ** 2
    attack = np.minimum(1.0, t / 0.010)
    release = np.minimum(1.0, (t[-1] - t) / 0.020)
    x = voice * syllables * attack * release
    return np.asarray(level * x / np.sqrt(np.mean(np.square(x))), dtype=np.float64)


def spoken_part(q: PlayedQuestion, rate: int) -> np.ndarray:
    """A question's speech alone (its leading and trailing silence cut), at ``rate``: real speech to answer with."""
    pcm = clip_at(q, rate)
    loud = np.nonzero(np.abs(pcm.astype(np.int32)) > THRESHOLD)[0]
    return np.asarray(pcm[loud[0] : loud[-1] + 1], dtype=np.float64) / 32768


def clip_at(q: PlayedQuestion, rate: int) -> np.ndarray:
    """The question's audio at ``rate`` as int16, as the microphone channel holds it."""
    pcm = q.pcm.astype(np.float64)
    if rate != q.sample_rate:
        pcm = soxr.resample(pcm, q.sample_rate, rate, quality="HQ")
    return np.round(np.clip(pcm, -1, 1) * 32768).clip(-32768, 32767).astype(np.int16)


def build(
    questions: Sequence[PlayedQuestion],
    plan: Sequence[tuple[int, float, float]],
    rate: int = 16000,
    lead_s: float = 0.7,
    pause_s: float = 0.8,
    seed: int = 1,
    answers: Sequence[np.ndarray] = (),
) -> Built:
    """A stereo recording of ``plan``: per turn (question index, silence in s after its end of speech, answer
    length in s); the next question starts ``pause_s`` after the answer ends (or the clip, whichever is later).
    ``answers`` (floats at ``rate``), when given, are said in turn instead of synthetic ones."""
    left: list[tuple[int, np.ndarray]] = []
    right: list[tuple[int, np.ndarray]] = []
    turns = []
    rounds: dict[int, int] = {}
    at = round(lead_s * rate)
    for n, (index, silence_s, answer_s) in enumerate(plan):
        q = questions[index]
        clip = clip_at(q, rate)
        end = at + round(q.speech_end_s * rate)
        spoken = answers[n % len(answers)] if answers else answer(answer_s, rate, seed + n)
        said = np.round(spoken * 32768).clip(-32768, 32767).astype(np.int16)
        begins = end + round(silence_s * rate)
        loud = np.nonzero(np.abs(said.astype(np.int32)) > THRESHOLD)[0]
        rounds[index] = rounds.get(index, 0) + 1
        turns.append(Turn(q.question_id, rounds[index], end, begins + int(loud[0]), begins + int(loud[-1])))
        left.append((at, clip))
        right.append((begins, said))
        at = max(at + len(clip), begins + len(said)) + round(pause_s * rate)
    samples = np.zeros((at, 2), dtype=np.int16)
    for channel, parts in ((0, left), (1, right)):
        for start, x in parts:
            samples[start : start + len(x), channel] = x
    return Built(samples, rate, tuple(turns))
