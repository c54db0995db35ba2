"""An ASR that transcribes the whole utterance once the end-point comes (Whisper, FunASR).

It gathers the frames the VAD passed and, at the end-point, hands them to its
engine in the engine's worker thread, so playback and other audio keep flowing
meanwhile. Its time is spent after the end-point and lies on the critical path
(METHOD M4). What every such engine shares (the thread, one decode at a time, PCM
to float samples) lives in ``UtteranceEngine``; an engine only decodes.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from pipeline.events import AudioFrame, Event, SpeechEnd, StageInfo, Transcript
from stages.threads import on_thread


class UtteranceEngine:
    """A loaded recogniser, shared by every turn; one decode at a time on its own thread.

    Always the same thread: native runtimes keep a thread team per calling thread, and
    teams left behind by other threads spin beside the new one (see LlamaEngine).
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self._lock = threading.Lock()
        self.thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="asr")

    def transcribe(self, pcm: bytes, language: str) -> tuple[str, str]:
        audio = np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32768.0
        with self._lock:
            return self.decode(audio, language)

    def decode(self, audio: np.ndarray, language: str) -> tuple[str, str]:
        """Text of ``audio`` (16 kHz mono float32 in [-1, 1]) and its language; ``language`` "" asks the
        engine to detect it."""
        raise NotImplementedError


class UtteranceAsr:
    """The ASR stage over an ``UtteranceEngine``: one transcript per turn, decoded at the end-point on the engine's
    thread; an implementation only names its engine, its record and its languages."""

    def __init__(self, engine: UtteranceEngine, language: str, info: StageInfo, languages: tuple[str, ...]) -> None:
        if language and language not in languages:
            raise ValueError(f"{info.impl} ASR here supports {', '.join(languages)}, not {language!r}")
        self.engine = engine
        self.language = language
        self.info = info

    async def run(self, events: AsyncIterator[Event]) -> AsyncIterator[Event]:
        pcm = await utterance(events)
        if pcm is not None:
            text, language = await on_thread(self.engine.thread, self.engine.transcribe, pcm, self.language)
            yield Transcript(text=text, language=self.language or language)


async def utterance(events: AsyncIterator[Event]) -> bytes | None:
    """The PCM of the frames the VAD passed, once its end-point comes; None when the input ends without one."""
    pcm = bytearray()
    async for event in events:
        if isinstance(event, AudioFrame):
            pcm += event.pcm
        elif isinstance(event, SpeechEnd):
            return bytes(pcm)
    return None
