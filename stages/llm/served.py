"""LLMs behind an OpenAI-compatible endpoint that the run starts and opens.

``server`` is llama.cpp's own ``llama-server`` as a local process; ``openai`` is a
cloud endpoint (or the emulated cloud). Either way the stage talks to it through
the OpenAI-compatible client (``stages.llm.openai``); starting the endpoint and
opening the client belong to the run, which hands the open client in as the engine.
"""

from __future__ import annotations

from dataclasses import dataclass

from stages.llm.backend import ChatBackend
from stages.llm.prompts import ASSISTANT_LANGUAGES
from stages.registry import Implementation, TurnInputs


@dataclass(frozen=True, slots=True)
class ServedSettings:
    model: str = "qwen2.5-0.5b"


def _build(_s: ServedSettings, client: ChatBackend, _turn: TurnInputs) -> ChatBackend:
    return client


SERVER = Implementation("llm", "server", ServedSettings, _build, languages=ASSISTANT_LANGUAGES, endpoint="llama-server")
OPENAI = Implementation("llm", "openai", ServedSettings, _build, languages=ASSISTANT_LANGUAGES, endpoint="cloud")
