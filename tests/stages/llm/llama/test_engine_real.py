"""The in-process llama.cpp backend with the packaged model: answers stream token by token with tools
offered, a tool call is recognised whole, and the prompt cache is what the setting says (recorded per call)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from pipeline.clock import RealClock
from pipeline.events import CallEnd, Event, LatencyProfile, ToolCall, Transcript
from pipeline.tracing.timeline import CallTiming
from stages.llm import ChatRequest, LlmSettings, LlmStage, Message
from stages.llm.llama import LlamaBackend, LlamaEngine
from stages.llm.llama.cache import PromptCache
from stages.llm.prompts import DEVICE_TOOLS, SYSTEM_PROMPTS, ScriptedTools
from tests import real_models as models
from tests.harness import run_stage

pytestmark = pytest.mark.real


def timed_calls(question: str, language: str = "en") -> tuple[list[CallTiming], list[Event]]:
    """One answer through the LLM stage with the device tools offered, timed by the recorder."""
    stage = LlmStage(
        LlamaBackend(models.llama(), "qwen2.5-coder-0.5b"),
        LlmSettings(max_tokens=48, system_prompt=SYSTEM_PROMPTS[language]),
        tools=DEVICE_TOOLS,
        executor=ScriptedTools(LatencyProfile()),
        impl="llama",
        scripted=False,
    )
    run = run_stage(stage, [Transcript(question, language)], RealClock())
    return run.timeline.calls, run.events


def test_a_plain_answer_arrives_token_by_token_spread_over_its_generation_with_tools_offered() -> None:
    calls, events = timed_calls("What is the capital of France?")
    [call] = calls
    [end] = [e for e in events if isinstance(e, CallEnd)]
    spoken = [
        t for t, e in zip(call.token_ns[1:], [e for e in events if type(e).__name__ == "TokenDelta"][1:], strict=False)
    ]
    assert end.output_tokens >= 4
    arrivals = call.token_ns[1:]  # the first is the call's first chunk (empty)
    assert len(set(arrivals)) == len(arrivals) == len(spoken)  # streaming ratio 1.0: every token at its own time
    assert call.first_token_ns is not None and call.end_ns is not None
    generation_ms = dict(end.server_timings)["predicted_ms"]
    spread_ms = (arrivals[-1] - arrivals[0]) / 1e6
    assert spread_ms > 0.5 * generation_ms * (len(arrivals) - 1) / end.output_tokens, (spread_ms, generation_ms)


def test_a_tool_call_is_recognised_whole_and_timed_from_its_first_output() -> None:
    calls, events = timed_calls("Please turn on the light in the kitchen.")
    [tool] = [e for e in events if isinstance(e, ToolCall)]
    assert tool.name == "set_light" and "kitchen" in tool.arguments
    first = calls[0]
    assert first.first_token_ns is not None and first.tool_call_ns is not None
    assert first.first_token_ns < first.tool_call_ns  # the call's first output, then its completion
    assert len(calls) == 2 and calls[1].purpose == "after_tool"


@pytest.fixture
def policy() -> Iterator[LlamaEngine]:
    engine = models.llama()
    before = engine.cache.policy
    yield engine
    engine.cache.policy = before


def cached_after_two_calls(engine: LlamaEngine, policy: PromptCache) -> tuple[int | None, int]:
    """Cached prompt tokens of the second of two calls (en, then en again after a zh call), and the prefix."""
    engine.cache.policy = policy
    backend = LlamaBackend(engine, "qwen2.5-coder-0.5b")

    def ask(language: str, text: str) -> CallEnd:
        request = ChatRequest(
            (Message("system", SYSTEM_PROMPTS[language]), Message("user", text)), 8, tools=DEVICE_TOOLS
        )

        async def one() -> CallEnd:
            [end] = [c async for c in backend.stream(request) if isinstance(c, CallEnd)]
            return end

        return asyncio.run(one())

    ask("en", "Hello there.")
    ask("zh", "你好。")
    end = ask("en", "What time is it?")
    prefix = engine.prefix_tokens(
        ChatRequest((Message("system", SYSTEM_PROMPTS["en"]), Message("user", "x")), 8, tools=DEVICE_TOOLS)
    )
    return end.cached_tokens, len(prefix)


def test_prompt_cache_off_starts_every_call_cold(policy: LlamaEngine) -> None:
    cached, _prefix = cached_after_two_calls(policy, "off")
    assert cached == 0


def test_prompt_cache_prefix_reuses_the_system_prompt_and_tools_across_languages(policy: LlamaEngine) -> None:
    cached, prefix = cached_after_two_calls(policy, "prefix")
    assert prefix > 100 and cached == prefix  # restored after the zh call in between, nothing more


def test_prompt_cache_carry_reuses_only_what_the_previous_call_left(policy: LlamaEngine) -> None:
    cached, prefix = cached_after_two_calls(policy, "carry")
    assert cached is not None and cached < prefix  # the zh call in between left another system prompt
