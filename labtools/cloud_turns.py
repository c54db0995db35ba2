"""Condition A's harness: real turns against the emulated cloud, optionally behind the link emulator.

Shared by the tests of the cloud path (``tests/endpoints/cloud/test_chat_server.py``,
``tests/stages/llm/openai/test_client_calls.py``, ``tests/run/test_turn_leftover.py``) and
``scripts/bench_network.py``, which measures the same turns at length; here rather than under ``tests/``, as a
script may import nothing of the tests.

Turns run on the real clock (real sockets cannot run on the virtual one) with fast
audio pacing and an instant player, so a turn costs little more than its LLM call.
Rows come from the traces, as in a real run: timeline -> spans -> OTLP JSON -> rows.
"""

from __future__ import annotations

import math
import tempfile
from array import array
from collections.abc import AsyncIterator
from pathlib import Path

from pipeline.analysis.read import rows_from_spans
from pipeline.analysis.traces import spans_from_traces_data
from pipeline.clock import Clock, RealClock
from pipeline.events import FRAME_SAMPLES, AudioFrame, AudioOut, Event, LatencyProfile, StageInfo
from pipeline.records.turn_row import TurnRow
from pipeline.run.turn import ServerStages, run_turn
from pipeline.tracing import names
from pipeline.tracing.export import Tracing
from pipeline.tracing.timeline import TurnTimeline
from stages.asr.oracle import OracleAsr
from stages.llm import ChatBackend, LlmSettings, LlmStage, Mode, ToolSpec
from stages.llm.prompts import ScriptedTools
from stages.sentences import SentenceSplitter, SplitRules
from stages.tts.stub import StubTts
from stages.vad.endpointer import FrameVad
from stages.vad.energy import EnergyClassifier

_SILENCE = bytes(FRAME_SAMPLES * 2)
_TONE = array("h", (int(8000 * math.sin(2 * math.pi * 300 * n / 16000)) for n in range(FRAME_SAMPLES))).tobytes()
FRAMES = [AudioFrame(seq=i, pcm=pcm) for i, pcm in enumerate([_SILENCE] * 3 + [_TONE] * 8 + [_SILENCE] * 8)]
SET_LIGHT = ToolSpec("set_light", "Turn a light on or off.", '{"type":"object","properties":{"on":{"type":"boolean"}}}')


class InstantPlayer:
    """Hands every frame on at once: the test is about the LLM segment, not playback."""

    info = StageInfo(role="player", impl="instant")

    async def run(self, events: AsyncIterator[Event]) -> AsyncIterator[Event]:
        async for event in events:
            if isinstance(event, AudioOut):
                yield event


def cloud_stages(
    backend: ChatBackend, question: str, mode: Mode = "single", max_tokens: int = 24, tools: bool = False
) -> ServerStages:
    return ServerStages(
        vad=FrameVad(EnergyClassifier(), silence_ms=300),
        asr=OracleAsr(question, "zh" if any("\u3400" <= c <= "\u9fff" for c in question) else "en", LatencyProfile()),
        llm=LlmStage(
            backend,
            LlmSettings(mode=mode, max_tokens=max_tokens),
            tools=(SET_LIGHT,) if tools else (),
            executor=ScriptedTools(LatencyProfile()) if tools else None,
            impl="openai",
            scripted=False,
        ),
        sentences=SentenceSplitter(SplitRules(first_cut_at_comma=False)),
        tts=StubTts(LatencyProfile(), real_time_factor=0.0),
    )


async def cloud_turn(
    backend: ChatBackend,
    question: str = "What time is it?",
    mode: Mode = "single",
    tools: bool = False,
    clock: Clock | None = None,
    timeout_s: float = 20.0,
) -> TurnTimeline:
    stages = cloud_stages(backend, question, mode=mode, tools=tools)
    return await run_turn(FRAMES, stages, clock or RealClock(), False, timeout_s, InstantPlayer())


class TraceRows:
    """Turns -> one trace file -> rows, exactly as a run computes them."""

    def __init__(self, folder: Path | None = None) -> None:
        self._tmp = None if folder else tempfile.TemporaryDirectory()
        base = folder or Path(self._tmp.name if self._tmp else ".")
        self.tracing = Tracing(base / "trace.jsonl", "test-cloud")
        self.count = 0

    @property
    def path(self) -> Path:
        return self.tracing.trace_path

    def row(self, timeline: TurnTimeline, condition: str = "A", note: str = "") -> TurnRow:
        self.count += 1
        attributes: dict[str, str | int | bool] = {
            names.SCHEMA: names.SCHEMA_VERSION,
            names.RUN_ID: "test",
            names.CONDITION: condition,
            names.CONFIG_ID: "test",
            names.CLOCK: "real",
            names.QUESTION_ID: f"q{self.count}",
            names.ROUND: 1,
            names.WARMUP: False,
            names.NOTE: note,
        }
        line = self.tracing.emit_turn(timeline, dict(attributes))
        [row] = rows_from_spans(spans_from_traces_data(line))
        return row

    def close(self) -> None:
        self.tracing.shutdown()
        if self._tmp is not None:
            self._tmp.cleanup()


def network_ms(row: TurnRow) -> float:
    """The network segment of a single-call turn: client first token minus the server's own first token."""
    first, queue, prompt = row.first_token_ms, row.server_queue_ms, row.server_prompt_ms
    assert isinstance(first, float) and isinstance(queue, float) and isinstance(prompt, float), row
    return first - (queue + prompt)
