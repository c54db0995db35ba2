"""The LLM stage: turns a transcript into streamed calls, in the configured call mode.

Modes (METHOD M3 counts every call of a turn):
- ``single``: one streamed call; the sentence splitter cuts its output.
- ``per-sentence``: one generation call per sentence, each continuing the answer so far.
- tool calls (either mode, when tools are offered): a call that returns a tool call,
  the tool's execution, then a follow-up call with its result.

The model itself is a ``ChatBackend`` (scripted, llama.cpp, a cloud endpoint); this
stage owns the mode logic and reports each call's start, deltas and end as events.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Literal, Protocol

from pipeline.events import (
    CallEnd,
    CallStart,
    Event,
    StageInfo,
    TokenDelta,
    ToolCall,
    ToolResult,
    Transcript,
)

Mode = Literal["single", "per-sentence"]
MODES: tuple[Mode, ...] = ("single", "per-sentence")


@dataclass(frozen=True, slots=True)
class Message:
    role: str  # "system", "user", "assistant", "tool"
    content: str
    tool_name: str = ""
    tool_arguments: str = ""


@dataclass(frozen=True, slots=True)
class ToolSpec:
    name: str
    description: str
    parameters_json: str


@dataclass(frozen=True, slots=True)
class ChatRequest:
    messages: tuple[Message, ...]
    max_tokens: int
    stop_at_sentence: bool = False  # per-sentence mode: end the call at the first sentence end
    tools: tuple[ToolSpec, ...] = ()
    assistant_prefix: str = ""  # per-sentence mode: the answer so far, to be continued


@dataclass(frozen=True, slots=True)
class Delta:
    text: str


@dataclass(frozen=True, slots=True)
class ToolCallChunk:
    name: str
    arguments: str


@dataclass(frozen=True, slots=True)
class Done:
    finish_reason: str  # "stop", "length", "tool_calls"
    output_tokens: int
    input_tokens: int = 0
    answer_complete: bool = True  # per-sentence mode: no further sentence follows
    server_timings: tuple[tuple[str, float], ...] = ()


Chunk = Delta | ToolCallChunk | Done


class ChatBackend(Protocol):
    model: str
    server_address: str

    def stream(self, request: ChatRequest) -> AsyncIterator[Chunk]: ...


class ToolExecutor(Protocol):
    async def execute(self, name: str, arguments: str) -> str: ...


class LlmError(RuntimeError):
    """The backend broke its contract (e.g. a stream that ended without ``Done``)."""


@dataclass(frozen=True, slots=True)
class LlmSettings:
    mode: Mode = "single"
    max_tokens: int = 128
    max_calls: int = 12  # bounds per-sentence and tool loops
    system_prompt: str = "Answer in one to three short spoken sentences, in the user's language."

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"unknown LLM mode {self.mode!r}; choose one of {', '.join(MODES)}")
        if self.max_tokens < 1 or self.max_calls < 1:
            raise ValueError("max_tokens and max_calls must be at least 1")


class LlmStage:
    def __init__(
        self,
        backend: ChatBackend,
        settings: LlmSettings,
        tools: tuple[ToolSpec, ...] = (),
        executor: ToolExecutor | None = None,
        impl: str = "scripted",
        scripted: bool = True,
        history: tuple[Message, ...] = (),
    ) -> None:
        if tools and executor is None:
            raise ValueError("tools were offered without a tool executor")
        self.backend = backend
        self.settings = settings
        self.tools = tools
        self.executor = executor
        self.history = history
        self.info = StageInfo(
            role="llm",
            impl=impl,
            scripted=scripted,
            attributes=(("llm.mode", settings.mode), ("llm.model", backend.model)),
        )

    async def run(self, events: AsyncIterator[Event]) -> AsyncIterator[Event]:
        async for event in events:
            if isinstance(event, Transcript):
                async for out in self._answer(event.text):
                    yield out
                return

    async def _answer(self, text: str) -> AsyncIterator[Event]:
        messages: tuple[Message, ...] = (
            Message("system", self.settings.system_prompt),
            *self.history,
            Message("user", text),
        )
        answer = ""
        after_tool = False
        for index in range(self.settings.max_calls):
            per_sentence = self.settings.mode == "per-sentence"
            request = ChatRequest(
                messages=messages,
                max_tokens=self.settings.max_tokens,
                stop_at_sentence=per_sentence,
                tools=self.tools,
                assistant_prefix=answer if per_sentence else "",
            )
            purpose = "after_tool" if after_tool else ("sentence" if per_sentence else "answer")
            after_tool = False
            yield CallStart(
                index=index,
                purpose=purpose,
                model=self.backend.model,
                max_tokens=self.settings.max_tokens,
                server_address=self.backend.server_address,
            )
            done: Done | None = None
            tool: ToolCallChunk | None = None
            async for chunk in self.backend.stream(request):
                if isinstance(chunk, Delta):
                    answer += chunk.text
                    yield TokenDelta(call_index=index, text=chunk.text)
                elif isinstance(chunk, ToolCallChunk):
                    tool = chunk
                    yield ToolCall(call_index=index, name=chunk.name, arguments=chunk.arguments)
                else:
                    done = chunk
                    break
            if done is None:
                raise LlmError(f"LLM backend {self.backend.model!r} ended call {index} without finishing")
            yield CallEnd(
                index=index,
                finish_reason=done.finish_reason,
                output_tokens=done.output_tokens,
                input_tokens=done.input_tokens,
                server_timings=done.server_timings,
            )
            if tool is not None and self.executor is not None:
                result = await self.executor.execute(tool.name, tool.arguments)
                yield ToolResult(name=tool.name, result=result)
                messages = (
                    *messages,
                    Message("assistant", "", tool_name=tool.name, tool_arguments=tool.arguments),
                    Message("tool", result, tool_name=tool.name),
                )
                after_tool = True
                continue
            if not per_sentence or done.answer_complete or done.finish_reason == "length":
                return
