"""A scripted chat backend: answer text, optional tool call and latency are data.

It streams a known reply token by token after a scripted time to first token,
so tests and the no-model simulator exercise every call mode exactly.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from pipeline.events import CallEnd, LatencyProfile, TokenDelta, ToolCall
from stages.llm.backend import ChatRequest, Chunk
from stages.registry import Implementation, TurnInputs
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
            yield ToolCall(self.reply.tool_name, self.reply.tool_arguments)
            yield CallEnd("tool_calls", output_tokens=1, input_tokens=input_tokens)
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
            yield TokenDelta(token)
        complete = finish == "stop" and not remaining[len(piece) :].strip()
        yield CallEnd(finish, output_tokens=len(tokens), input_tokens=input_tokens, answer_complete=complete)


class ScriptedTools:
    """A pretend device: every tool call succeeds after a scripted latency."""

    def __init__(self, latency: LatencyProfile) -> None:
        self.latency = latency

    async def execute(self, name: str, arguments: str) -> str:
        await asyncio.sleep(next(self.latency.delays_s()))
        return '{"ok": true}'


def default_answer(text: str, language: str) -> str:
    """What the scripted LLM says to a question whose manifest gives no answer."""
    if language.startswith("zh"):
        return f"好的，你问的是：{text}这是一个简短的回答。希望对你有帮助！"
    return f"Sure, you asked: {text} Here is a short answer. I hope that helps!"


@dataclass(frozen=True, slots=True)
class ScriptedSettings:
    model: str = "scripted"
    latency: LatencyProfile = field(
        default_factory=lambda: LatencyProfile(first_ms=350, per_item_ms=45, jitter_ms=15, seed=2)
    )


def _build(s: ScriptedSettings, _engine: None, turn: TurnInputs) -> ScriptedBackend:
    reply = ScriptedReply(turn.answer or default_answer(turn.text, turn.language), turn.tool, turn.tool_arguments)
    return ScriptedBackend(reply, s.latency.salted(turn.salt), model=s.model, salt=turn.salt)


IMPLEMENTATION = Implementation("llm", "scripted", ScriptedSettings, _build, scripted=True, label="scripted")
