"""Chunk payloads of one streamed call -> the contract's events: text, a tool call, the call's end.

The first chunk (often a role-only delta) becomes an empty ``TokenDelta``: the recorder stamps it
as the first chunk but does not count it as a token. The server's own timings (llama.cpp
``timings``, the emulated cloud's ``queue_ms``) and the number of attempts go on ``CallEnd``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from pipeline.events import CallEnd, TokenDelta, ToolCall, ToolCallDelta
from stages.llm.backend import ChatRequest, Chunk
from stages.llm.openai.errors import LlmConnectionError, LlmProtocolError, LlmServerError
from stages.llm.toolcall import OutputSorter

SENTENCE_ENDS = "。！？；….!?;"
SERVER_TIMINGS = ("queue_ms", "prompt_ms", "predicted_ms", "cache_n", "prompt_n", "predicted_n")


@dataclass(slots=True)
class _ToolParts:
    name: str = ""
    arguments: str = ""


@dataclass(slots=True)
class StreamShaper:
    """Turns chunk payloads of one attempt into text deltas, a tool call and the final CallEnd."""

    request: ChatRequest
    text: str = ""
    chunks: int = 0
    deltas: int = 0
    finish_reason: str = ""
    stop_reason: str | None = None
    stop_reason_known: bool = False
    usage: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    tools: dict[int, _ToolParts] = field(default_factory=dict)
    finished: bool = False  # [DONE] seen
    sorter: OutputSorter = field(init=False)  # a tool call a server passes on as content (bare JSON)
    held_output: bool = False  # output was held back: a retry would repeat what the client already saw

    def __post_init__(self) -> None:
        self.sorter = OutputSorter(t.name for t in self.request.tools)

    @property
    def produced(self) -> bool:
        """Whether any output has been handed on (the empty first-chunk delta does not count)."""
        return self.deltas > 0 or self.held_output or bool(self.tools)

    def feed(self, payload: dict[str, Any] | None) -> list[Chunk]:
        if payload is None:
            self.finished = True
            return []
        if "error" in payload:
            raise LlmServerError(f"server error in stream: {json.dumps(payload['error'])[:300]}")
        self._side_info(payload)
        out: list[Chunk] = []
        choices = payload.get("choices")
        if not isinstance(choices, list):
            raise LlmProtocolError(f"chunk without a 'choices' list: {json.dumps(payload)[:120]}")
        choice = next((c for c in choices if isinstance(c, dict) and c.get("index", 0) == 0), None)
        if choice is not None:
            out += self._choice(choice)
        if self.chunks == 0 and not out:
            out.append(TokenDelta(""))  # the first chunk: stamped, but not a token
        self.chunks += 1
        return out

    def _side_info(self, payload: dict[str, Any]) -> None:
        if isinstance(payload.get("usage"), dict):
            self.usage = payload["usage"]
        timings = payload.get("timings")
        if isinstance(timings, dict):
            self.timings = {k: float(v) for k, v in timings.items() if k in SERVER_TIMINGS and _number(v)}

    def _choice(self, choice: dict[str, Any]) -> list[Chunk]:
        delta = choice.get("delta") or {}
        if not isinstance(delta, dict):
            raise LlmProtocolError(f"'delta' is not an object: {delta!r:.120}")
        out: list[Chunk] = []
        content = delta.get("content")
        if isinstance(content, str) and content:
            events, speech = self.sorter.feed(content)
            out += events
            self.held_output = self.held_output or bool(events)
            if speech:
                self.text += speech
                self.deltas += 1
                out.append(TokenDelta(speech))
        for call in delta.get("tool_calls") or []:
            piece = self._tool_part(call)
            if piece:
                out.append(ToolCallDelta(piece))
        if choice.get("finish_reason"):
            self.finish_reason = str(choice["finish_reason"])
            if "stop_reason" in choice:  # vLLM and the emulated cloud name the stop sequence hit
                self.stop_reason_known = True
                reason = choice["stop_reason"]
                self.stop_reason = reason if isinstance(reason, str) else None
        return out

    def _tool_part(self, call: Any) -> str:
        """Accumulate a streamed piece of a tool call; returns what it added (its name or arguments)."""
        if not isinstance(call, dict):
            raise LlmProtocolError(f"malformed tool call delta: {call!r:.120}")
        parts = self.tools.setdefault(int(call.get("index", 0)), _ToolParts())
        function = call.get("function") or {}
        name, arguments = str(function.get("name") or ""), str(function.get("arguments") or "")
        parts.name += name
        parts.arguments += arguments
        return name + arguments

    def finish(self, attempts: int) -> list[Chunk]:
        """The call's last chunks: a stop sequence put back, a tool call, then CallEnd."""
        if not self.finish_reason and not self.finished:
            raise LlmConnectionError("the stream ended before the answer finished (no finish_reason, no [DONE])")
        out: list[Chunk] = []
        finish = self.finish_reason or "stop"
        complete = finish != "length"
        content_call, leftover = self.sorter.finish()
        if leftover.strip():
            self.text += leftover
            self.deltas += 1
            out.append(TokenDelta(leftover))
        if content_call is not None and not self.tools:
            out.append(content_call)
            finish = "tool_calls"
        elif self.tools:
            first = self.tools[min(self.tools)]  # the stage runs one tool per call
            if not first.name:
                raise LlmProtocolError("a tool call without a function name")
            out.append(ToolCall(first.name, first.arguments or "{}"))
            finish = "tool_calls"
        elif self.request.stop_at_sentence and finish == "stop":
            hit, ending = self._stop_hit()
            if ending:
                out.append(TokenDelta(ending))
            complete = not hit
        output_tokens = _int(self.usage.get("completion_tokens"), self.deltas)
        timings = [(k, self.timings[k]) for k in SERVER_TIMINGS if k in self.timings]
        timings.append(("attempts", float(attempts)))
        out.append(
            CallEnd(
                finish,
                output_tokens=output_tokens,
                input_tokens=_int(self.usage.get("prompt_tokens"), 0),
                cached_tokens=self._cached_tokens(),
                answer_complete=complete,
                server_timings=tuple(timings),
            )
        )
        return out

    def _cached_tokens(self) -> int | None:
        """Prompt tokens the server served from its cache: OpenAI's usage field, or llama.cpp's ``cache_n``."""
        details = self.usage.get("prompt_tokens_details")
        if isinstance(details, dict) and _number(details.get("cached_tokens")):
            return int(details["cached_tokens"])
        return int(self.timings["cache_n"]) if "cache_n" in self.timings else None

    def _stop_hit(self) -> tuple[bool, str]:
        """Whether a stop sequence ended this call, and the punctuation to put back.

        Servers leave the matched stop sequence out of the text. vLLM and the emulated cloud
        name it (``stop_reason``); for the others it is inferred: a sentence that ends without
        its closing punctuation was cut there, and gets the likely one back. Only the visible
        part comes back (". " gives "."), so the next call continues with its own leading space.
        """
        if not self.text.strip():
            return False, ""
        if self.stop_reason_known:
            return self.stop_reason is not None, (self.stop_reason or "").strip()
        if self.text.rstrip()[-1] in SENTENCE_ENDS:
            return False, ""
        return True, "。" if re.search(r"[\u3400-\u9fff]", self.text[-4:]) else "."


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _int(value: Any, default: int) -> int:
    return int(value) if _number(value) else default
