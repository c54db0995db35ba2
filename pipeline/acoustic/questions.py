"""The questions the lab played: each clip's audio as the device sent it, and where its speech ends.

A question's audio is its fixture file read as a replay reads it (``pipeline.settings.audio``: 16 kHz mono,
padded to whole 60 ms frames), because that is what the emulator's microphone channel holds and what a
speaker in a room plays. Its end of speech is the lab's own definition (``pipeline.run.device_side.speech_end_ms``:
the run's VAD over the clip, built from the run's configuration as the replay builds it), so the acoustic
figures and the trace figures start their silence at the same moment. A clip whose VAD finds no end ends
its speech at the clip's end, as the emulated device does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np

from pipeline.events import FRAME_MS, SAMPLE_RATE, AudioFrame
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
    """One question as it was played: its id, its audio (float32 mono, -1..1), the audio's rate, and the
    end of its speech in seconds from the clip's first sample."""

    question_id: str
    pcm: np.ndarray
    sample_rate: int
    speech_end_s: float


def load_questions(folder: Path, config: Config | None = None, cache: Path | None = None) -> list[PlayedQuestion]:
    """The fixtures folder's questions with their ends of speech, found by ``config``'s VAD (the default
    configuration's when None; its model from ``cache``, the packaged models' folder, by default the
    user's)."""
    cfg = config if config is not None else Config()
    fixtures = load_fixtures(folder).questions
    clips = [_frames(q) for q in fixtures]
    engines = load_engines(cfg, cache if cache is not None else default_cache({}), None, ("vad",))
    try:
        ends = asyncio.run(_speech_ends(cfg, engines, fixtures, clips))
    finally:
        engines.close()
    return [
        PlayedQuestion(q.id, _pcm(frames), SAMPLE_RATE, end / 1000)
        for q, frames, end in zip(fixtures, clips, ends, strict=True)
    ]


def _frames(q: Fixture) -> tuple[AudioFrame, ...]:
    try:
        return load_audio(q.audio).frames
    except BadAudio as exc:
        raise QuestionError(f"question {q.id!r}: {exc}") from None


async def _speech_ends(
    cfg: Config, engines: Engines, fixtures: Sequence[Fixture], clips: Sequence[tuple[AudioFrame, ...]]
) -> list[int]:
    ends = []
    for q, frames in zip(fixtures, clips, strict=True):
        vad = build_vad(cfg, engines, q)
        end = await speech_end_ms(vad, frames)
        ends.append(end if end is not None else len(frames) * FRAME_MS)
    return ends


def _pcm(frames: Sequence[AudioFrame]) -> np.ndarray:
    pcm = np.frombuffer(b"".join(f.pcm for f in frames), dtype="<i2")
    return (pcm.astype(np.float32) / 32768.0).astype(np.float32)
