"""A timed-out turn's engine work does not leak into the next turn: it is waited for, and the wait is recorded."""

from __future__ import annotations

import asyncio
import time

import numpy as np

from labtools.cloud_turns import FRAMES, InstantPlayer
from pipeline.clock import RealClock
from pipeline.events import LatencyProfile, StageInfo
from pipeline.run.turn import ServerStages, run_turn
from stages.asr.utterance import UtteranceAsr, UtteranceEngine
from stages.llm import LlmSettings, LlmStage
from stages.llm.scripted import ScriptedBackend, ScriptedReply
from stages.sentences import SentenceSplitter
from stages.tts.stub import StubTts
from stages.vad.endpointer import FrameVad
from stages.vad.energy import EnergyClassifier


class SlowEngine(UtteranceEngine):
    """Decodes in the given seconds, one call after another (a real engine's thread is as busy)."""

    def __init__(self, seconds: list[float]) -> None:
        super().__init__("slow")
        self.seconds = seconds

    def decode(self, audio: np.ndarray, language: str) -> tuple[str, str]:
        time.sleep(self.seconds.pop(0))
        return "hello", language


def stages(engine: SlowEngine) -> ServerStages:
    return ServerStages(
        vad=FrameVad(EnergyClassifier(), silence_ms=120),
        asr=UtteranceAsr(engine, "en", StageInfo("asr", "slow"), ("en",)),
        llm=LlmStage(ScriptedBackend(ScriptedReply("Hi."), LatencyProfile()), LlmSettings()),
        sentences=SentenceSplitter(),
        tts=StubTts(LatencyProfile(), real_time_factor=0.0),
    )


def test_a_timed_out_turns_decode_is_waited_for_and_the_next_turn_starts_clean() -> None:
    engine = SlowEngine([0.6, 0.05])

    async def two_turns() -> tuple[object, object]:
        clock = RealClock()
        first = await run_turn(FRAMES, stages(engine), clock, realtime=False, timeout_s=0.2, player=InstantPlayer())
        second = await run_turn(FRAMES, stages(engine), clock, realtime=False, timeout_s=5.0, player=InstantPlayer())
        return first, second

    first, second = asyncio.run(two_turns())
    assert first.error_type == "timeout"  # type: ignore[attr-defined]
    assert first.leftover_ns > 0.3e9  # type: ignore[attr-defined]  # the decode's remaining ~0.4 s, waited for
    assert second.ok  # type: ignore[attr-defined]
    asr = second.asr  # type: ignore[attr-defined]
    assert (asr.end_ns - asr.start_ns) / 1e9 < 0.3  # its own 0.05 s decode, not the first turn's leftover
