"""The link emulator for UDP: a relay that gives each datagram a profile's one-way delay, or loses it.

Unlike TCP (``proxy.py``, where a lost segment costs a retransmission timeout and no byte
is lost), a lost datagram is gone, and each datagram draws its own delay, so jitter larger
than the spacing of packets reorders them, as on a real path. The device sends to the
relay's address; the relay sends on to the target from a socket of its own and relays the
answers back to the device. Seeded: the same profile and seed drop and delay the same packets.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass

from pipeline.endpoints.link.profiles import NetProfile


@dataclass(slots=True)
class DatagramStats:
    """What one direction of the relay did with its datagrams: how many it passed on, how many it dropped."""

    relayed: int = 0
    lost: int = 0


class _Side(asyncio.DatagramProtocol):
    def __init__(self, relay: UdpRelay, upstream: bool) -> None:
        self.relay, self.upstream = relay, upstream

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        self.relay.received(data, addr, self.upstream)


class UdpRelay:
    """``async with UdpRelay(profile, (host, port)) as relay``: devices send to ``relay.address``."""

    def __init__(self, profile: NetProfile, target: tuple[str, int], seed: int | None = None) -> None:
        self.profile, self.target = profile, target
        self.rng = random.Random(profile.seed if seed is None else seed)
        self.up, self.down = DatagramStats(), DatagramStats()
        self.address: tuple[str, int] = ("127.0.0.1", 0)
        self._device: tuple[str, int] | None = None
        self._near: asyncio.DatagramTransport | None = None
        self._far: asyncio.DatagramTransport | None = None
        self._timers: set[asyncio.TimerHandle] = set()

    async def __aenter__(self) -> UdpRelay:
        loop = asyncio.get_running_loop()
        self._near, _ = await loop.create_datagram_endpoint(lambda: _Side(self, True), local_addr=("127.0.0.1", 0))
        self._far, _ = await loop.create_datagram_endpoint(lambda: _Side(self, False), remote_addr=self.target)
        self.address = self._near.get_extra_info("sockname")[:2]
        return self

    async def __aexit__(self, *exc: object) -> None:
        for timer in self._timers:
            timer.cancel()
        for transport in (self._near, self._far):
            if transport is not None:
                transport.close()

    def received(self, data: bytes, addr: tuple[str, int], upstream: bool) -> None:
        stats = self.up if upstream else self.down
        if upstream:
            self._device = addr
        if self.profile.lost(self.rng):
            stats.lost += 1
            return
        stats.relayed += 1
        delay_s = self.profile.one_way_ms(self.rng) / 1000
        timer = asyncio.get_running_loop().call_later(delay_s, self._deliver, data, upstream)
        self._timers.add(timer)

    def _deliver(self, data: bytes, upstream: bool) -> None:
        if upstream and self._far is not None:
            self._far.sendto(data)
        elif not upstream and self._near is not None and self._device is not None:
            self._near.sendto(data, self._device)
