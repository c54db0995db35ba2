"""Recognises a tool call in a model's streamed text as early as it can, holding back only what might be one.

Qwen-style models answer a tool call with ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``
(or the bare JSON). Text is held only while it can still become such a call: the tag (or any
prefix of it), or JSON that so far reads as ``{"name": "<an offered tool>"``. The moment the
output cannot be a tool call any more it is released as text; the moment it must be one it is
reported as a tool call, so a spoken answer streams token by token and a tool call's first
output is stamped when the model produced it. Used by the in-process backend, and by the
OpenAI-compatible one for servers that pass such output on as content (llama-server parses
only the tagged form: the packaged Qwen2.5-Coder models answer with bare JSON).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from enum import Enum

from pipeline.events import OutputStart, ToolCall, ToolCallDelta

TOOL_OPEN, TOOL_CLOSE = "<tool_call>", "</tool_call>"


class Reading(Enum):
    """What a call's output so far is, and so what to do with it."""

    MAYBE = "maybe"  # could still become a tool call: hold it
    TOOL = "tool"  # a tool call: it will never be spoken
    TEXT = "text"  # cannot be a tool call: release it


class ToolCallDetector:
    """Tells, for the tools offered to one call, whether its output so far is a tool call, may become one or is
    text (``read``), and reads the complete call out of it (``parse``)."""

    def __init__(self, tool_names: Iterable[str]) -> None:
        self.names = {name for name in tool_names}
        self._heads = tuple(f'{{"name":"{name}"' for name in sorted(self.names))

    def read(self, text: str) -> Reading:
        """What the output so far is. Whitespace is ignored: tool names and JSON keys hold none."""
        compact = "".join(text.split())
        if compact.startswith(TOOL_OPEN):
            return Reading.TOOL
        if TOOL_OPEN.startswith(compact):
            return Reading.MAYBE  # also the empty string: nothing visible yet
        if any(compact.startswith(head) for head in self._heads):
            return Reading.TOOL
        if any(head.startswith(compact) for head in self._heads):
            return Reading.MAYBE
        return Reading.TEXT

    def parse(self, text: str) -> ToolCall | None:
        """The complete tool call in ``text``, or None when it is not a well-formed call of an offered tool."""
        body = text.replace(TOOL_OPEN, "").replace(TOOL_CLOSE, "").strip()
        try:
            data = json.loads(body)
            name = str(data["name"])
        except (ValueError, KeyError, TypeError):
            return None
        if name not in self.names:
            return None
        return ToolCall(name, json.dumps(data.get("arguments", {}), ensure_ascii=False))


class OutputSorter:
    """Sorts one call's streamed output into speech and a tool call, holding back only what it must.

    ``feed`` returns the events to pass on now (``OutputStart`` when the first visible output is
    held back, ``ToolCallDelta`` for pieces of a tool call) and the text that may be spoken now;
    ``finish`` returns the complete tool call, if the output was a well-formed one, and any text
    still held (a malformed call is what the model said, so it is spoken).
    """

    def __init__(self, tool_names: Iterable[str]) -> None:
        names = list(tool_names)
        self.detector = ToolCallDetector(names) if names else None
        self.held = ""
        self.tool: str | None = None
        self.speaking = self.detector is None  # decided: the output is speech
        self.started = False

    def feed(self, text: str) -> tuple[list[OutputStart | ToolCallDelta], str]:
        if self.tool is not None:
            self.tool += text
            return ([ToolCallDelta(text)] if text else []), ""
        if self.speaking:
            return [], text
        self.held += text
        events: list[OutputStart | ToolCallDelta] = []
        if not self.started and self.held.strip():
            self.started = True
            events.append(OutputStart())  # stamped now, whatever the held text turns out to be
        assert self.detector is not None
        if not self.held.strip():  # whitespace is never a tool call's start: hand it on, still undecided
            released, self.held = self.held, ""
            return events, released
        reading = self.detector.read(self.held)
        if reading is Reading.MAYBE:
            return events, ""
        if reading is Reading.TOOL:
            self.tool, self.held = self.held, ""
            return [*events, ToolCallDelta(self.tool)], ""
        self.speaking = True
        released, self.held = self.held, ""
        return events, released

    def finish(self) -> tuple[ToolCall | None, str]:
        call = self.detector.parse(self.tool) if self.detector is not None and self.tool is not None else None
        if call is not None:
            return call, ""
        return None, (self.tool or "") + self.held
