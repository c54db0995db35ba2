"""Piper TTS with its packaged English voice: a real neural voice (first audio 0.2-0.3 s, docs/reference/stack.md).

Synthesis runs in a worker thread; each chunk piper yields is framed and sent on
at once.
"""

from __future__ import annotations

import re
import threading
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.events import Event, Sentence, StageInfo
from stages.registry import Implementation, Loaded, Models, TurnInputs, load_file
from stages.threads import on_thread
from stages.tts.frames import frames_of

_CJK = re.compile(r"[\u3400-\u9fff]")
PIPER_LANGUAGES = ("en",)


class PiperEngine:
    """One loaded piper voice, shared by every turn; one synthesis at a time on its own thread."""

    def __init__(self, voice_dir: Path) -> None:
        from piper import PiperVoice

        models = sorted(voice_dir.glob("*.onnx")) if voice_dir.is_dir() else [voice_dir]
        if not models or not models[0].is_file():
            raise ValueError(f"{voice_dir}: no piper voice (.onnx) found")
        try:
            self._voice: Any = PiperVoice.load(models[0])
        except Exception as exc:  # piper/onnxruntime raise various types for bad files
            raise ValueError(f"{models[0]}: cannot load piper voice ({exc})") from None
        self.rate = int(self._voice.config.sample_rate)
        self.name = models[0].stem
        self._lock = threading.Lock()
        self.thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tts")

    def synthesize(self, text: str) -> list[np.ndarray]:
        with self._lock:
            return [np.frombuffer(chunk.audio_int16_bytes, dtype="<i2") for chunk in self._voice.synthesize(text)]


class PiperTts:
    """The TTS stage over a loaded ``PiperEngine``: each sentence synthesised on the engine's thread, then sent on
    in 60 ms frames; a Chinese sentence fails the turn, as the voice cannot speak it."""

    def __init__(self, engine: PiperEngine) -> None:
        self.engine = engine
        self.info = StageInfo(role="tts", impl="piper", attributes=(("tts.voice", engine.name),))

    async def run(self, events: AsyncIterator[Event]) -> AsyncIterator[Event]:
        async for event in events:
            if not isinstance(event, Sentence):
                continue
            if _CJK.search(event.text):
                raise ValueError(f"piper voice {self.engine.name} cannot speak Chinese: {event.text!r}")
            chunks = await on_thread(self.engine.thread, self.engine.synthesize, event.text)
            async for frame in frames_of(chunks, self.engine.rate, event.index):
                yield frame


@dataclass(frozen=True, slots=True)
class PiperSettings:
    """The ``[tts]`` keys of ``impl = "piper"``: the voice."""

    voice: str = "piper-joe"


def _load(s: PiperSettings, models: Models) -> Loaded:
    return load_file(models, s.voice, PiperEngine)


def _build(_s: PiperSettings, engine: PiperEngine, _turn: TurnInputs) -> PiperTts:
    return PiperTts(engine)


IMPLEMENTATION = Implementation("tts", "piper", PiperSettings, _build, load=_load, languages=PIPER_LANGUAGES)
