"""What llama.cpp's KV cache holds when a call starts: the hidden state that decides a first token.

Three policies (``[llm] prompt_cache``), recorded with every call as its cached prompt tokens:

- ``off``: every call starts cold and evaluates its whole prompt.
- ``prefix``: the fixed part of the prompt (system prompt and tool definitions, one per
  language) is evaluated once per run, kept, and reused by every call that starts with it, as
  a serving stack keeps its system prompt; nothing else carries over from the call before.
- ``carry``: whatever the previous call left is reused as far as it matches (llama-cpp-python's
  own behaviour, so a first token depends on the turn before it).
"""

from __future__ import annotations

import ctypes
from typing import Any, Literal

PromptCache = Literal["off", "prefix", "carry"]
PROMPT_CACHES: tuple[PromptCache, ...] = ("off", "prefix", "carry")


def common_prefix(a: Any, b: Any) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


class KvCache:
    """Prepares the model's KV cache for a call under one policy; says how many prompt tokens it reuses."""

    def __init__(self, llm: Any, policy: PromptCache) -> None:
        if policy not in PROMPT_CACHES:
            raise ValueError(f"prompt_cache {policy!r}: choose one of {', '.join(PROMPT_CACHES)}")
        self.llm = llm
        self.policy = policy
        self._saved: dict[tuple[int, ...], bytes] = {}  # prefix -> its KV state (sequence 0)

    def prepare(self, tokens: list[int], prefix: list[int]) -> int:
        """Set the cache up for ``tokens``; returns how many of them will not be evaluated again."""
        llm = self.llm
        if self.policy == "off":
            llm.reset()  # the next evaluation removes every cell from position 0 on
        evaluated_now = self._hold_only(tuple(prefix)) if self.policy == "prefix" else 0
        held = llm.input_ids[: llm.n_tokens]
        reused = min(common_prefix(held, tokens), len(tokens) - 1)  # the last token is evaluated for fresh logits
        return max(0, reused - evaluated_now)

    def _hold_only(self, prefix: tuple[int, ...]) -> int:
        """Leave exactly ``prefix`` in the cache: cut what follows it, or restore it, or evaluate it
        (once per run); returns how many tokens it had to evaluate now (they are not a cache hit)."""
        llm = self.llm
        if not prefix:
            llm.reset()
            return 0
        held = llm.input_ids[: llm.n_tokens]
        if llm.n_tokens >= len(prefix) and common_prefix(held, prefix) == len(prefix):
            llm.n_tokens = len(prefix)
            llm._ctx.kv_cache_seq_rm(-1, len(prefix), -1)
            llm._requires_eval = True
            return 0
        if prefix in self._saved:
            self._restore(prefix, self._saved[prefix])
            return 0
        llm.reset()
        llm.eval(list(prefix))
        self._saved[prefix] = self._save()
        return len(prefix)

    def _save(self) -> bytes:
        import llama_cpp

        ctx = self.llm._ctx.ctx
        size = llama_cpp.llama_state_seq_get_size(ctx, 0)
        buffer = (ctypes.c_uint8 * size)()
        written = llama_cpp.llama_state_seq_get_data(ctx, buffer, size, 0)
        return bytes(buffer[:written])

    def _restore(self, prefix: tuple[int, ...], state: bytes) -> None:
        import llama_cpp

        llm = self.llm
        llm._ctx.kv_cache_seq_rm(0, 0, -1)
        buffer = (ctypes.c_uint8 * len(state)).from_buffer_copy(state)
        if llama_cpp.llama_state_seq_set_data(llm._ctx.ctx, buffer, len(state), 0) != len(state):
            raise RuntimeError("llama.cpp could not restore the cached prompt prefix")
        llm.input_ids[: len(prefix)] = prefix
        llm.n_tokens = len(prefix)
        llm._requires_eval = True  # the logits are not those of the prefix's last token
