"""What the voice assistant is told: its system prompt per language and the device tools it may call."""

from __future__ import annotations

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
    return SYSTEM_PROMPTS.get(language[:2], SYSTEM_PROMPTS["en"])
