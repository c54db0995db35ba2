"""Capability beside latency for each packaged LLM (METHOD M18).

Asks every model the fixture questions as text (the reference transcripts, so
ASR errors do not blur the comparison), through the pipeline's own LLM stage and
recorder, and prints side by side: first-token median and P90, tokens/s,
expected-keyword score and tool-call accuracy. A smaller model's speed is never
shown without its weaker answers.

Run: ``python scripts/compare_models.py [--questions N] [--models a,b,c]``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
from collections.abc import AsyncIterator
from pathlib import Path

os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")

from pipeline.analysis.numbers import median, quantile
from pipeline.analysis.textmetrics import keyword_score
from pipeline.clock import RealClock
from pipeline.events import (
    Event,
    LatencyProfile,
    TokenDelta,
    Transcript,
)
from pipeline.run.recorder import TurnRecorder
from pipeline.settings.fixtures import Question, load_questions
from pipeline.settings.models import REGISTRY, default_cache, resolve
from stages.llm import LlmSettings, LlmStage
from stages.llm.llama import LlamaBackend, LlamaEngine, LlamaSettings
from stages.llm.prompts import (
    DEVICE_TOOLS,
    SYSTEM_PROMPTS,
    ScriptedTools,
)

ROOT = Path(__file__).resolve().parent.parent

CACHE = default_cache(os.environ)


async def ask(engine: LlamaEngine, name: str, q: Question) -> tuple[float | None, float | None, str, str]:
    """First token (ms), tokens/s, tools called and the spoken answer, as the pipeline's recorder saw them."""
    stage = LlmStage(
        LlamaBackend(engine, name),
        LlmSettings(max_tokens=64, system_prompt=SYSTEM_PROMPTS[q.language]),
        tools=DEVICE_TOOLS,
        executor=ScriptedTools(LatencyProfile()),
        impl="llama",
        scripted=False,
    )
    recorder = TurnRecorder(RealClock())

    async def source() -> AsyncIterator[Event]:
        yield Transcript(q.text, q.language)

    answer = "".join([e.text async for e in recorder.wrap("llm", stage, source()) if isinstance(e, TokenDelta)])
    calls = recorder.timeline.calls
    first = calls[0]
    ft = (first.first_token_ns - first.start_ns) / 1e6 if first.first_token_ns else None
    stamps = [t for c in calls for t in c.token_ns]
    rate = (len(stamps) - 1) / ((stamps[-1] - stamps[0]) / 1e9) if len(stamps) > 1 and stamps[-1] > stamps[0] else None
    tools = " ".join(c.tool_name for c in calls if c.tool_name)
    return ft, rate, tools, answer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=12)
    parser.add_argument("--models", default=",".join(n for n, m in REGISTRY.items() if m.role == "llm"))
    args = parser.parse_args()
    questions = load_questions(ROOT / "audio_fixtures").questions[: args.questions]
    print(f"{len(questions)} fixture questions as text, tools offered, max_tokens 64, 2 threads")
    print(f"{'model':<14}{'quant':>8}{'first token median':>20}{'P90':>9}{'tokens/s':>10}{'keywords':>10}{'tools':>8}")
    for name in args.models.split(","):
        engine = LlamaEngine(resolve(name, CACHE), LlamaSettings(threads=2))
        firsts, rates, scores, tool_hits, tool_asks = [], [], [], 0, 0
        for q in questions:
            ft, rate, tools, answer = asyncio.run(ask(engine, name, q))
            firsts += [ft] if ft is not None else []
            rates += [rate] if rate is not None else []
            score = keyword_score(answer + " " + tools, q.keywords)
            scores += [score] if score is not None else []
            if q.tool:
                tool_asks += 1
                tool_hits += int(q.tool in tools.split())
        firsts.sort()
        print(
            f"{name:<14}{engine.info.quantisation:>8}{median(firsts):>17.1f} ms"
            f"{quantile(firsts, 0.9):>9.1f}"
            f"{median(rates):>10.1f}{statistics.mean(scores):>10.2f}{f'{tool_hits}/{tool_asks}':>8}"
        )
    print("keywords: share of expected keyword groups found in the answer (tool names count); tools: right tool called")


if __name__ == "__main__":
    main()
