"""The LLM stage: turns a transcript into streamed calls, in the configured call mode.

Modes (METHOD M3 counts every call of a turn):
- ``single``: one streamed call; the sentence splitter cuts its output.
- ``per-sentence``: one generation call per sentence, each continuing the answer so far.
- tool calls (either mode, when tools are offered): a call that returns a tool call,
  the tool's execution, then a follow-up call with its result. A device's own tools (xiaozhi
  MCP), once it has listed them, replace the configured ones; a tool call that fails fails the turn.

The model itself is a ``ChatBackend`` (scripted, llama.cpp, a cloud endpoint); this
stage owns the mode logic, announces each call with ``CallStart`` and passes the
backend's own events on as they come.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Literal

from pipeline.events import (
    CallEnd,
    CallStart,
    Event,
    StageInfo,
    TokenDelta,
    ToolCall,
    ToolFailed,
    ToolResult,
    Transcript,
)
from stages.llm.backend import (
    ChatBackend,
    ChatRequest,
    LlmError,
    Message,
    ToolExecutor,
    ToolSource,
    ToolSpec,
    TracedToolExecutor,
)

Mode = Literal["single", "per-sentence"]
MODES: tuple[Mode, ...] = ("single", "per-sentence")


@dataclass(frozen=True, slots=True)
class LlmSettings:
    """What the stage asks of every call, whatever the backend (the run fills it from ``[llm]``)."""

    # the LLM role's own settings: their defaults are [llm]'s too (``LlmConfig`` reads them from here)
    mode: Mode = "single"
    max_tokens: int = 96
    max_calls: int = 12  # bounds per-sentence and tool loops
    temperature: float | None = None  # None: not asked (see ``ChatRequest``)
    seed: int | None = None
    system_prompt: str = "Answer in one to three short spoken sentences, in the user's language."
    # when the question's language was not known: a system prompt per language, picked by the transcript's
    system_prompts: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"unknown LLM mode {self.mode!r}; choose one of {', '.join(MODES)}")
        if self.max_tokens < 1 or self.max_calls < 1:
            raise ValueError("max_tokens and max_calls must be at least 1")


class LlmStage:
    """The LLM role's stage: one transcript in, the calls of its answer out, on any ``ChatBackend``."""

    def __init__(
        self,
        backend: ChatBackend,
        settings: LlmSettings,
        tools: tuple[ToolSpec, ...] = (),
        executor: ToolExecutor | None = None,
        impl: str = "scripted",
        scripted: bool = True,
        history: tuple[Message, ...] = (),
        device: ToolSource | None = None,
    ) -> None:
        if tools and executor is None:
            raise ValueError("tools were offered without a tool executor")
        self.backend = backend
        self.settings = settings
        self.tools = tools
        self.executor = executor
        self.history = history
        self.device = device  # its tools, once it has listed any, replace ``tools`` and ``executor``
        self.info = StageInfo(
            role="llm",
            impl=impl,
            scripted=scripted,
            attributes=(("llm.mode", settings.mode), ("llm.model", backend.model)),
        )

    async def run(self, events: AsyncIterator[Event]) -> AsyncIterator[Event]:
        async for event in events:
            if isinstance(event, Transcript):
                async for out in self._answer(event.text, self._system_prompt(event.language)):
                    yield out
                return

    def _system_prompt(self, language: str) -> str:
        by_language = dict(self.settings.system_prompts)
        if not by_language:
            return self.settings.system_prompt
        return by_language.get(language[:2], self.settings.system_prompt)

    def _toolset(self) -> tuple[tuple[ToolSpec, ...], ToolExecutor | None]:
        """The tools offered in this turn: read when the model is first asked, as the real server
        reads its function list per chat, so a device's tools listed after the turn began count."""
        offered = self.device.tools() if self.device is not None else ()
        if offered and self.device is not None:
            return offered, self.device.executor()
        return self.tools, self.executor

    async def _answer(self, text: str, system_prompt: str) -> AsyncIterator[Event]:
        messages: tuple[Message, ...] = (
            Message("system", system_prompt),
            *self.history,
            Message("user", text),
        )
        answer = ""
        after_tool = False
        tools, executor = self._toolset()
        for index in range(self.settings.max_calls):
            per_sentence = self.settings.mode == "per-sentence"
            request = ChatRequest(
                messages=messages,
                max_tokens=self.settings.max_tokens,
                stop_at_sentence=per_sentence,
                tools=tools,
                assistant_prefix=answer if per_sentence else "",
                temperature=self.settings.temperature,
                seed=self.settings.seed,
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
            done: CallEnd | None = None
            tool: ToolCall | None = None
            async for chunk in self.backend.stream(request):
                yield chunk
                if isinstance(chunk, TokenDelta):
                    answer += chunk.text
                elif isinstance(chunk, ToolCall):
                    tool = chunk
                elif isinstance(chunk, CallEnd):
                    done = chunk
                    break
            if done is None:
                raise LlmError(f"LLM backend {self.backend.model!r} ended call {index} without finishing")
            if tool is not None and executor is not None:
                try:
                    ran = await run_tool(executor, tool)
                except ToolFailed as exc:  # the trace shows the failed call, and the turn fails with it (M7)
                    yield ToolResult(tool.name, "", where=exc.where, call_id=exc.call_id, error=str(exc))
                    raise
                yield ran
                messages = (
                    *messages,
                    Message("assistant", "", tool_name=tool.name, tool_arguments=tool.arguments),
                    Message("tool", ran.result, tool_name=tool.name),
                )
                after_tool = True
                continue
            if not per_sentence or done.answer_complete or done.finish_reason == "length":
                return


async def run_tool(executor: ToolExecutor, tool: ToolCall) -> ToolResult:
    """The tool's result as the trace records it: where it ran and its id, when the executor says."""
    if isinstance(executor, TracedToolExecutor):
        return await executor.run(tool.name, tool.arguments)
    return ToolResult(name=tool.name, result=await executor.execute(tool.name, tool.arguments))
