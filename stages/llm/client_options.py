"""How calls are made to an OpenAI-compatible endpoint: the options the client reads, declared once.

``[cloud]`` (``pipeline.settings.config.CloudConfig``) is these options plus where the endpoint is; the
client's own settings (``stages.llm.openai.OpenAISettings``) are these options plus the endpoint's address
and model. Both inherit them from here, so a default or a check is written in one place. No third-party
import: the settings read these without the ``openai`` extra installed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Continuation = Literal["plain", "partial", "prefix", "vllm"]
CONTINUATIONS: tuple[Continuation, ...] = ("plain", "partial", "prefix", "vllm")
SENTENCE_STOPS = ("。", "！", "？", "；", ". ", "! ", "? ")


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientOptions:
    """The client's options. Keyword-only, so a class that adds positional fields (the endpoint's address)
    keeps them first."""

    api_key_env: str = ""  # the NAME of the variable holding the key ("" = the endpoint needs none); never the key
    connect_timeout_s: float = 10.0
    read_timeout_s: float = 30.0  # longest silence allowed: before the headers and between chunks
    retries: int = 0  # extra attempts on 429, 5xx, timeouts and broken connections, before any output; counted
    retry_backoff_ms: float = 500.0  # doubled per retry; a Retry-After header (capped at 10 s) wins
    stream_usage: bool = True  # stream_options.include_usage
    sentence_stops: str = "|".join(SENTENCE_STOPS)  # "|"-separated, as [cloud] writes it; OpenAI accepts at most 4
    continuation: str = "plain"  # per-sentence mode: how a trailing assistant message is marked for continuation
    keepalive_s: float = 60.0  # 0 = a new connection for every call

    def __post_init__(self) -> None:
        if self.connect_timeout_s <= 0 or self.read_timeout_s <= 0:
            raise ValueError("connect_timeout_s and read_timeout_s must be positive")
        if self.retries < 0 or self.retry_backoff_ms < 0 or self.keepalive_s < 0:
            raise ValueError("retries, retry_backoff_ms and keepalive_s must be >= 0")
        if self.continuation not in CONTINUATIONS:
            raise ValueError(f"continuation {self.continuation!r}: choose one of {', '.join(CONTINUATIONS)}")

    @property
    def stops(self) -> tuple[str, ...]:
        """The sentence stops sent with a call that ends at a sentence."""
        return tuple(s for s in self.sentence_stops.split("|") if s)

    def options(self) -> ClientOptions:
        """These options alone, without what a subclass adds."""
        return ClientOptions(**{name: getattr(self, name) for name in ClientOptions.__dataclass_fields__})
