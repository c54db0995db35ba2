"""The oracle ASR: after the end-point, it waits a scripted latency and emits the reference text.

Its times are simulated (rows say so in ``scripted``; reports label them estimated),
and its error rate is zero by construction.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from pipeline.events import Event, LatencyProfile, SpeechEnd, StageInfo, Transcript
from stages.registry import Implementation, TurnInputs


class OracleAsr:
    """The ASR stage that knows the answer: at the end-point, one scripted delay, then the question's reference text."""

    def __init__(self, text: str, language: str, latency: LatencyProfile, salt: int = 0) -> None:
        self.text = text
        self.language = language
        self.latency = latency
        self.salt = salt
        self.info = StageInfo(role="asr", impl="oracle", scripted=True)

    async def run(self, events: AsyncIterator[Event]) -> AsyncIterator[Event]:
        async for event in events:
            if isinstance(event, SpeechEnd):
                await asyncio.sleep(next(self.latency.delays_s(self.salt)))
                yield Transcript(text=self.text, language=self.language)
                return


@dataclass(frozen=True, slots=True)
class OracleSettings:
    """The ``[asr]`` keys of ``impl = "oracle"``: its latency, as data."""

    latency: LatencyProfile = field(default_factory=lambda: LatencyProfile(first_ms=300, jitter_ms=40, seed=1))


def _build(s: OracleSettings, _engine: None, turn: TurnInputs) -> OracleAsr:
    return OracleAsr(turn.text, turn.language, s.latency.salted(turn.salt))


IMPLEMENTATION = Implementation("asr", "oracle", OracleSettings, _build, scripted=True)
