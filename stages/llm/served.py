"""LLMs behind an OpenAI-compatible endpoint that the run starts and opens.

``server`` is llama.cpp's own ``llama-server`` as a local process, on llama.cpp's settings and its
``parallel`` slots (``stages.llm.llama.llama_settings``); ``openai`` is a cloud endpoint (or the emulated cloud). Either
way the stage talks to it through the OpenAI-compatible client (``stages.llm.openai``), which this
module opens, once per run, on the endpoint the run started (``Served``: where it is, and the
client's settings from ``[cloud]``); starting the endpoint belongs to the run.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from stages.llm.backend import ChatBackend
from stages.llm.llama.engine import check_chat_model
from stages.llm.llama.llama_settings import LlamaServerSettings, LlamaSettings
from stages.llm.prompts import ASSISTANT_LANGUAGES
from stages.registry import ConfigError, Implementation, Loaded, Models, Served, TurnInputs


@dataclass(frozen=True, slots=True)
class OpenAILlmSettings:
    """The ``[llm]`` keys of ``impl = "openai"``; where the endpoint is and how it is called are ``[cloud]``'s."""

    model: str = "emulated-cloud"  # the name the endpoint serves: the emulated cloud's, unless yours is named

    def __post_init__(self) -> None:
        if not self.model:
            raise ConfigError("[llm] model = '': name the model the endpoint serves")


def _load_server(s: LlamaSettings, models: Models) -> Loaded:
    """The GGUF llama-server will be started on, checked to be a chat model before anything starts."""
    path = models.resolve(s.model)
    info = check_chat_model(path)
    return Loaded(path, f"{models.identity(s.model, path)} {info.quantisation}")


@contextlib.asynccontextmanager
async def _client(served: Served, model: str, **own: Any) -> AsyncIterator[ChatBackend]:
    from stages.llm.openai import OpenAIChatBackend, OpenAISettings  # aiohttp: the openai extra, needed here only

    settings = OpenAISettings(base_url=served.base_url, model=model, **{**served.client, **own})
    async with OpenAIChatBackend(settings, served.api_key, connect_to=served.connect_to) as client:
        yield client


def _open_server(s: LlamaSettings, served: Served) -> contextlib.AbstractAsyncContextManager[ChatBackend]:
    """llama-server drops idle kept-alive connections between streamed answers (seen here as
    ServerDisconnected on the next call), so each call opens its own: on loopback that costs well under
    a millisecond. ``prefix`` and ``carry`` let it keep prompts in its own cache; ``off`` asks it not to."""
    return _client(served, s.model, keepalive_s=0.0, cache_prompt=s.prompt_cache != "off")


def _open_cloud(s: OpenAILlmSettings, served: Served) -> contextlib.AbstractAsyncContextManager[ChatBackend]:
    return _client(served, s.model)


def _build(_s: object, client: ChatBackend, _turn: TurnInputs) -> ChatBackend:
    return client


SERVER = Implementation(
    "llm",
    "server",
    LlamaServerSettings,
    _build,
    load=_load_server,
    languages=ASSISTANT_LANGUAGES,
    endpoint="llama-server",
    open=_open_server,
)
OPENAI = Implementation(
    "llm", "openai", OpenAILlmSettings, _build, languages=ASSISTANT_LANGUAGES, endpoint="cloud", open=_open_cloud
)
