"""A question typed rather than spoken (xiaozhi's ``listen detect``): no audio to end-point or recognise.

The real server answers the text of a ``detect`` as if it had been recognised, so a typed turn
runs the same LLM, sentences and TTS with these two in front: a VAD that hears nothing and an
ASR whose transcript is the text, emitted as soon as its (empty) input ends.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from pipeline.events import Event, StageInfo, Transcript


class NoAudio:
    """The VAD of a typed turn: it passes nothing on (a typed turn's uplink carries no audio)."""

    def __init__(self) -> None:
        self.info = StageInfo(role="vad", impl="none")

    async def run(self, events: AsyncIterator[Event]) -> AsyncIterator[Event]:
        async for _ in events:
            pass
        return
        yield  # an async generator that yields nothing


class TypedText:
    """The ASR of a typed turn: the text as its transcript."""

    def __init__(self, text: str, language: str) -> None:
        self.text, self.language = text, language
        self.info = StageInfo(role="asr", impl="typed")

    async def run(self, events: AsyncIterator[Event]) -> AsyncIterator[Event]:
        async for _ in events:
            pass
        yield Transcript(text=self.text, language=self.language)
