"""Simulated latency as data: a first-item delay, a per-item delay, seeded jitter."""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class LatencyProfile:
    """Delays in milliseconds; jitter is uniform in [-jitter_ms, +jitter_ms], floored at zero."""

    first_ms: float = 0.0
    per_item_ms: float = 0.0
    jitter_ms: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("first_ms", "per_item_ms", "jitter_ms"):
            if getattr(self, name) < 0:
                raise ValueError(f"latency {name} must be >= 0, got {getattr(self, name)}")

    def delays_s(self, salt: int = 0) -> Iterator[float]:
        """Seconds to wait before item 0, 1, 2, ...; the same seed and salt give the same delays."""
        rng = random.Random(self.seed * 1_000_003 + salt)
        base = self.first_ms
        while True:
            jitter = rng.uniform(-self.jitter_ms, self.jitter_ms) if self.jitter_ms else 0.0
            yield max(0.0, base + jitter) / 1000
            base = self.per_item_ms
