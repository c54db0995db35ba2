"""The questions the lab played: each clip's audio as the device sent it, and where its speech ends.

A question's audio is its fixture file read as a replay reads it (``pipeline.settings.audio``: 16 kHz mono,
padded to whole 60 ms frames), because that is what the emulator's microphone channel holds and what a
speaker in a room plays. Its end of speech is where its user really finished where the question carries a
truth (``truth.csv``, ``pipeline.records.truth``: written when the clip was made, so the figure does not
move with the VAD; the traces mark the same moment as the true end of speech). A question without one ends
its speech where the lab's own definition does (``pipeline.run.device_side.speech_end_ms``: the run's VAD
over the clip, built from the run's configuration as the replay builds it), so the acoustic figures and
the trace figures start their silence at the same moment; a clip whose VAD finds no end ends its speech at
the clip's end, as the emulated device does. Each question says which end it has (``speech_end_from``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np

from pipeline.events import FRAME_MS, SAMPLE_RATE, AudioFrame
from pipeline.records.acoustic import FROM_TRUTH, FROM_VAD
from pipeline.run.assembly import Engines, build_vad, load_engines
from pipeline.run.device_side import speech_end_ms
from pipeline.settings.audio import BadAudio, load_audio
from pipeline.settings.config import Config
from pipeline.settings.fixtures import Question as Fixture
from pipeline.settings.fixtures import load_questions as load_fixtures
from pipeline.settings.models import default_cache


class QuestionError(ValueError):
    """The questions cannot be used: a folder without them, or a clip that cannot be read (named)."""


class PlayedQuestion(NamedTuple):
    """One question as it was played: its id, its audio (float32 mono, -1..1), the audio's rate, the end of
    its speech in seconds from the clip's first sample, and where that end came from (``FROM_TRUTH`` or
    ``FROM_VAD``: any end found from the clip's sound, as the wake word's is, counts as the VAD's)."""

    question_id: str
    pcm: np.ndarray
    sample_rate: int
    speech_end_s: float
    speech_end_from: str = FROM_VAD


def load_questions(folder: Path, config: Config | None = None, cache: Path | None = None) -> list[PlayedQuestion]:
    """The fixtures folder's questions with their ends of speech: a question's truth where it has one, else
    found by ``config``'s VAD (the default configuration's when None; its model from ``cache``, the packaged
    models' folder, by default the user's). The VAD is loaded only where a question has no truth."""
    cfg = config if config is not None else Config()
    fixtures = load_fixtures(folder).questions
    clips = [_frames(q) for q in fixtures]
    ends = _vad_ends(cfg, cache, [(q, frames) for q, frames in zip(fixtures, clips, strict=True) if q.truth is None])
    return [_played(q, frames, ends) for q, frames in zip(fixtures, clips, strict=True)]


def _played(q: Fixture, frames: tuple[AudioFrame, ...], vad_ends: dict[str, int]) -> PlayedQuestion:
    if q.truth is not None:
        return PlayedQuestion(q.id, _pcm(frames), SAMPLE_RATE, q.truth.speech_end_ms / 1000, FROM_TRUTH)
    return PlayedQuestion(q.id, _pcm(frames), SAMPLE_RATE, vad_ends[q.id] / 1000, FROM_VAD)


def _vad_ends(
    cfg: Config, cache: Path | None, without_truth: Sequence[tuple[Fixture, tuple[AudioFrame, ...]]]
) -> dict[str, int]:
    """The VAD's end of speech (ms) of each question without a truth, by id; none to find, no VAD loaded (a
    folder whose every question has a truth needs no model)."""
    if not without_truth:
        return {}
    engines = load_engines(cfg, cache if cache is not None else default_cache({}), None, ("vad",))
    try:
        return asyncio.run(_speech_ends(cfg, engines, without_truth))
    finally:
        engines.close()


def _frames(q: Fixture) -> tuple[AudioFrame, ...]:
    try:
        return load_audio(q.audio).frames
    except BadAudio as exc:
        raise QuestionError(f"question {q.id!r}: {exc}") from None


async def _speech_ends(
    cfg: Config, engines: Engines, clips: Sequence[tuple[Fixture, tuple[AudioFrame, ...]]]
) -> dict[str, int]:
    ends = {}
    for q, frames in clips:
        vad = build_vad(cfg, engines, q)
        end = await speech_end_ms(vad, frames)
        ends[q.id] = end if end is not None else len(frames) * FRAME_MS
    return ends


def _pcm(frames: Sequence[AudioFrame]) -> np.ndarray:
    pcm = np.frombuffer(b"".join(f.pcm for f in frames), dtype="<i2")
    return (pcm.astype(np.float32) / 32768.0).astype(np.float32)
