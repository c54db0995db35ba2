"""Server-Sent Events to JSON payloads, as an OpenAI-compatible stream sends them."""

from __future__ import annotations

import json
from typing import Any

from stages.llm.openai.errors import LlmProtocolError


class SseLines:
    """Server-Sent Events to JSON payloads, one per complete ``data`` field.

    A payload is handed on as soon as its data parses, without waiting for the blank
    line that ends the event; multi-line data is joined as the SSE standard says.
    ``None`` stands for ``data: [DONE]``. Comments and other fields are ignored.
    """

    def __init__(self) -> None:
        self.pending: list[str] = []
        self.events = 0

    def feed(self, raw: bytes) -> list[dict[str, Any] | None]:
        try:
            line = raw.decode("utf-8").rstrip("\r\n")
        except UnicodeDecodeError:
            raise LlmProtocolError(f"stream is not UTF-8 text: {raw[:60]!r}") from None
        if not line:
            return self._end_of_event()
        if line.startswith(":") or not line.startswith("data:"):
            return []
        data = line[5:].removeprefix(" ")
        if not self.pending and data.strip() == "[DONE]":
            self.events += 1
            return [None]
        self.pending.append(data)
        return self._parsed(strict=False)

    def close(self) -> list[dict[str, Any] | None]:
        return self._end_of_event()

    def _end_of_event(self) -> list[dict[str, Any] | None]:
        return self._parsed(strict=True) if self.pending else []

    def _parsed(self, strict: bool) -> list[dict[str, Any] | None]:
        text = "\n".join(self.pending)
        try:
            payload = json.loads(text)
        except ValueError:
            if strict:
                raise LlmProtocolError(f"malformed JSON in the event stream: {text[:120]!r}") from None
            return []
        self.pending = []
        if not isinstance(payload, dict):
            raise LlmProtocolError(f"event data is not a JSON object: {text[:120]!r}")
        self.events += 1
        return [payload]
