"""What a run of condition A talks to: the emulated cloud (or a real endpoint) behind an optional link emulator."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass

from yarl import URL

from pipeline.endpoints.cloud.chat_server import EmulatedCloud
from pipeline.endpoints.cloud.compute import get_compute_profile
from pipeline.endpoints.link import LinkEmulator, get_profile


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where the chat backend sends its requests, and what every row must say about it."""

    base_url: str
    connect_to: tuple[str, int] | None  # the link emulator in front, if any
    label: str  # e.g. "emulated cloud, profile busy; network internet"
    cloud: EmulatedCloud | None = None
    link: LinkEmulator | None = None


@contextlib.asynccontextmanager
async def serve_endpoint(
    base_url: str = "",
    emulator: str = "",
    network: str = "none",
    answers: Mapping[str, str] | None = None,
    api_key: str | None = None,
) -> AsyncIterator[Endpoint]:
    """Start what a run needs in front of its LLM: the emulated cloud (when ``emulator`` names a
    compute profile, else the real endpoint at ``base_url``) and the link emulator (unless
    ``network`` is ``none``). Unknown profile names raise ValueError before anything starts."""
    compute = get_compute_profile(emulator) if emulator else None
    link_profile = get_profile(network) if network != "none" else None
    async with contextlib.AsyncExitStack() as stack:
        cloud: EmulatedCloud | None = None
        if compute is not None:
            cloud = await stack.enter_async_context(EmulatedCloud(compute, answers=answers, api_key=api_key))
            base_url, label = cloud.base_url, cloud.label
        else:
            url = URL(base_url)
            label = f"cloud {url.host}:{url.port}"
        connect_to, link = None, None
        if link_profile is not None:
            url = URL(base_url)
            assert url.host is not None and url.port is not None, base_url
            link = await stack.enter_async_context(LinkEmulator(link_profile, url.host, url.port))
            connect_to = ("127.0.0.1", link.port)
        yield Endpoint(base_url, connect_to, f"{label}; network {network}", cloud, link)
