"""The LLM role: its stage, the chat-backend contract, the pretend device's tools, and one module per
backend (``llama``, ``served``: llama.cpp's server and OpenAI-compatible endpoints, ``scripted``), each
owning its ``[llm]`` settings. Outside ``stages/`` the role is reached through this package."""

from stages.llm import llama, scripted, served
from stages.llm.backend import (
    ChatBackend,
    ChatRequest,
    Chunk,
    LlmError,
    Message,
    ToolExecutor,
    ToolSource,
    ToolSpec,
)
from stages.llm.client_options import ClientOptions
from stages.llm.prompts import DEVICE_TOOLS, SYSTEM_PROMPTS, ScriptedTools, system_prompt
from stages.llm.stage import MODES, LlmSettings, LlmStage, Mode

IMPLEMENTATIONS = (llama.IMPLEMENTATION, served.SERVER, served.OPENAI, scripted.IMPLEMENTATION)

__all__ = [
    "DEVICE_TOOLS",
    "IMPLEMENTATIONS",
    "MODES",
    "SYSTEM_PROMPTS",
    "ChatBackend",
    "ChatRequest",
    "Chunk",
    "ClientOptions",
    "LlmError",
    "LlmSettings",
    "LlmStage",
    "Message",
    "Mode",
    "ScriptedTools",
    "ToolExecutor",
    "ToolSource",
    "ToolSpec",
    "system_prompt",
]
