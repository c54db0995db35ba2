"""The emulated cloud's compute model: profiles as data, its slots with a FIFO queue, its own timings.

The named profiles are estimates (a cloud 70B-class API from docs/reference/cited.md's cited 300-600 ms
first token; a busy one; zero compute for network measurements).
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
from collections import deque
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class ComputeProfile:
    """Server-side compute as data; delays in ms, each jittered uniformly in +-its jitter, floored at 0."""

    name: str
    ttft_ms: float = 0.0  # slot to first token for an empty prompt
    per_prompt_token_ms: float = 0.0
    per_token_ms: float = 0.0
    ttft_jitter_ms: float = 0.0
    token_jitter_ms: float = 0.0
    slots: int = 1
    seed: int = 0
    attribution: str = "estimated"

    def __post_init__(self) -> None:
        for key in ("ttft_ms", "per_prompt_token_ms", "per_token_ms", "ttft_jitter_ms", "token_jitter_ms"):
            if not getattr(self, key) >= 0:
                raise ValueError(f"compute profile {self.name!r}: {key} must be >= 0")
        if self.slots < 1:
            raise ValueError(f"compute profile {self.name!r}: slots must be at least 1")

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def delays_s(self, rng: random.Random, prompt_tokens: int, tokens: int) -> tuple[float, list[float]]:
        """Seconds from slot to first token, then between consecutive tokens."""

        def jittered(ms: float, jitter: float) -> float:
            return max(0.0, ms + (rng.uniform(-jitter, jitter) if jitter else 0.0)) / 1000

        first = jittered(self.ttft_ms + prompt_tokens * self.per_prompt_token_ms, self.ttft_jitter_ms)
        return first, [jittered(self.per_token_ms, self.token_jitter_ms) for _ in range(max(0, tokens - 1))]


# A cloud 70B-class API (docs/reference/cited.md cites 300-600 ms to first token); ~45 tokens/s.
_FAST_70B_API = ComputeProfile(
    "fast-70b-api",
    ttft_ms=320,
    per_prompt_token_ms=0.2,
    per_token_ms=22,
    ttft_jitter_ms=80,
    token_jitter_ms=6,
    slots=8,
    seed=21,
)

COMPUTE_PROFILES: dict[str, ComputeProfile] = {
    p.name: p
    for p in (
        _FAST_70B_API,
        # fast-70b-api's latencies with a slot for every caller: a provider's API seen from one of many
        # customers, whose own fleet never queues there. A capacity ramp measures the server in front of it.
        dataclasses.replace(_FAST_70B_API, name="fast-70b-api-unqueued", slots=4096),
        # The same under load: slower, more jitter, two slots, so concurrent turns queue.
        ComputeProfile(
            "busy",
            ttft_ms=480,
            per_prompt_token_ms=0.4,
            per_token_ms=40,
            ttft_jitter_ms=200,
            token_jitter_ms=15,
            slots=2,
            seed=22,
        ),
        # Zero compute: what remains of first-token time is the network and the HTTP stack.
        ComputeProfile("instant", slots=64, seed=23),
    )
}


def get_compute_profile(name: str) -> ComputeProfile:
    try:
        return COMPUTE_PROFILES[name]
    except KeyError:
        raise ValueError(f"unknown emulated-cloud profile {name!r}; known: {', '.join(COMPUTE_PROFILES)}") from None


class Slots:
    """``n`` concurrent generations; later requests wait in a strict FIFO queue."""

    def __init__(self, n: int) -> None:
        self.free = n
        self.waiting: deque[asyncio.Future[None]] = deque()

    async def acquire(self) -> None:
        if self.free > 0 and not self.waiting:
            self.free -= 1
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.waiting.append(future)
        try:
            await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                self.release()  # the slot was handed over just as the request went away
            else:
                self.waiting.remove(future)
            raise

    def release(self) -> None:
        while self.waiting:
            future = self.waiting.popleft()
            if not future.done():
                future.set_result(None)
                return
        self.free += 1


@dataclass(slots=True)
class Timer:
    """The server's own timings of one request, on the event loop's clock."""

    received: float
    slot: float = 0.0
    first: float = 0.0
    last: float = 0.0

    def timings(self, prompt_tokens: int, generated: int) -> dict[str, float]:
        first = self.first or self.last
        return {
            "queue_ms": round((self.slot - self.received) * 1000, 3),
            "prompt_ms": round((first - self.slot) * 1000, 3),
            "predicted_ms": round((self.last - first) * 1000, 3),
            "prompt_n": prompt_tokens,
            "predicted_n": generated,
        }
