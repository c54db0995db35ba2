"""A userspace link emulator: a TCP proxy that gives a connection a network profile (METHOD M14).

The kernel on these machines has no ``netem``, so delay, jitter and loss are
applied here, per direction and per chunk read from a socket:

- one-way delay: half the profile's RTT plus a seeded jitter draw, so that
  request + response add up to the configured RTT distribution;
- order is kept per connection: a chunk is released at
  ``max(start + serialisation + delay, previous release)``; chunks that arrive
  back to back (within 2 ms of the first) share one delay draw, as packets in the same
  queue do;
- loss: with probability ``loss`` a chunk is released one retransmission timeout
  later (TCP's minimum RTO is 200 ms on Linux), which is what a lost segment costs
  a small request or response; no bytes are ever dropped;
- bandwidth: serialisation delay ``bytes / rate`` on a FIFO link per direction;
- a new connection pays one more RTT before its first byte flows (the TCP
  handshake: the client's ``connect()`` returns at once here, so the emulator
  holds the first bytes instead).

Timers run on the event loop, so its time is the emulator's clock; asyncio wakes
timers up to about 1 ms late, so the last 1.5 ms of each wait are spent yielding
to the loop instead (``spin_ms``), which brings releases within tens of
microseconds of their schedule (see ``scripts/bench_network.py``). Where real TCP behaviour matters (actual
packet loss and retransmission), ``namespace_commands`` gives the ``tc tbf`` and
nftables commands that apply the same profile's bandwidth and loss inside a
network namespace; delay still needs this proxy there (no netem).

The named profiles are *estimated* from the RTT table of REFERENCE.md, not measured.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import math
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

Jitter = Literal["normal", "lognormal"]
JITTERS: tuple[Jitter, ...] = ("normal", "lognormal")
BURST_S = 0.002  # chunks within 2 ms of a burst's first share its delay draw: they sit in the same queues
TCP_MIN_RTO_MS = 200.0  # Linux's minimum retransmission timeout (STACK.md: 5 % loss gave P99 ~213 ms)
SPIN_MS = 1.5  # the last stretch of a wait is spent yielding to the loop rather than on a timer


@dataclass(frozen=True, slots=True)
class NetProfile:
    """A network condition as data. RTT figures are for one request + response exchange.

    ``rtt_ms`` is the mean RTT and ``jitter_ms`` its standard deviation; ``normal`` jitter
    is symmetric, ``lognormal`` jitter is a right-skewed tail above ``rtt_min_ms``.
    Every RTT is clamped to ``[rtt_min_ms, rtt_max_ms]`` (``rtt_max_ms`` 0 = no cap)
    before loss adds its retransmission timeout. ``bandwidth_mbps`` 0 = unlimited.
    """

    name: str
    rtt_ms: float = 0.0
    jitter_ms: float = 0.0
    jitter: Jitter = "normal"
    rtt_min_ms: float = 0.0
    rtt_max_ms: float = 0.0
    loss: float = 0.0  # probability, per chunk and direction, of one retransmission timeout
    rto_ms: float = TCP_MIN_RTO_MS
    bandwidth_mbps: float = 0.0
    handshake: bool = True  # a new connection waits one RTT before its first byte
    seed: int = 0
    attribution: str = "estimated"

    def __post_init__(self) -> None:
        if self.jitter not in JITTERS:
            raise ValueError(f"network profile {self.name!r}: jitter {self.jitter!r}; choose one of {JITTERS}")
        for name in ("rtt_ms", "jitter_ms", "rtt_min_ms", "rtt_max_ms", "rto_ms", "bandwidth_mbps"):
            value = getattr(self, name)
            if not (value >= 0 and math.isfinite(value)):
                raise ValueError(f"network profile {self.name!r}: {name} must be a finite number >= 0, got {value}")
        if not 0 <= self.loss < 1:
            raise ValueError(f"network profile {self.name!r}: loss must be in [0, 1), got {self.loss}")
        if self.rtt_max_ms and self.rtt_max_ms < self.rtt_min_ms:
            raise ValueError(f"network profile {self.name!r}: rtt_max_ms is below rtt_min_ms")
        if self.jitter == "lognormal" and self.jitter_ms and self.rtt_ms <= self.rtt_min_ms:
            raise ValueError(f"network profile {self.name!r}: lognormal jitter needs rtt_ms above rtt_min_ms")

    def as_dict(self) -> dict[str, Any]:
        """Every parameter, for config_id and the trace's config record (M11)."""
        return dataclasses.asdict(self)

    def one_way_ms(self, rng: random.Random) -> float:
        """One direction's delay before loss: half of an RTT drawn from this profile."""
        base = self.rtt_ms / 2
        if self.jitter_ms:
            sd = self.jitter_ms / math.sqrt(2)  # two directions add up to the RTT's deviation
            if self.jitter == "normal":
                base = rng.gauss(base, sd)
            else:
                mean = (self.rtt_ms - self.rtt_min_ms) / 2
                s2 = math.log(1 + (sd / mean) ** 2)
                base = self.rtt_min_ms / 2 + rng.lognormvariate(math.log(mean) - s2 / 2, math.sqrt(s2))
        high = self.rtt_max_ms / 2 if self.rtt_max_ms else math.inf
        return min(max(base, self.rtt_min_ms / 2), high)

    def lost(self, rng: random.Random) -> bool:
        return self.loss > 0 and rng.random() < self.loss

    def model_rtts_ms(self, n: int, seed: int | None = None, nbytes: int = 0) -> list[float]:
        """RTTs of ``n`` exchanges of one ``nbytes`` chunk each way, as the model draws them
        (the configured distribution, serialisation included)."""
        rng = random.Random(self.seed if seed is None else seed)
        wire_ms = 2 * nbytes * 8 / (self.bandwidth_mbps * 1000) if self.bandwidth_mbps else 0.0
        out = []
        for _ in range(n):
            rtt = wire_ms
            for _direction in range(2):
                rtt += self.one_way_ms(rng) + (self.rto_ms if self.lost(rng) else 0.0)
            out.append(rtt)
        return out


