"""A scripted chat backend: answer text, optional tool call and latency are data.

It streams a known reply token by token after a scripted time to first token,
so tests and the no-model simulator exercise every call mode exactly.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass

from stages.latency import LatencyProfile
from stages.llm import ChatRequest, Chunk, Delta, Done, ToolCallChunk
from stages.sentences import SplitRules, find_cut

_TOKEN = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]|\s*[A-Za-z0-9']+|\s*[^\sA-Za-z0-9'\u3400-\u9fff]|\s+")


def scripted_tokens(text: str) -> list[str]:
    """Split text the way a tokenizer roughly would: one CJK character or one word a token."""
    return _TOKEN.findall(text)


@dataclass(frozen=True, slots=True)
class ScriptedReply:
    text: str
    tool_name: str = ""
    tool_arguments: str = "{}"


class ScriptedBackend:
    server_address = ""

    def __init__(self, reply: ScriptedReply, latency: LatencyProfile, model: str = "scripted", salt: int = 0) -> None:
        self.reply = reply
        self.latency = latency
        self.model = model
        self._salt = salt
        self._calls = 0

    async def stream(self, request: ChatRequest) -> AsyncIterator[Chunk]:
        delays = self.latency.delays_s(self._salt * 101 + self._calls)
        self._calls += 1
        input_tokens = sum(len(scripted_tokens(m.content)) for m in request.messages)
        answered_tool = any(m.role == "tool" for m in request.messages)
        if self.reply.tool_name and request.tools and not answered_tool:
            await asyncio.sleep(next(delays))
            yield ToolCallChunk(self.reply.tool_name, self.reply.tool_arguments)
            yield Done("tool_calls", output_tokens=1, input_tokens=input_tokens)
            return
        remaining = (
            self.reply.text[len(request.assistant_prefix) :]
            if self.reply.text.startswith(request.assistant_prefix)
            else self.reply.text
        )
        if request.stop_at_sentence:
            cut = find_cut(remaining, SplitRules(first_cut_at_comma=False, max_chars=10_000), first=False, final=True)
            piece = remaining[:cut] if cut is not None else remaining
        else:
            piece = remaining
        tokens = scripted_tokens(piece)
        finish = "stop"
        if len(tokens) > request.max_tokens:
            tokens, finish = tokens[: request.max_tokens], "length"
        for token in tokens:
            await asyncio.sleep(next(delays))
            yield Delta(token)
        complete = finish == "stop" and not remaining[len(piece) :].strip()
        yield Done(finish, output_tokens=len(tokens), input_tokens=input_tokens, answer_complete=complete)


class ScriptedTools:
    """A pretend device: every tool call succeeds after a scripted latency."""

    def __init__(self, latency: LatencyProfile) -> None:
        self.latency = latency

    async def execute(self, name: str, arguments: str) -> str:
        await asyncio.sleep(next(self.latency.delays_s()))
        return '{"ok": true}'
