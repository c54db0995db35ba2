"""The chat-backend contract: what the LLM stage asks a model for, and what a model answers.

A backend (in-process llama.cpp, an OpenAI-compatible endpoint, the scripted one) takes a
``ChatRequest`` and yields the call's events in the contract's vocabulary: ``TokenDelta``
per piece of text, ``ToolCallDelta`` per piece of a tool call as it streams (``OutputStart``
when output it must hold back has begun), at most one
complete ``ToolCall``, and one final ``CallEnd``; a backend behind a scheduler first yields
``QueueWait``. The LLM stage
passes them on unchanged, so the recorder times exactly what the backend produced.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Protocol, TypeAlias, runtime_checkable

from pipeline.events import (
    CallEnd,
    OutputStart,
    QueueWait,
    TokenDelta,
    ToolCall,
    ToolCallDelta,
    ToolResult,
)
from pipeline.events import ToolSpec as ToolSpec  # the chat-backend contract's, kept where stages look


@dataclass(frozen=True, slots=True)
class Message:
    """One message of a chat: a system prompt, the user's words, an answer or a tool's call and result."""

    role: str  # "system", "user", "assistant", "tool"
    content: str
    tool_name: str = ""
    tool_arguments: str = ""


@dataclass(frozen=True, slots=True)
class ChatRequest:
    """One call: what the model is asked, and how (the same for every backend; a scripted one samples nothing)."""

    messages: tuple[Message, ...]
    max_tokens: int
    stop_at_sentence: bool = False  # per-sentence mode: end the call at the first sentence end
    tools: tuple[ToolSpec, ...] = ()
    assistant_prefix: str = ""  # per-sentence mode: the answer so far, to be continued
    temperature: float | None = None  # None: not asked (llama.cpp decodes greedily, an endpoint uses its own)
    seed: int | None = None  # None: not asked


Chunk: TypeAlias = QueueWait | TokenDelta | OutputStart | ToolCallDelta | ToolCall | CallEnd


class ChatBackend(Protocol):
    """A model the LLM stage can call: it streams a call's events in the contract's vocabulary."""

    model: str
    server_address: str

    def stream(self, request: ChatRequest) -> AsyncIterator[Chunk]: ...


class ToolExecutor(Protocol):
    """Runs a tool the model called and answers with its result."""

    async def execute(self, name: str, arguments: str) -> str: ...


@runtime_checkable
class TracedToolExecutor(Protocol):
    """An executor that says, for the trace, where a call ran and the id it went by (a device's MCP).

    ``run`` answers the call as ``execute`` does, as the ``ToolResult`` the stage passes on; a call
    that fails raises ``ToolFailed``."""

    async def execute(self, name: str, arguments: str) -> str: ...

    async def run(self, name: str, arguments: str) -> ToolResult: ...


class ToolSource(Protocol):
    """Tools known only once the model is asked: a device lists its own over its link after its hello,
    so a turn whose stages were built at ``listen start`` may not have had them yet."""

    def tools(self) -> tuple[ToolSpec, ...]: ...

    def executor(self) -> ToolExecutor: ...


class LlmError(RuntimeError):
    """The backend broke its contract (e.g. a stream that ended without ``CallEnd``)."""
