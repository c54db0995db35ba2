"""llama.cpp's settings, the ``[llm]`` keys of ``impl = "llama"`` (in-process) and ``impl = "server"``
(llama.cpp's own server, as a process): one model file, the same knobs, either way; the server has one
more, its ``parallel`` slots (several devices served at once by one model: a home hub).

Sampling (``temperature``, ``seed``) is not here: the LLM stage asks it of every call, whatever the backend.
"""

from __future__ import annotations

from dataclasses import dataclass

from stages.llm.llama.cache import PROMPT_CACHES, PromptCache
from stages.registry import ConfigError, require_positive


@dataclass(frozen=True, slots=True)
class LlamaSettings:
    """The GGUF and how llama.cpp runs it; every default of these keys is here and nowhere else."""

    model: str = "qwen2.5-coder-0.5b"  # a packaged model's name (pipeline/settings/models.py) or a GGUF path
    n_ctx: int = 2048  # context length in tokens (METHOD M18's second knob)
    threads: int = 2  # generation and prompt-evaluation threads
    prompt_cache: PromptCache = "prefix"  # off: every call cold; prefix: system prompt + tools kept; carry: all

    def __post_init__(self) -> None:
        if not self.model:
            raise ConfigError("[llm] model = '': name a packaged model or a GGUF file")
        require_positive("llm", n_ctx=self.n_ctx, threads=self.threads)
        if self.prompt_cache not in PROMPT_CACHES:
            raise ConfigError(f"[llm] prompt_cache = {self.prompt_cache!r}: choose one of {', '.join(PROMPT_CACHES)}")


@dataclass(frozen=True, slots=True)
class LlamaServerSettings(LlamaSettings):
    """``impl = "server"``'s keys: llama.cpp's, and how many requests its server decodes at once.

    llama-server splits its ``--ctx-size`` evenly over its ``--parallel`` slots when the count is
    given (its KV cache is then not unified), so the server is started with ``n_ctx * parallel``:
    ``n_ctx`` stays what every call may use, whatever the slot count. A request that finds every slot
    busy waits in the server's own queue (first come, first served)."""

    parallel: int = 1  # llama-server's --parallel: requests decoded together (continuous batching)

    def __post_init__(self) -> None:
        LlamaSettings.__post_init__(self)
        require_positive("llm", parallel=self.parallel)
