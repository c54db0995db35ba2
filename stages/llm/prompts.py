"""What the voice assistant is told: its system prompt per language and the device tools it may call,
and the pretend device that answers those calls whichever backend made them (``[llm] tool_latency``)."""

from __future__ import annotations

import asyncio

from pipeline.events import LatencyProfile
from stages.llm.backend import ToolSpec

DEVICE_TOOLS = (
    ToolSpec(
        name="set_light",
        description="Turn a light on or off.",
        parameters_json='{"type":"object","properties":{"room":{"type":"string"},"on":{"type":"boolean"}}}',
    ),
    ToolSpec(
        name="set_volume",
        description="Set the speaker volume from 0 to 100.",
        parameters_json='{"type":"object","properties":{"level":{"type":"integer"}}}',
    ),
)

SYSTEM_PROMPTS = {
    "zh": "你是一个语音助手。请用一到两句简短的中文口语回答，不要使用列表、表情或Markdown。",
    "en": "You are a voice assistant. Answer in one or two short spoken English sentences. No lists, no markdown.",
}

ASSISTANT_LANGUAGES = tuple(SYSTEM_PROMPTS)


def system_prompt(language: str) -> str:
    """The system prompt for a question in ``language`` (English for a language it has none for)."""
    return SYSTEM_PROMPTS.get(language[:2], SYSTEM_PROMPTS["en"])


class ScriptedTools:
    """A pretend device: every tool call succeeds after a scripted latency."""

    def __init__(self, latency: LatencyProfile) -> None:
        self.latency = latency

    async def execute(self, name: str, arguments: str) -> str:
        await asyncio.sleep(next(self.latency.delays_s()))
        return '{"ok": true}'
