"""The LLM stage, the chat-backend contract, and one module per backend (llama, openai, scripted)."""

from stages.llm import llama, scripted, served
from stages.llm.backend import ChatBackend, ChatRequest, Chunk, LlmError, Message, ToolExecutor, ToolSpec
from stages.llm.stage import MODES, LlmSettings, LlmStage, Mode

IMPLEMENTATIONS = (llama.IMPLEMENTATION, served.SERVER, served.OPENAI, scripted.IMPLEMENTATION)

__all__ = [
    "IMPLEMENTATIONS",
    "MODES",
    "ChatBackend",
    "ChatRequest",
    "Chunk",
    "LlmError",
    "LlmSettings",
    "LlmStage",
    "Message",
    "Mode",
    "ToolExecutor",
    "ToolSpec",
]
