"""One loaded GGUF chat model (llama-cpp-python): prompt rendering, the prompt cache, token generation.

The prompt is rendered with the model's own chat template (refused before the run when the
GGUF has none: a base model is not a chat model). Generation is llama-cpp-python's token
generator driven directly, one token at a time, each detokenised with its special tokens
(so ``<tool_call>`` is seen the moment the model emits it) and handed on at once.
llama.cpp's own counters (prompt and generation time) and the cache's reuse are reported as
the call's server-side timings (METHOD M2).
"""

from __future__ import annotations

import codecs
import json
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stages.llm.backend import ChatRequest, Message
from stages.llm.llama.cache import KvCache, common_prefix
from stages.llm.llama.gguf import GgufInfo, read_gguf
from stages.llm.llama.llama_settings import LlamaSettings

STOP_TEXTS = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<end_of_turn>")
GREEDY = 0.0  # a call that asks no temperature is decoded greedily: a lab run must repeat


@dataclass(frozen=True, slots=True)
class Finished:
    """How a generation ended, with llama.cpp's own account of it."""

    finish_reason: str  # "stop" or "length"
    output_tokens: int
    prompt_tokens: int
    cached_tokens: int
    timings: tuple[tuple[str, float], ...]


def check_chat_model(path: Path) -> GgufInfo:
    """The model's header, or a clear error when it is not a usable chat model."""
    info = read_gguf(path)
    if not info.is_chat_model:
        raise ValueError(f"{path}: {info.name!r} has no chat template: it is a base model, not a chat model")
    return info


def template_messages(messages: tuple[Message, ...]) -> list[dict[str, Any]]:
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


def template_tools(request: ChatRequest) -> list[dict[str, Any]] | None:
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
            verbose=False,
        )
        eos = self._token_text(self._llm.token_eos())
        bos = self._token_text(self._llm.token_bos())
        self._formatter = Jinja2ChatFormatter(self.info.chat_template, eos_token=eos, bos_token=bos)
        self._stop_ids = {self._llm.token_eos(), *self._special_ids(STOP_TEXTS)}
        self.cache = KvCache(self._llm, settings.prompt_cache)
        self._prefixes: dict[tuple[str, str], list[int]] = {}
        self._lock = threading.Lock()
        self.thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="llama")

    def _token_text(self, token: int) -> str:
        if token < 0:
            return ""
        return bytes(self._llm.detokenize([token], special=True)).decode("utf-8", errors="ignore")

    def _special_ids(self, texts: tuple[str, ...]) -> set[int]:
        ids = set()
        for text in texts:
            found = self._llm.tokenize(text.encode("utf-8"), add_bos=False, special=True)
            if len(found) == 1:
                ids.add(found[0])
        return ids

    def _render(self, messages: tuple[Message, ...], request: ChatRequest) -> str:
        rendered = self._formatter(messages=template_messages(messages), tools=template_tools(request))  # type: ignore[arg-type]
        return str(rendered.prompt)

    def _tokens(self, text: str) -> list[int]:
        return list(self._llm.tokenize(text.encode("utf-8"), add_bos=False, special=True))

    def prompt_tokens(self, request: ChatRequest) -> list[int]:
        return self._tokens(self._render(request.messages, request) + request.assistant_prefix)

    def prefix_tokens(self, request: ChatRequest) -> list[int]:
        """The fixed start of every prompt with this system prompt and these tools: what ``prefix`` keeps."""
        system = next((m.content for m in request.messages if m.role == "system"), "")
        key = (system, json.dumps(template_tools(request)))
        if key not in self._prefixes:
            head = (Message("system", system),) if system else ()
            a = self._tokens(self._render((*head, Message("user", "a")), request))
            b = self._tokens(self._render((*head, Message("user", "b")), request))
            self._prefixes[key] = a[: common_prefix(a, b)]
        return self._prefixes[key]

    def generate(self, request: ChatRequest, cancel: threading.Event) -> Iterator[str | Finished]:
        """Each token's text as it is generated, then ``Finished``. Runs on the engine's thread."""
        import llama_cpp

        with self._lock:
            tokens = self.prompt_tokens(request)
            n_ctx = self.settings.n_ctx
            if len(tokens) + request.max_tokens > n_ctx:
                asked = f"prompt of {len(tokens)} tokens + max_tokens {request.max_tokens}"
                raise ValueError(f"{asked} exceed n_ctx {n_ctx}")
            ctx = self._llm._ctx.ctx
            llama_cpp.llama_perf_context_reset(ctx)  # before the cache is prepared: evaluating a prefix is prompt time
            cached = self.cache.prepare(tokens, self.prefix_tokens(request))
            if request.seed is not None:
                self._llm.set_seed(request.seed)
            decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
            finish, count = "length", 0
            temperature = GREEDY if request.temperature is None else request.temperature
            for token in self._llm.generate(tokens, temp=temperature, repeat_penalty=1.0):
                if token in self._stop_ids:
                    finish = "stop"
                    break
                count += 1
                yield decoder.decode(bytes(self._llm.detokenize([token], special=True)))
                if count >= request.max_tokens:
                    break
                if cancel.is_set():
                    finish = "stop"
                    break
            perf = llama_cpp.llama_perf_context(ctx)
            timings = (
                ("prompt_ms", round(perf.t_p_eval_ms, 3)),
                ("predicted_ms", round(perf.t_eval_ms, 3)),
                ("prompt_n", float(len(tokens) - cached)),
                ("cache_n", float(cached)),
                ("predicted_n", float(perf.n_eval)),
            )
            yield Finished(finish, count, len(tokens), cached, timings)
