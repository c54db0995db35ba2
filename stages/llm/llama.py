"""llama.cpp in-process (llama-cpp-python): a chat backend that streams tokens as they come.

Generation runs in a worker thread and hands each token to the event loop at
once, so the pipeline sees tokens exactly when llama.cpp produces them. The
prompt is rendered with the model's own chat template (refused before the run
when the GGUF has none: a base model is not a chat model). Per-sentence mode
continues the answer so far and stops generating at the first sentence end.
Qwen-style ``<tool_call>{...}</tool_call>`` output becomes a tool call.
llama.cpp's own counters (prompt and generation time, prefix-cache reuse) are
reported as the call's server-side timings (METHOD M2).
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.events import CallEnd, TokenDelta, ToolCall
from stages.llm.backend import ChatRequest, Chunk, Message
from stages.llm.gguf import GgufInfo, read_gguf
from stages.llm.prompts import ASSISTANT_LANGUAGES
from stages.registry import Implementation, Loaded, Models, TurnInputs
from stages.sentences import SplitRules, find_cut

TOOL_OPEN, TOOL_CLOSE = "<tool_call>", "</tool_call>"
_SENTENCE_RULES = SplitRules(first_cut_at_comma=False, max_chars=10_000)


@dataclass(frozen=True, slots=True)
class LlamaSettings:
    model: str = "qwen2.5-0.5b"  # registry name or a GGUF path
    n_ctx: int = 2048
    threads: int = 2
    seed: int = 1234
    temperature: float = 0.0


def check_chat_model(path: Path) -> GgufInfo:
    """The model's header, or a clear error when it is not a usable chat model."""
    info = read_gguf(path)
    if not info.is_chat_model:
        raise ValueError(f"{path}: {info.name!r} has no chat template: it is a base model, not a chat model")
    return info


def openai_messages(messages: tuple[Message, ...]) -> list[dict[str, Any]]:
    """Our messages in the OpenAI chat format that chat templates expect."""
    out: list[dict[str, Any]] = []
    for m in messages:
        if m.role == "assistant" and m.tool_name:
            call = {"type": "function", "function": {"name": m.tool_name, "arguments": m.tool_arguments or "{}"}}
            out.append({"role": "assistant", "content": "", "tool_calls": [call]})
        elif m.role == "tool":
            out.append({"role": "tool", "name": m.tool_name, "content": m.content})
        else:
            out.append({"role": m.role, "content": m.content})
    return out


def openai_tools(request: ChatRequest) -> list[dict[str, Any]] | None:
    if not request.tools:
        return None
    return [
        {
            "type": "function",
            "function": {"name": t.name, "description": t.description, "parameters": json.loads(t.parameters_json)},
        }
        for t in request.tools
    ]


class LlamaEngine:
    """One loaded model; generations run one at a time on the engine's own thread.

    Always the same thread: llama.cpp's OpenMP thread team belongs to the thread that
    calls it, and a new calling thread per generation left earlier teams spinning beside
    the new one (measured here: tokens/s fell by about a third).
    """

    def __init__(self, model_path: Path, settings: LlamaSettings) -> None:
        self.info = check_chat_model(model_path)
        from llama_cpp import Llama
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        self.settings = settings
        self._llm: Any = Llama(
            model_path=str(model_path),
            n_ctx=settings.n_ctx,
            n_threads=settings.threads,
            n_threads_batch=settings.threads,
            seed=settings.seed,
            verbose=False,
        )
        eos = self._token_text(self._llm.token_eos())
        bos = self._token_text(self._llm.token_bos())
        self._formatter = Jinja2ChatFormatter(self.info.chat_template, eos_token=eos, bos_token=bos)
        self._stops = sorted({s for s in (eos, "<|im_end|>", "<|endoftext|>") if s})
        self._lock = threading.Lock()
        self._previous: list[int] = []
        self.thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="llama")

    def _token_text(self, token: int) -> str:
        if token < 0:
            return ""
        return bytes(self._llm.detokenize([token], special=True)).decode("utf-8", errors="ignore")

    def prompt(self, request: ChatRequest) -> str:
        messages: Any = openai_messages(request.messages)  # the OpenAI shapes llama-cpp's TypedDicts describe
        tools: Any = openai_tools(request)
        rendered = self._formatter(messages=messages, tools=tools)
        return rendered.prompt + request.assistant_prefix

    def generate(self, prompt: str, max_tokens: int, cancel: threading.Event) -> Iterator[tuple[str, Any]]:
        """Yields ("text", str) per token, then ("done", (finish_reason, tokens, timings))."""
        with self._lock:
            tokens = self._llm.tokenize(prompt.encode("utf-8"), add_bos=False, special=True)
            if len(tokens) + max_tokens > self.settings.n_ctx:
                raise ValueError(
                    f"prompt of {len(tokens)} tokens + max_tokens {max_tokens} exceed n_ctx {self.settings.n_ctx}"
                )
            cache_n = _common_prefix(self._previous, tokens)
            self._previous = tokens
            import llama_cpp

            ctx = self._llm._ctx.ctx
            llama_cpp.llama_perf_context_reset(ctx)
            finish, count = "stop", 0
            stream = self._llm.create_completion(
                tokens,
                max_tokens=max_tokens,
                temperature=self.settings.temperature,
                seed=self.settings.seed,
                stop=self._stops,
                stream=True,
            )
            for chunk in stream:
                choice = chunk["choices"][0]
                count += 1
                yield "text", choice.get("text") or ""
                finish = choice.get("finish_reason") or finish
                if cancel.is_set():
                    finish = "stop"
                    break
            perf = llama_cpp.llama_perf_context(ctx)
            timings = (
                ("prompt_ms", round(perf.t_p_eval_ms, 3)),
                ("predicted_ms", round(perf.t_eval_ms, 3)),
                ("prompt_n", float(len(tokens) - cache_n)),
                ("cache_n", float(cache_n)),
                ("predicted_n", float(perf.n_eval)),
            )
            yield "done", (finish, count, len(tokens), timings)


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


