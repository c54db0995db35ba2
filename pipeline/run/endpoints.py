"""The endpoint an LLM implementation is served from, started for the run and opened around it.

An implementation registered with an ``endpoint`` (``stages.llm.served``) talks to an
OpenAI-compatible server; which server is the condition's business: llama.cpp's own
``llama-server`` as a local process (``llama-server``), or a real or emulated cloud behind
an optional emulated network (``cloud``). Each names itself for the rows and for config_id.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Protocol

from pipeline.endpoints.cloud import get_compute_profile, serve_endpoint
from pipeline.endpoints.link import get_profile
from pipeline.endpoints.llama_server import LlamaServer
from pipeline.settings.config import Config, public_url
from stages.llm import ChatBackend
from stages.llm.llama import check_chat_model
from stages.llm.openai import OpenAIChatBackend, OpenAISettings
from stages.registry import Models


class SetupError(ValueError):
    """The configuration cannot run on these questions; nothing has started."""


class LlmEndpoint(Protocol):
    label: str  # what rows say the LLM endpoint is
    identity: dict[str, str]  # what config_id records of it
    scripted: bool  # its latencies are data (an emulated cloud), not measurements

    def open(
        self, api_key: str | None, answers: Mapping[str, str]
    ) -> contextlib.AbstractAsyncContextManager[ChatBackend]:
        """The client for the run's duration."""

    def close(self) -> None: ...


def openai_settings(cfg: Config, base_url: str) -> OpenAISettings:
    return OpenAISettings(
        base_url=base_url,
        model=cfg.llm.model,
        api_key_env=cfg.cloud.api_key_env,
        connect_timeout_s=cfg.cloud.connect_timeout_s,
        read_timeout_s=cfg.cloud.read_timeout_s,
        retries=cfg.cloud.retries,
        retry_backoff_ms=cfg.cloud.retry_backoff_ms,
        temperature=cfg.llm.temperature,
        seed=cfg.llm.seed,
        stream_usage=cfg.cloud.stream_usage,
        sentence_stops=tuple(s for s in cfg.cloud.sentence_stops.split("|") if s),
        continuation=cfg.cloud.continuation,  # type: ignore[arg-type]
        keepalive_s=cfg.cloud.keepalive_s,
    )


def llama_server_settings(cfg: Config, base_url: str) -> OpenAISettings:
    """llama-server drops idle kept-alive connections between streamed answers (seen here as
    ServerDisconnected on the next call), so each call opens its own: on loopback that costs
    well under a millisecond."""
    cache = cfg.llm.prompt_cache != "off"  # prefix and carry: llama-server keeps prompts in its own cache
    return dataclasses.replace(openai_settings(cfg, base_url), keepalive_s=0.0, cache_prompt=cache)


class LlamaServerEndpoint:
    """llama.cpp's own server, started as a local process on 127.0.0.1 for the run."""

    scripted = False

    def __init__(self, cfg: Config, models: Models, env: Mapping[str, str]) -> None:
        path = models.resolve(cfg.llm.model)
        info = check_chat_model(path)
        self.cfg = cfg
        self.server = LlamaServer(path, cfg.llm.threads, cfg.llm.n_ctx, cfg.llm.seed, env=env).start()
        self.identity = {"llm": f"{models.identity(cfg.llm.model, path)} {info.quantisation}"}
        self.label = f"llama.cpp server (local process), {cfg.llm.model}"

    @contextlib.asynccontextmanager
    async def open(self, api_key: str | None, answers: Mapping[str, str]) -> AsyncIterator[ChatBackend]:
        settings = llama_server_settings(self.cfg, self.server.base_url)
        async with OpenAIChatBackend(settings, self.server.api_key) as client:
            yield client

    def close(self) -> None:
        self.server.stop()


class CloudEndpoint:
    """A cloud endpoint at ``[cloud] base_url``, or the emulated cloud; behind an emulated network if set.

    Unknown profile names fail here, before the run.
    """

    def __init__(self, cfg: Config, _models: Models, _env: Mapping[str, str]) -> None:
        self.cfg = cfg
        try:
            network = get_profile(cfg.network.profile).as_dict() if cfg.network.profile != "none" else {}
            compute = get_compute_profile(cfg.cloud.emulator) if cfg.cloud.emulator else None
        except ValueError as exc:
            raise SetupError(str(exc)) from None
        self.identity = {"network": json.dumps(network, sort_keys=True)}
        self.scripted = compute is not None
        if compute is not None:
            self.identity["llm"] = json.dumps(dataclasses.asdict(compute), sort_keys=True)
            self.label = f"emulated cloud, profile {compute.name}"
        else:
            self.identity["llm"] = f"{public_url(cfg.cloud.base_url)} {cfg.llm.model}"
            self.label = f"cloud {public_url(cfg.cloud.base_url)}"
        if cfg.network.profile != "none":
            self.label += f"; network {cfg.network.profile}"

    @contextlib.asynccontextmanager
    async def open(self, api_key: str | None, answers: Mapping[str, str]) -> AsyncIterator[ChatBackend]:
        cloud, given = self.cfg.cloud, answers if self.cfg.cloud.emulator_answers else None
        async with serve_endpoint(cloud.base_url, cloud.emulator, self.cfg.network.profile, given) as endpoint:
            settings = openai_settings(self.cfg, endpoint.base_url)
            async with OpenAIChatBackend(settings, api_key, connect_to=endpoint.connect_to) as client:
                yield client

    def close(self) -> None:
        pass


ENDPOINTS: dict[str, Callable[[Config, Models, Mapping[str, str]], LlmEndpoint]] = {
    "llama-server": LlamaServerEndpoint,
    "cloud": CloudEndpoint,
}
