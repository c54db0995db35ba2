"""The local LLM, side by side in one run: what the lab adds, what the prompt cache saves, whether answers stream.

1. What the pipeline's LLM stage adds (LlmStage + LlamaBackend, timed by the pipeline's own
   recorder on the real-clock event loop), two ways, both starting cold (``prompt_cache = off``):
   a. within each call: the stage's first token and tokens/s against llama-cpp-python's own work
      in that same call (from the moment it is handed the request, rendering and tokenising
      included, to the token it yields, stamped on its thread). Both figures come from one
      prompt evaluation, so the machine's call-to-call spread (10-15 % here) cancels out: this
      is the lab's own cost. Goals: first token <= 1.01x, tokens/s >= 0.99x.
   b. against llama-cpp-python used the way its README shows (``create_chat_completion(...,
      stream=True)``), same model, thread and messages, the same prompt back to back: whether
      the backend's own generation loop is as fast as the library's (noisier: separate calls).
   Repeated ``--runs`` times; each run's median over prompts is printed, then their median and spread.
2. First token with ``prompt_cache = off`` vs ``prefix`` through the stage, device tools offered
   (the packaged default), languages alternating as in the fixtures.
3. Streaming: for plain answers with the device tools offered, distinct token arrival times
   over tokens (goal 1.0: every token reaches the sentence splitter when it is generated).

Run on a quiet machine: ``python scripts/bench_llm.py [--questions N] [--runs N]``.
"""

from __future__ import annotations

import argparse
import csv
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from pipeline.analysis.numbers import median
from pipeline.clock import RealClock, run_on_clock
from pipeline.events import Event, LatencyProfile, Transcript
from pipeline.run.recorder import TurnRecorder
from pipeline.settings.models import default_cache, resolve
from pipeline.tracing.timeline import CallTiming
from stages.llm import LlmSettings, LlmStage
from stages.llm.llama import LlamaBackend, LlamaEngine, LlamaSettings
from stages.llm.prompts import (
    DEVICE_TOOLS,
    SYSTEM_PROMPTS,
    ScriptedTools,
)

ROOT = Path(__file__).resolve().parent.parent

FIXTURES = ROOT / "audio_fixtures"
MAX_TOKENS = 48


def questions(n: int, category: str = "") -> list[tuple[str, str]]:
    with (FIXTURES / "manifest.csv").open(encoding="utf-8") as fh:
        rows = [r for r in csv.DictReader(fh) if not category or r["category"] == category]
    return [(r["language"], r["text"]) for r in rows][:n]


def direct(engine: LlamaEngine, language: str, text: str) -> tuple[float, float]:
    """Seconds to the first non-empty token and tokens/s after it, straight from llama-cpp-python."""
    return engine.thread.submit(_direct, engine, language, text).result()


def _direct(engine: LlamaEngine, language: str, text: str) -> tuple[float, float]:
    llm: Any = engine._llm
    llm.reset()
    llm._ctx.kv_cache_clear()
    messages = [{"role": "system", "content": SYSTEM_PROMPTS[language]}, {"role": "user", "content": text}]
    t0 = time.perf_counter()
    first = last = 0.0
    count = 0
    for chunk in llm.create_chat_completion(messages=messages, max_tokens=MAX_TOKENS, temperature=0.0, stream=True):
        now = time.perf_counter()
        if not first and (chunk["choices"][0]["delta"].get("content") or "").strip():
            first = now
        if first:
            count += 1
            last = now
    return first - t0, (count - 1) / (last - first) if count > 1 and last > first else 0.0


class EngineStamps:
    """Stamps, on the engine's thread, when a generation was asked for and when each token came."""

    def __init__(self, engine: LlamaEngine) -> None:
        self.asked = 0
        self.tokens: list[tuple[int, str]] = []
        inner = engine.generate

        def generate(request: Any, cancel: Any) -> Any:
            self.asked, self.tokens = time.perf_counter_ns(), []
            for item in inner(request, cancel):
                if isinstance(item, str):
                    self.tokens.append((time.perf_counter_ns(), item))
                yield item

        engine.generate = generate  # type: ignore[method-assign]


def through_stage(engine: LlamaEngine, language: str, text: str, tools: bool = False) -> list[CallTiming]:
    """One answer through LlmStage + LlamaBackend, timed by the recorder on the real-clock loop."""
    stage = LlmStage(
        LlamaBackend(engine, "bench"),
        LlmSettings(max_tokens=MAX_TOKENS, system_prompt=SYSTEM_PROMPTS[language]),
        tools=DEVICE_TOOLS if tools else (),
        executor=ScriptedTools(LatencyProfile()) if tools else None,
        impl="llama",
        scripted=False,
    )
    clock = RealClock()
    recorder = TurnRecorder(clock)

    async def source() -> AsyncIterator[Event]:
        yield Transcript(text, language)

    async def drive() -> None:
        async for _ in recorder.wrap("llm", stage, source()):
            pass

    run_on_clock(drive(), clock)
    return recorder.timeline.calls


def first_and_rate(call: CallTiming) -> tuple[float, float]:
    assert call.first_token_ns is not None
    stamps = [t for t in call.token_ns if t >= call.first_token_ns]
    rate = (len(stamps) - 1) / ((stamps[-1] - stamps[0]) / 1e9) if len(stamps) > 1 else 0.0
    return (call.first_token_ns - call.start_ns) / 1e9, rate