class LlamaBackend:
    """A ``ChatBackend`` over a loaded ``LlamaEngine``."""

    server_address = ""

    def __init__(self, engine: LlamaEngine, model_name: str) -> None:
        self.engine = engine
        self.model = model_name

    async def stream(self, request: ChatRequest) -> AsyncIterator[Chunk]:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        cancel = threading.Event()
        prompt = self.engine.prompt(request)

        def work() -> None:
            try:
                for item in self.engine.generate(prompt, request.max_tokens, cancel):
                    loop.call_soon_threadsafe(queue.put_nowait, item)
            except Exception as exc:  # handed to the event loop, raised there with its own class
                loop.call_soon_threadsafe(queue.put_nowait, ("error", exc))

        worker = loop.run_in_executor(self.engine.thread, work)
        try:
            async for chunk in _shape(queue, request, cancel):
                yield chunk
        finally:
            cancel.set()
            await asyncio.shield(worker)


async def _shape(
    queue: asyncio.Queue[tuple[str, Any]], request: ChatRequest, cancel: threading.Event
) -> AsyncIterator[Chunk]:
    """Turn raw token text into deltas, a tool call, or one sentence (per-sentence mode)."""
    held = ""  # text that may still turn out to be a tool call
    said = ""  # text already passed on in this call
    cut_done = False
    while True:
        kind, value = await queue.get()
        if kind == "error":
            raise value
        if kind == "done":
            finish, count, prompt_n, timings = value
            tool = _parse_tool(held, request) if held else None
            if tool is not None:
                yield tool
                finish = "tool_calls"
            elif held.strip() and not cut_done:
                yield TokenDelta(held)
            complete = not cut_done and finish != "length"
            yield CallEnd(finish, count, input_tokens=prompt_n, answer_complete=complete, server_timings=timings)
            return
        if cut_done:
            continue
        held += value
        if request.tools and _may_be_tool_call(held):
            continue  # a tool call is never spoken; hold it until the call ends
        if request.stop_at_sentence:
            cut = find_cut(said + held, _SENTENCE_RULES, first=False, final=False)
            if cut is not None:
                keep = cut - len(said)
                if keep > 0:
                    yield TokenDelta(held[:keep])
                held, cut_done = "", True
                cancel.set()
                continue
        yield TokenDelta(held)
        said += held
        held = ""


def _may_be_tool_call(text: str) -> bool:
    """Qwen-style tool calls come as <tool_call>{json}</tool_call> or, tags detokenised away, bare JSON."""
    stripped = text.lstrip()
    return not stripped or stripped.startswith("{") or TOOL_OPEN.startswith(stripped) or stripped.startswith(TOOL_OPEN)


def _parse_tool(text: str, request: ChatRequest) -> ToolCall | None:
    if not request.tools:
        return None
    body = text.replace(TOOL_OPEN, "").replace(TOOL_CLOSE, "").strip()
    try:
        data = json.loads(body)
        name = str(data["name"])
    except (ValueError, KeyError, TypeError):
        return None
    if name not in {t.name for t in request.tools}:
        return None
    return ToolCall(name, json.dumps(data.get("arguments", {}), ensure_ascii=False))


def _load(s: LlamaSettings, models: Models) -> Loaded:
    path = models.resolve(s.model)
    engine = LlamaEngine(path, s)
    return Loaded(engine, f"{models.identity(s.model, path)} {engine.info.quantisation}")


def _build(s: LlamaSettings, engine: LlamaEngine, _turn: TurnInputs) -> LlamaBackend:
    return LlamaBackend(engine, s.model)


IMPLEMENTATION = Implementation(
    "llm", "llama", LlamaSettings, _build, load=_load, languages=ASSISTANT_LANGUAGES, label="in-process llama.cpp"
)
