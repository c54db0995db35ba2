"""Network profiles as data (METHOD M14): RTT, jitter, loss, bandwidth; and the commands that apply
bandwidth and loss inside a network namespace (this kernel has no netem, so delay stays in the proxy).

The named profiles are *estimated* from the RTT table of docs/reference/cited.md, not measured; the fault
profiles (``lossy-5``, ``lossy-20``) are bad links made on purpose for the fault matrix.
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

Jitter = Literal["normal", "lognormal"]
JITTERS: tuple[Jitter, ...] = ("normal", "lognormal")
TCP_MIN_RTO_MS = 200.0  # Linux's minimum retransmission timeout (docs/reference/stack.md: 5 % loss gave P99 ~213 ms)


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


# Estimated from docs/reference/cited.md "Network round trip by link" (itself from the design document).
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
        # Fault profiles (issue 42's fault matrix), attribution "fault": not a link the lab measured or cited, a
        # bad one made on purpose. A one-way jitter of ~57 ms (80 ms RTT deviation) against 60 ms between Opus
        # packets: about one packet in six arrives before the one sent before it. Each lost datagram is gone
        # (UDP); each lost TCP chunk costs one retransmission timeout (the MQTT control channel).
        NetProfile("lossy-5", rtt_ms=80.0, jitter_ms=80.0, rtt_min_ms=10.0, loss=0.05, seed=21, attribution="fault"),
        NetProfile("lossy-20", rtt_ms=80.0, jitter_ms=80.0, rtt_min_ms=10.0, loss=0.20, seed=22, attribution="fault"),
    )
}


def get_profile(name: str) -> NetProfile:
    """The named profile, or a ValueError that lists the known names."""
    try:
        return PROFILES[name]
    except KeyError:
        raise ValueError(f"unknown network profile {name!r}; known: {', '.join(PROFILES)}") from None


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
