"""The endpoint an LLM implementation is served from, started for the run and opened around it.

An implementation registered with an ``endpoint`` (``stages.llm.served``) talks to an
OpenAI-compatible server; which server is the condition's business: llama.cpp's own
``llama-server`` as a local process (``llama-server``), or a real or emulated cloud behind
an optional emulated network (``cloud``). Each names itself for the rows and for config_id;
the implementation opens its own client on it (``Implementation.open``), so nothing here
names a backend's module.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

from pipeline.endpoints.cloud import get_compute_profile, serve_endpoint
from pipeline.endpoints.link import get_profile
from pipeline.endpoints.llama_server import LlamaServer
from pipeline.settings.config import CloudConfig, Config, public_url
from stages.llm import ChatBackend
from stages.registry import Implementation, Loaded, Served


class SetupError(ValueError):
    """The configuration cannot run on these questions; nothing has started."""


class LlmEndpoint(Protocol):
    """An endpoint started for the run: what rows and config_id say of it, and its client for the run."""

    label: str  # what rows say the LLM endpoint is
    identity: dict[str, str]  # what config_id records of it
    scripted: bool  # its latencies are data (an emulated cloud), not measurements

    def open(
        self, api_key: str | None, answers: Mapping[str, str]
    ) -> contextlib.AbstractAsyncContextManager[ChatBackend]:
        """The client for the run's duration."""

    def close(self) -> None: ...


def client_settings(cloud: CloudConfig) -> dict[str, Any]:
    """``[cloud]``'s options of the OpenAI-compatible client, by their names (``Served.client``)."""
    return dataclasses.asdict(cloud.options())


def _open(impl: Implementation, settings: object, served: Served) -> contextlib.AbstractAsyncContextManager[Any]:
    """The implementation's client on ``served``."""
    if impl.open is None:
        raise SetupError(f"[llm] impl = {impl.name!r} names the endpoint {impl.endpoint!r} but opens no client on it")
    return impl.open(settings, served)


class LlamaServerEndpoint:
    """llama.cpp's own server, started as a local process on 127.0.0.1 for the run, on the model the
    implementation loaded (checked to be a chat model) with its ``threads``, ``n_ctx`` (each slot's) and
    ``parallel`` slots."""

    scripted = False

    def __init__(self, cfg: Config, impl: Implementation, loaded: Loaded | None, env: Mapping[str, str]) -> None:
        if loaded is None or not isinstance(loaded.engine, Path):
            raise SetupError(f"[llm] impl = {impl.name!r}: llama-server needs the model file its load found")
        self.cfg, self.impl = cfg, impl
        self.settings = impl.settings_from(cfg.llm)
        threads, n_ctx = self.settings.threads, self.settings.n_ctx  # llama.cpp's knobs, its server's arguments
        parallel = self.settings.parallel
        self.server = LlamaServer(loaded.engine, threads, n_ctx, cfg.llm.seed, env=env, parallel=parallel).start()
        self.identity: dict[str, str] = {}  # the model's is its load's
        self.label = f"llama.cpp server (local process), {self.settings.model}"
        if parallel > 1:
            self.label += f", {parallel} slots"

    @contextlib.asynccontextmanager
    async def open(self, api_key: str | None, answers: Mapping[str, str]) -> AsyncIterator[ChatBackend]:
        served = Served(self.server.base_url, self.server.api_key, client_settings(self.cfg.cloud))
        async with _open(self.impl, self.settings, served) as client:
            yield client

    def close(self) -> None:
        self.server.stop()


class CloudEndpoint:
    """A cloud endpoint at ``[cloud] base_url``, or the emulated cloud; behind an emulated network if set.

    Unknown profile names fail here, before the run.
    """

    def __init__(self, cfg: Config, impl: Implementation, _loaded: Loaded | None, _env: Mapping[str, str]) -> None:
        self.cfg, self.impl = cfg, impl
        self.settings = impl.settings_from(cfg.llm)
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
            self.identity["llm"] = f"{public_url(cfg.cloud.base_url)} {self.settings.model}"
            self.label = f"cloud {public_url(cfg.cloud.base_url)}"
        if cfg.network.profile != "none":
            self.label += f"; network {cfg.network.profile}"

    @contextlib.asynccontextmanager
    async def open(self, api_key: str | None, answers: Mapping[str, str]) -> AsyncIterator[ChatBackend]:
        cloud, given = self.cfg.cloud, answers if self.cfg.cloud.emulator_answers else None
        async with serve_endpoint(cloud.base_url, cloud.emulator, self.cfg.network.profile, given) as endpoint:
            served = Served(endpoint.base_url, api_key, client_settings(cloud), endpoint.connect_to)
            async with _open(self.impl, self.settings, served) as client:
                yield client

    def close(self) -> None:
        pass


ENDPOINTS: dict[str, Callable[[Config, Implementation, Loaded | None, Mapping[str, str]], LlmEndpoint]] = {
    "llama-server": LlamaServerEndpoint,
    "cloud": CloudEndpoint,
}