# Estimated from REFERENCE.md "Network round trip by link" (itself from the design document).
PROFILES: dict[str, NetProfile] = {
    p.name: p
    for p in (
        NetProfile("loopback"),  # sub-millisecond, no jitter: only the proxy's own hop remains
        NetProfile("lan", rtt_ms=1.0, jitter_ms=0.2, rtt_min_ms=0.2, bandwidth_mbps=100.0, seed=11),
        NetProfile("multi-hop", rtt_ms=15.0, jitter_ms=5.0, rtt_min_ms=3.0, bandwidth_mbps=50.0, seed=12),
        NetProfile(
            "internet",
            rtt_ms=40.0,
            jitter_ms=20.0,
            jitter="lognormal",
            rtt_min_ms=20.0,
            rtt_max_ms=200.0,
            loss=0.01,
            bandwidth_mbps=20.0,
            seed=13,
        ),
    )
}


def get_profile(name: str) -> NetProfile:
    """The named profile, or a ValueError that lists the known names."""
    try:
        return PROFILES[name]
    except KeyError:
        raise ValueError(f"unknown network profile {name!r}; known: {', '.join(PROFILES)}") from None


@dataclass(slots=True)
class DirectionStats:
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


_EOF = b""


@dataclass(slots=True)
class _Reset:
    """The sending side was reset: the receiving side is aborted, not closed."""


