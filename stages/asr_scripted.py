"""A scripted ASR: after the end-point, it waits a scripted latency and emits a given text."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from pipeline.events import Event, SpeechEnd, StageInfo, Transcript
from stages.latency import LatencyProfile


class ScriptedAsr:
    def __init__(self, text: str, language: str, latency: LatencyProfile, salt: int = 0) -> None:
        self.text = text
        self.language = language
        self.latency = latency
        self.salt = salt
        self.info = StageInfo(role="asr", impl="scripted", scripted=True)

    async def run(self, events: AsyncIterator[Event]) -> AsyncIterator[Event]:
        async for event in events:
            if isinstance(event, SpeechEnd):
                await asyncio.sleep(next(self.latency.delays_s(self.salt)))
                yield Transcript(text=self.text, language=self.language)
                return
