"""The request side of an OpenAI-compatible call: the client's settings and the JSON body.

``continuation`` says how a provider marks a trailing assistant message to be continued
(per-sentence mode): plain, DashScope's ``partial``, DeepSeek's ``prefix`` or vLLM's flags.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from yarl import URL

from stages.llm.backend import ChatRequest, Message
from stages.llm.client_options import ClientOptions


@dataclass(frozen=True, slots=True)
class OpenAISettings(ClientOptions):
    """The client's settings: where the endpoint is, the model it serves, and how calls are made to it
    (``ClientOptions``, keyword-only; sampling is each request's own: ``ChatRequest.temperature``, ``seed``)."""

    base_url: str  # up to and including the version, e.g. https://api.deepseek.com/v1
    model: str
    cache_prompt: bool | None = None  # llama-server's prompt cache, per request (None: not sent)

    def __post_init__(self) -> None:
        super(OpenAISettings, self).__post_init__()
        url = URL(self.base_url)
        if url.scheme not in ("http", "https") or not url.host:
            raise ValueError(f"base_url {self.base_url!r}: expected http(s)://host[:port]/path")
        if not self.model:
            raise ValueError("model must be given")


# --- request --------------------------------------------------------------------------------


def openai_messages(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """Our messages in the OpenAI chat format; tool calls get ids and their results refer to them."""
    out: list[dict[str, Any]] = []
    call_id = ""
    for m in messages:
        if m.role == "assistant" and m.tool_name:
            call_id = f"call_{len(out)}"
            function = {"name": m.tool_name, "arguments": m.tool_arguments or "{}"}
            out.append(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [{"id": call_id, "type": "function", "function": function}],
                }
            )
        elif m.role == "tool":
            out.append({"role": "tool", "tool_call_id": call_id or "call_0", "content": m.content})
        else:
            out.append({"role": m.role, "content": m.content})
    return out


def request_body(settings: OpenAISettings, request: ChatRequest) -> dict[str, Any]:
    """The streamed ``/chat/completions`` request's JSON body for one call."""
    messages = openai_messages(request.messages)
    body: dict[str, Any] = {"model": settings.model, "stream": True, "max_tokens": request.max_tokens}
    if settings.stream_usage:
        body["stream_options"] = {"include_usage": True}
    if request.temperature is not None:
        body["temperature"] = request.temperature
    if request.seed is not None:
        body["seed"] = request.seed
    if settings.cache_prompt is not None:
        body["cache_prompt"] = settings.cache_prompt
    if request.tools:
        body["tools"] = [
            {
                "type": "function",
                "function": {"name": t.name, "description": t.description, "parameters": json.loads(t.parameters_json)},
            }
            for t in request.tools
        ]
    if request.stop_at_sentence and settings.stops:
        body["stop"] = list(settings.stops)
    if request.assistant_prefix:
        prefix: dict[str, Any] = {"role": "assistant", "content": request.assistant_prefix}
        if settings.continuation == "partial":  # DashScope
            prefix["partial"] = True
        elif settings.continuation == "prefix":  # DeepSeek (beta)
            prefix["prefix"] = True
        elif settings.continuation == "vllm":
            body["continue_final_message"], body["add_generation_prompt"] = True, False
        messages.append(prefix)
    body["messages"] = messages
    return body