class LinkEmulator:
    """A TCP proxy on ``listen_host`` that forwards to ``target`` through a network profile.

    Use ``async with LinkEmulator(...) as link`` or ``await start()`` / ``await stop()``;
    ``port`` is the listening port (an ephemeral one unless given).
    """

    def __init__(
        self,
        profile: NetProfile,
        target_host: str,
        target_port: int,
        listen_host: str = "127.0.0.1",
        listen_port: int = 0,
        seed: int | None = None,
        spin_ms: float = SPIN_MS,
    ) -> None:
        self.profile = profile
        self.spin_ms = spin_ms
        self.target = (target_host, target_port)
        self.listen = (listen_host, listen_port)
        self.seed = profile.seed if seed is None else seed
        self.up = DirectionStats()
        self.down = DirectionStats()
        self.connections = 0
        self.port = 0
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()

    async def __aenter__(self) -> LinkEmulator:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._accept, self.listen[0], self.listen[1])
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for writer in list(self._writers):
            writer.transport.abort()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None

    def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.create_task(self._connection(reader, writer, self.connections))
        self.connections += 1
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _connection(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter, index: int) -> None:
        loop = asyncio.get_running_loop()
        accepted = loop.time()
        self._writers.add(client_w)
        try:
            server_r, server_w = await asyncio.open_connection(*self.target)
        except OSError:
            client_w.transport.abort()  # the far end is unreachable: the client sees its connection die
            self._writers.discard(client_w)
            return
        self._writers.add(server_w)
        rng = random.Random(self.seed * 1_000_003 + index)
        handshake = 0.0
        if self.profile.handshake:
            handshake = (self.profile.one_way_ms(rng) + self.profile.one_way_ms(rng)) / 1000
        up = LinkDirection(self.profile, random.Random(rng.random()), accepted + handshake, self.up)
        down = LinkDirection(self.profile, random.Random(rng.random()), accepted + handshake, self.down)
        try:
            await asyncio.gather(self._pipe(client_r, server_w, up), self._pipe(server_r, client_w, down))
        finally:
            for w in (client_w, server_w):
                self._writers.discard(w)
                w.close()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, link: LinkDirection) -> None:
        """Read chunks as they come; a second task writes each at its release time, in order."""
        queue: asyncio.Queue[tuple[float, bytes | _Reset]] = asyncio.Queue()
        sender = asyncio.create_task(self._send(queue, writer, link.stats, self.spin_ms))
        loop = asyncio.get_running_loop()
        try:
            while True:
                try:
                    data = await reader.read(65536)
                except (ConnectionError, OSError):
                    queue.put_nowait((link.release_end(loop.time()), _Reset()))
                    break
                if not data:
                    queue.put_nowait((link.release_end(loop.time()), _EOF))
                    break
                queue.put_nowait((link.release_at(loop.time(), len(data)), data))
            await sender
        finally:
            sender.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sender

    @staticmethod
    async def _send(
        queue: asyncio.Queue[tuple[float, bytes | _Reset]],
        writer: asyncio.StreamWriter,
        stats: DirectionStats,
        spin_ms: float,
    ) -> None:
        loop = asyncio.get_running_loop()
        while True:
            release, item = await queue.get()
            await sleep_until(release, spin_ms)
            stats.late_ms.append(round(max(0.0, loop.time() - release) * 1000, 3))
            if isinstance(item, _Reset):
                writer.transport.abort()
                return
            try:
                if item == _EOF:
                    if writer.can_write_eof():
                        writer.write_eof()
                    return
                writer.write(item)
                await writer.drain()
            except (ConnectionError, OSError):
                return


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


def namespace_commands(profile: NetProfile, device: str) -> Iterator[list[str]]:
    """Commands that give ``device`` (inside a network namespace you created) this profile's
    bandwidth (``tc tbf``) and random loss (nftables); delay and jitter still come from the proxy,
    because this kernel has no netem. Run them as root inside the namespace (``ip netns exec``).
    """
    if profile.bandwidth_mbps:
        rate_kbit = max(8, round(profile.bandwidth_mbps * 1000))
        burst = max(1600, rate_kbit * 1000 // 8 // 250)  # at least one full-size packet, ~4 ms of data
        yield [
            "tc",
            "qdisc",
            "replace",
            "dev",
            device,
            "root",
            "tbf",
            "rate",
            f"{rate_kbit}kbit",
            "burst",
            str(burst),
            "latency",
            "50ms",
        ]
    if profile.loss:
        per_mille = max(1, round(profile.loss * 1000))
        yield ["nft", "add", "table", "inet", "labnet"]
        yield ["nft", "add", "chain", "inet", "labnet", "out", "{ type filter hook output priority 0 ; }"]
        yield [
            "nft",
            "add",
            "rule",
            "inet",
            "labnet",
            "out",
            "oifname",
            device,
            "numgen",
            "random",
            "mod",
            "1000",
            "<",
            str(per_mille),
            "drop",
        ]
