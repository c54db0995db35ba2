"""One direction of an emulated link: when each chunk is released, and waits precise to tens of microseconds."""

from __future__ import annotations

import asyncio
import math
import random
from dataclasses import dataclass, field

from pipeline.endpoints.link.profiles import NetProfile

BURST_S = 0.002  # chunks within 2 ms of a burst's first share its delay draw: they sit in the same queues
SPIN_MS = 1.5  # the last stretch of a wait is spent yielding to the loop rather than on a timer


@dataclass(slots=True)
class DirectionStats:
    """What one direction of an emulated link did, over all its connections: the figures a network run reports."""

    chunks: int = 0
    bytes: int = 0
    retransmissions: int = 0
    delays_ms: list[float] = field(default_factory=list)  # applied one-way delay per chunk, loss included
    late_ms: list[float] = field(default_factory=list)  # how late the event loop released each chunk


class LinkDirection:
    """The release schedule of one direction of one connection; pure, so it can be tested alone."""

    def __init__(self, profile: NetProfile, rng: random.Random, ready_at: float, stats: DirectionStats) -> None:
        self.profile = profile
        self.rng = rng
        self.ready_at = ready_at  # the handshake: nothing flows before this moment
        self.link_free = ready_at
        self.last_release = ready_at
        self.burst_start = -math.inf
        self.burst_delay_ms = 0.0
        self.stats = stats

    def release_at(self, arrival: float, nbytes: int) -> float:
        """When a chunk that reached the emulator at ``arrival`` (loop seconds) leaves it."""
        start = max(arrival, self.link_free)
        if self.profile.bandwidth_mbps:
            start += nbytes * 8 / (self.profile.bandwidth_mbps * 1e6)
        self.link_free = start
        if arrival - self.burst_start > BURST_S:
            self.burst_start = arrival
            self.burst_delay_ms = self.profile.one_way_ms(self.rng)
        delay_ms = self.burst_delay_ms
        if self.profile.lost(self.rng):
            delay_ms += self.profile.rto_ms
            self.stats.retransmissions += 1
        self.last_release = max(start + delay_ms / 1000, self.last_release)
        self.stats.chunks += 1
        self.stats.bytes += nbytes
        self.stats.delays_ms.append(round((self.last_release - arrival) * 1000, 3))
        return self.last_release

    def release_end(self, arrival: float) -> float:
        """When the end of the stream (FIN or reset) leaves: after the data, one delay later."""
        self.last_release = max(arrival + self.profile.one_way_ms(self.rng) / 1000, self.last_release)
        return self.last_release


async def sleep_until(deadline: float, spin_ms: float = SPIN_MS) -> None:
    """Wait until the loop's clock reaches ``deadline``, within tens of microseconds.

    asyncio's timers wake up to ~1 ms late (epoll counts whole milliseconds), which would add
    1-2 ms to every emulated RTT; so the timer is set ``spin_ms`` early and the rest of the
    wait is spent yielding to the other tasks, which keep running meanwhile. That costs CPU
    (at most ``spin_ms`` per chunk); ``spin_ms=0`` trades it for the timer's lateness.
    """
    loop = asyncio.get_running_loop()
    spin = spin_ms / 1000
    if deadline - loop.time() > spin:
        await asyncio.sleep(deadline - loop.time() - spin)
    while (now := loop.time()) < deadline:
        if spin:
            await asyncio.sleep(0)
        if not spin or loop.time() == now:  # no spinning, or a virtual clock (time moves only on timers)
            await asyncio.sleep(deadline - loop.time())
            return
