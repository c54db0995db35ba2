"""llama.cpp in-process: a chat backend that streams each token as llama.cpp produces it.

Generation runs on the engine's own thread and hands each token to the event loop at once;
``stream`` turns tokens into text deltas or a tool call, ``cache`` decides what the KV cache
holds when a call starts, ``engine`` renders prompts and drives llama.cpp, ``settings`` holds its
``[llm]`` keys (shared with llama.cpp's server, ``stages.llm.served``).
"""

from __future__ import annotations

import os
import threading
from collections.abc import AsyncIterator, Iterator

from stages.llm.backend import ChatRequest, Chunk
from stages.llm.llama.cache import PROMPT_CACHES
from stages.llm.llama.engine import LlamaEngine, check_chat_model
from stages.llm.llama.llama_settings import LlamaSettings
from stages.llm.llama.stream import Item, shape
from stages.llm.prompts import ASSISTANT_LANGUAGES
from stages.registry import Implementation, Loaded, Models, TurnInputs
from stages.threads import from_thread

__all__ = ["IMPLEMENTATION", "PROMPT_CACHES", "LlamaBackend", "LlamaEngine", "LlamaSettings", "check_chat_model"]


class LlamaBackend:
    """A ``ChatBackend`` over a loaded ``LlamaEngine``."""

    server_address = ""

    def __init__(self, engine: LlamaEngine, model_name: str) -> None:
        self.engine = engine
        self.model = model_name

    async def stream(self, request: ChatRequest) -> AsyncIterator[Chunk]:
        cancel = threading.Event()

        def tokens() -> Iterator[Item]:
            for item in self.engine.generate(request, cancel):
                yield item  # handed to the event loop here
                # let the event loop take the GIL now: left to the switch interval, a token could
                # wait up to 5 ms for its stamp (seen here: 3-5 ms on about one call in six)
                os.sched_yield()

        async with from_thread(self.engine.thread, tokens, stop=cancel.set) as items:
            async for chunk in shape(items, request, cancel):
                yield chunk


def _load(s: LlamaSettings, models: Models) -> Loaded:
    path = models.resolve(s.model)
    engine = LlamaEngine(path, s)
    return Loaded(engine, f"{models.identity(s.model, path)} {engine.info.quantisation}")


def _build(s: LlamaSettings, engine: LlamaEngine, _turn: TurnInputs) -> LlamaBackend:
    return LlamaBackend(engine, s.model)


IMPLEMENTATION = Implementation(
    "llm", "llama", LlamaSettings, _build, load=_load, languages=ASSISTANT_LANGUAGES, label="in-process llama.cpp"
)
