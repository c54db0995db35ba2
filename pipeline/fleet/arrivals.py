"""When each of a run's devices starts, and in what order it asks its questions.

All at once is the worst case for the queue; staggered starts spread it; Poisson arrivals
(exponential gaps, seeded, so a rerun gives the same times) are what independent users give.
Each device asks the question set rotated by its index, so the devices are not in lockstep:
all asking the same question at the same moment would make their turns identical in load.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import TypeVar

T = TypeVar("T")


def start_offsets_ms(
    devices: int, arrival: str, gap_ms: float = 0.0, rate_per_s: float = 1.0, seed: int = 7
) -> list[float]:
    """Each device's start, in ms after the run begins (device 0 starts at once)."""
    if devices < 1:
        raise ValueError(f"devices {devices}: at least 1")
    if arrival == "together":
        return [0.0] * devices
    if arrival == "staggered":
        return [i * gap_ms for i in range(devices)]
    if arrival == "poisson":
        if rate_per_s <= 0:
            raise ValueError(f"poisson arrivals need a positive rate, not {rate_per_s}")
        rng = random.Random(seed)
        offsets, t = [0.0], 0.0
        for _ in range(devices - 1):
            t += rng.expovariate(rate_per_s) * 1000
            offsets.append(round(t, 3))
        return offsets
    raise ValueError(f"arrival {arrival!r}: together, staggered or poisson")


def rotated(items: Sequence[T], device: int) -> tuple[T, ...]:
    """The device's order: the set started at its own place (device ``k`` and ``k + len`` coincide)."""
    if not items:
        return ()
    k = device % len(items)
    return (*items[k:], *items[:k])


def lockstep_warning(devices: int, questions: int) -> str | None:
    """More devices than questions: some devices ask in the same order, said once before the run."""
    if devices <= questions:
        return None
    return (
        f"{devices} devices but {questions} question(s): device k and device k+{questions} ask in the same order "
        "(their start times still differ); give more questions for fully distinct orders"
    )
