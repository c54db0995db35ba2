"""What tests that play one end of the wire share: raw JSON as the firmware writes it, and a wake reply.

A test that stands in for a device or a server writes and reads plain JSON objects, as the real
firmware and clients do; it does not borrow the lab's own typed messages, so a test also checks
that the lab reads what the real parts write.
"""

from __future__ import annotations

import json
from typing import Any

from tests.scenario import TONE

FIRMWARE_AUDIO = {"format": "opus", "sample_rate": 16000, "channels": 1, "frame_duration": 60}


def dump(message: dict[str, Any]) -> str:
    """A message as the firmware writes it: compact JSON, UTF-8."""
    return json.dumps(message, ensure_ascii=False, separators=(",", ":"))


def parse(text: str | bytes) -> dict[str, Any]:
    """A message as a test reads it: the JSON object, which must have a string ``type``."""
    message = json.loads(text)
    assert isinstance(message, dict) and isinstance(message.get("type"), str), message
    return message


def hello(**extra: Any) -> dict[str, Any]:
    """The firmware's hello (websocket_protocol.cc GetHelloMessage); ``extra`` adds or overrides fields."""
    return {"type": "hello", "version": 1, "transport": "websocket", "audio_params": FIRMWARE_AUDIO, **extra}


class ToneReply:
    """A ``Turns.cached_reply`` for tests: five frames of tone, whatever the text."""

    async def cached_reply(self, text: str, session_id: str) -> list[bytes]:
        return [TONE] * 5

    def ended(self, session_id: str) -> None:
        """A session is over: these tests keep nothing by session."""
