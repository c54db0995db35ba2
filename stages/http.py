"""One request to an OpenAI-compatible speech service: what the service ASR and the service TTS share.

A new connection per request, as the real xiaozhi providers' ``requests.post`` opens one. A
refusal is raised as ``ServiceError`` with the service's address, status and the start of its
words, so the turn's error says which service said what.
"""

from __future__ import annotations

from typing import Any

import aiohttp

from stages.registry import ConfigError

_SCHEMES = ("http://", "https://")


class ServiceError(RuntimeError):
    """The speech service refused or failed a request; the message carries its status and error text."""


def check_url(role: str, url: str) -> None:
    """Refuses a ``[role] url`` that is given but is no web address (an empty one is refused when built)."""
    if url and not url.startswith(_SCHEMES):
        raise ConfigError(f"[{role}] url = {url!r}: an http:// or https:// address")


def require_url(role: str, url: str, endpoint: str) -> None:
    """Refuses to build a service stage with no address; ``endpoint`` is the path its url ends in."""
    if not url.startswith(_SCHEMES):
        raise ValueError(f"[{role}] impl = 'service' needs url = http://HOST:PORT{endpoint}, not {url!r}")


async def post(url: str, *, data: aiohttp.FormData | None = None, json: Any = None) -> bytes:
    """The body of the service's 200 answer to one POST (a form or a JSON document)."""
    async with aiohttp.ClientSession() as session, session.post(url, data=data, json=json) as response:
        if response.status != 200:
            words = await response.text()
            raise ServiceError(f"{response.url} answered {response.status}: {words[:300]}")
        return await response.read()