def spread(values: list[float]) -> str:
    runs = ", ".join(f"{v:.3f}" for v in values)
    return f"median {median(values):.3f}x  (runs: {runs}; spread {max(values) - min(values):.3f})"


def engine_first_and_rate(stamps: EngineStamps) -> tuple[float, float]:
    """The engine's own first visible token (the one the stage counts first) and its tokens/s after it."""
    first = next(i for i, (_t, text) in enumerate(stamps.tokens) if text.strip())
    after = [t for t, _text in stamps.tokens[first:]]
    rate = (len(after) - 1) / ((after[-1] - after[0]) / 1e9) if len(after) > 1 else 0.0
    return (after[0] - stamps.asked) / 1e9, rate


def bench_overhead(engine: LlamaEngine, prompts: list[tuple[str, str]], runs: int) -> None:
    engine.cache.policy = "off"
    stamps = EngineStamps(engine)
    within: dict[str, list[float]] = {"first": [], "rate": [], "added_ms": []}
    library: dict[str, list[float]] = {"first": [], "rate": []}
    for run in range(runs):
        per: dict[str, list[float]] = {"wf": [], "wr": [], "added": [], "lf": [], "lr": []}
        for i, (language, text) in enumerate(prompts):
            for order in ("direct", "stage") if (i + run) % 2 else ("stage", "direct"):  # alternate the first
                if order == "direct":
                    lib_first, lib_rate = direct(engine, language, text)
                    continue
                call = through_stage(engine, language, text)[0]
                first, rate = first_and_rate(call)
                own_first, own_rate = engine_first_and_rate(stamps)
                per["wf"].append(first / own_first)
                per["wr"].append(rate / own_rate)
                per["added"].append(1000 * (first - own_first))
                stage_first, stage_rate = first, rate
            per["lf"].append(stage_first / lib_first)
            per["lr"].append(stage_rate / lib_rate)
        within["first"].append(median(per["wf"]))
        within["rate"].append(median(per["wr"]))
        within["added_ms"].append(median(per["added"]))
        library["first"].append(median(per["lf"]))
        library["rate"].append(median(per["lr"]))
    print(f"1. the LLM stage against llama-cpp-python ({len(prompts)} prompts x {runs} runs, cold cache, no tools)")
    print("   a. within each call, stage / llama-cpp-python's own work in that call:")
    print(f"      first token (goal <= 1.01): {spread(within['first'])}")
    print(f"      tokens/s    (goal >= 0.99): {spread(within['rate'])}")
    print(f"      added to the first token: median {median(within['added_ms']):.2f} ms per run median")
    print("   b. stage / create_chat_completion, the same prompt back to back (separate calls: noisier):")
    print(f"      first token: {spread(library['first'])}")
    print(f"      tokens/s:    {spread(library['rate'])}")


def bench_prompt_cache(engine: LlamaEngine, prompts: list[tuple[str, str]]) -> None:
    firsts: dict[str, list[float]] = {"off": [], "prefix": []}
    cached: dict[str, list[int]] = {"off": [], "prefix": []}
    for policy in ("off", "prefix"):
        engine.cache.policy = policy
        through_stage(engine, *prompts[0], tools=True)  # the warm-up: under prefix, evaluates one prefix
        for language, text in prompts:
            call = through_stage(engine, language, text, tools=True)[0]
            firsts[policy].append(first_and_rate(call)[0])
            cached[policy].append(call.cached_tokens or 0)
    off, prefix = median(firsts["off"]), median(firsts["prefix"])
    print(f"2. first token by prompt cache ({len(prompts)} prompts, device tools offered, languages alternating)")
    print(f"   off    {1000 * off:8.1f} ms   cached prompt tokens median {median(cached['off']):.0f}")
    print(f"   prefix {1000 * prefix:8.1f} ms   cached prompt tokens median {median(cached['prefix']):.0f}")
    print(f"   ratio prefix / off {prefix / off:.3f}x")


def bench_streaming(engine: LlamaEngine, prompts: list[tuple[str, str]]) -> None:
    engine.cache.policy = "prefix"
    arrivals, tokens = 0, 0
    for language, text in prompts:
        for call in through_stage(engine, language, text, tools=True):
            if call.tool_name:
                continue
            arrivals += len(set(call.token_ns[1:]))  # the first stamp is the call's first chunk (empty)
            tokens += call.output_tokens
    print(f"3. streaming with the device tools offered ({len(prompts)} plain questions)")
    ratio = arrivals / max(tokens, 1)
    print(f"   distinct token arrival times {arrivals} / tokens {tokens} = ratio {ratio:.3f} (goal 1.0)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=12)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    engine = LlamaEngine(resolve("qwen2.5-coder-0.5b", default_cache(os.environ)), LlamaSettings(threads=2))
    prompts = questions(args.questions)
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f} at start")
    bench_overhead(engine, prompts, args.runs)
    bench_prompt_cache(engine, prompts)
    plain = questions(args.questions, "knowledge") + questions(args.questions, "chitchat")
    bench_streaming(engine, plain[: args.questions])


if __name__ == "__main__":
    main()
