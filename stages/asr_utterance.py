"""An ASR that transcribes the whole utterance once the end-point comes (Whisper, FunASR).

It gathers the frames the VAD passed and, at the end-point, hands them to its
engine in a worker thread, so playback and other audio keep flowing meanwhile.
Its time is spent after the end-point and lies on the critical path (METHOD M4).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from concurrent.futures import Executor
from typing import Protocol

from pipeline.events import AudioFrame, Event, SpeechEnd, StageInfo, Transcript


class UtteranceEngine(Protocol):
    name: str

    @property
    def thread(self) -> Executor:
        """Its own single thread: native runtimes keep a thread team per calling thread, and
        teams left behind by other threads spin beside the new one (see LlamaEngine)."""

    def transcribe(self, pcm: bytes, language: str) -> str: ...


class UtteranceAsr:
    def __init__(self, engine: UtteranceEngine, language: str, info: StageInfo, languages: tuple[str, ...]) -> None:
        if language not in languages:
            raise ValueError(f"{info.impl} ASR here supports {', '.join(languages)}, not {language!r}")
        self.engine = engine
        self.language = language
        self.info = info

    async def run(self, events: AsyncIterator[Event]) -> AsyncIterator[Event]:
        pcm = bytearray()
        async for event in events:
            if isinstance(event, AudioFrame):
                pcm += event.pcm
            elif isinstance(event, SpeechEnd):
                loop = asyncio.get_running_loop()
                text = await loop.run_in_executor(self.engine.thread, self.engine.transcribe, bytes(pcm), self.language)
                yield Transcript(text=text, language=self.language)
                return
