"""Scripted turns for tests: synthetic audio and scripted stages with exact latencies."""

from __future__ import annotations

import math
from array import array

from pipeline.clock import VirtualClock, run_on_clock
from pipeline.events import FRAME_SAMPLES, AudioFrame, LatencyProfile
from pipeline.run.turn import ServerStages, run_turn
from pipeline.tracing.timeline import TurnTimeline
from stages.asr.oracle import OracleAsr
from stages.llm import LlmSettings, LlmStage, Mode
from stages.llm.prompts import DEVICE_TOOLS, ScriptedTools
from stages.llm.scripted import ScriptedBackend, ScriptedReply
from stages.sentences import SentenceSplitter, SplitRules
from stages.tts.stub import StubTts
from stages.vad.endpointer import FrameVad
from stages.vad.energy import EnergyClassifier

NO_COMMA = SplitRules(first_cut_at_comma=False)
SILENCE = bytes(FRAME_SAMPLES * 2)
TONE = array("h", (int(8000 * math.sin(2 * math.pi * 300 * n / 16000)) for n in range(FRAME_SAMPLES))).tobytes()


def utterance(lead_frames: int = 10, speech_frames: int = 20, tail_frames: int = 20) -> list[AudioFrame]:
    """Silence, a tone standing in for speech, silence: 60 ms frames."""
    kinds = [SILENCE] * lead_frames + [TONE] * speech_frames + [SILENCE] * tail_frames
    return [AudioFrame(seq=i, pcm=pcm) for i, pcm in enumerate(kinds)]


def stages(
    reply: ScriptedReply,
    mode: Mode = "single",
    asr_ms: float = 300,
    ttft_ms: float = 200,
    per_token_ms: float = 50,
    tts_first_ms: float = 100,
    rtf: float = 0.5,
    tools: bool = False,
    silence_ms: int = 600,
    rules: SplitRules = NO_COMMA,
) -> ServerStages:
    return ServerStages(
        vad=FrameVad(EnergyClassifier(), silence_ms=silence_ms),
        asr=OracleAsr("question", "en", LatencyProfile(asr_ms)),
        llm=LlmStage(
            ScriptedBackend(reply, LatencyProfile(ttft_ms, per_token_ms)),
            LlmSettings(mode=mode),
            tools=DEVICE_TOOLS if tools else (),
            executor=ScriptedTools(LatencyProfile(40)) if tools else None,
        ),
        sentences=SentenceSplitter(rules),
        tts=StubTts(LatencyProfile(tts_first_ms), rtf),
    )


def run_virtual(server: ServerStages, frames: list[AudioFrame] | None = None, timeout_s: float = 60) -> TurnTimeline:
    clock = VirtualClock()
    return run_on_clock(run_turn(frames or utterance(), server, clock, timeout_s=timeout_s), clock)


def ms(tl: TurnTimeline, t: int | None) -> float | None:
    """A timeline moment in ms since the turn started."""
    return None if t is None else (t - tl.start_ns) / 1e6


class StepClock:
    """A clock the test moves: each reading ``step_ns`` after the one before (1 ms: a service's timings come
    out exact), or with ``step_ns=0`` still until the test sets ``t``."""

    kind = "virtual"

    def __init__(self, step_ns: int = 1_000_000, t: int = 1_700_000_000_000_000_000) -> None:
        self.step_ns = step_ns
        self.t = t

    def now_ns(self) -> int:
        self.t += self.step_ns
        return self.t
