"""An OpenAI-compatible streaming chat backend: errors, request, SSE, stream shaping, client."""

from stages.llm.client_options import CONTINUATIONS, SENTENCE_STOPS
from stages.llm.openai.client import OpenAIChatBackend
from stages.llm.openai.errors import (
    CloudLlmError,
    LlmAuthError,
    LlmConnectionError,
    LlmHttpError,
    LlmMissingApiKey,
    LlmProtocolError,
    LlmServerError,
    LlmTimeout,
    LlmUnreachable,
    RateLimited,
    redact,
    retryable,
)
from stages.llm.openai.request import OpenAISettings, openai_messages, request_body
from stages.llm.openai.shaper import SERVER_TIMINGS, StreamShaper
from stages.llm.openai.sse import SseLines

__all__ = [
    "CONTINUATIONS",
    "SENTENCE_STOPS",
    "SERVER_TIMINGS",
    "CloudLlmError",
    "LlmAuthError",
    "LlmConnectionError",
    "LlmHttpError",
    "LlmMissingApiKey",
    "LlmProtocolError",
    "LlmServerError",
    "LlmTimeout",
    "LlmUnreachable",
    "OpenAIChatBackend",
    "OpenAISettings",
    "RateLimited",
    "SseLines",
    "StreamShaper",
    "openai_messages",
    "redact",
    "request_body",
    "retryable",
]
