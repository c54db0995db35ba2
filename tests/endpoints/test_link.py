"""The link emulator: profiles as data, the release schedule (pure, exact), and the proxy on loopback."""

from __future__ import annotations

import asyncio
import itertools
import json
import random
import shutil
import statistics
import subprocess
import sys
import time

import pytest

from pipeline.analysis.numbers import quantile
from pipeline.clock import VirtualClock, run_on_clock
from pipeline.endpoints.link import PROFILES, DirectionStats, LinkDirection, LinkEmulator, NetProfile, get_profile
from pipeline.endpoints.link import namespace_commands as ns_commands

# --- profiles ---------------------------------------------------------------------------------


def test_unknown_profile_names_the_known_ones() -> None:
    with pytest.raises(ValueError, match=r"unknown network profile 'wan'; known: loopback, lan, multi-hop, internet"):
        get_profile("wan")


def test_profiles_are_data_for_config_id() -> None:
    internet = get_profile("internet")
    data = internet.as_dict()
    assert data["name"] == "internet" and data["rtt_ms"] == 40.0 and data["loss"] == 0.01
    assert data["attribution"] == "estimated"
    json.dumps({name: p.as_dict() for name, p in PROFILES.items()}, sort_keys=True)  # hashable into config_id
    assert NetProfile(**data) == internet


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"rtt_ms": -1}, "rtt_ms must be"),
        ({"loss": 1.0}, "loss must be in"),
        ({"jitter": "pareto"}, "jitter 'pareto'"),
        ({"rtt_min_ms": 10, "rtt_max_ms": 5}, "rtt_max_ms is below"),
        ({"rtt_ms": float("nan")}, "finite"),
    ],
)
def test_bad_profiles_are_refused(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        NetProfile("bad", **kwargs)  # type: ignore[arg-type]


def test_normal_jitter_gives_the_configured_rtt_mean_and_deviation() -> None:
    rtts = get_profile("multi-hop").model_rtts_ms(20_000)
    assert statistics.fmean(rtts) == pytest.approx(15, abs=0.15)
    assert statistics.stdev(rtts) == pytest.approx(5, abs=0.2)
    assert min(rtts) >= 3


def test_internet_profile_has_a_long_tail_and_retransmissions() -> None:
    profile = get_profile("internet")
    rtts = sorted(profile.model_rtts_ms(50_000))
    without_loss = [r for r in rtts if r < profile.rto_ms]
    assert statistics.fmean(without_loss) == pytest.approx(40, abs=1.0)
    assert min(rtts) >= 20 and quantile(without_loss, 0.5) < 40 < quantile(without_loss, 0.9)
    lost = sum(r >= 20 + profile.rto_ms for r in rtts) / len(rtts)
    assert lost == pytest.approx(0.0199, abs=0.003)  # 1 % per direction, two directions
    assert max(without_loss) <= 200


# --- the release schedule: pure arithmetic on given arrival times -------------------------------


def direction(profile: NetProfile, ready_at: float = 0.0, seed: int = 1) -> LinkDirection:
    return LinkDirection(profile, random.Random(seed), ready_at, DirectionStats())


def test_fixed_delay_is_half_the_rtt_per_direction() -> None:
    link = direction(NetProfile("fixed", rtt_ms=40))
    assert link.release_at(1.0, 100) == pytest.approx(1.020)
    assert link.release_at(1.5, 100) == pytest.approx(1.520)
    assert link.stats.chunks == 2 and link.stats.bytes == 200 and link.stats.delays_ms == [20.0, 20.0]


def test_order_is_kept_whatever_the_jitter() -> None:
    link = direction(NetProfile("wild", rtt_ms=40, jitter_ms=40, seed=3))
    releases = [link.release_at(i * 0.005, 10) for i in range(500)]
    assert releases == sorted(releases)
    assert any(b == a for a, b in itertools.pairwise(releases))  # some chunks queued behind others


def test_back_to_back_chunks_share_one_delay_draw() -> None:
    link = direction(NetProfile("jittery", rtt_ms=40, jitter_ms=10, seed=5))
    burst = [link.release_at(1.0 + i * 0.0005, 10) - (1.0 + i * 0.0005) for i in range(4)]  # within 2 ms
    assert burst == pytest.approx([burst[0]] * 4)
    later = link.release_at(1.1, 10) - 1.1
    assert later != pytest.approx(burst[0])  # a new burst draws anew


def test_a_new_connection_waits_for_its_handshake() -> None:
    link = direction(NetProfile("fixed", rtt_ms=40), ready_at=0.040)
    assert link.release_at(0.001, 100) == pytest.approx(0.060)  # handshake RTT, then the one-way delay


def test_bandwidth_is_serialisation_on_a_fifo_link() -> None:
    link = direction(NetProfile("slow", bandwidth_mbps=1.0))
    assert link.release_at(0.0, 125_000) == pytest.approx(1.0)  # 1 Mbit at 1 Mbit/s
    assert link.release_at(0.5, 12_500) == pytest.approx(1.1)  # waits for the link, then its own 0.1 s


def test_loss_costs_one_retransmission_timeout() -> None:
    link = direction(NetProfile("lossy", rtt_ms=10, loss=0.999))
    assert link.release_at(0.0, 100) == pytest.approx(0.205)
    assert link.stats.retransmissions == 1


def test_the_same_seed_gives_the_same_schedule() -> None:
    profile = get_profile("internet")
    a, b = direction(profile, seed=7), direction(profile, seed=7)
    assert [a.release_at(i / 100, 500) for i in range(50)] == [b.release_at(i / 100, 500) for i in range(50)]


# --- the proxy on loopback (real clock) ---------------------------------------------------------


class Echo:
    """A TCP echo server on loopback that can also close on request."""

    def __init__(self) -> None:
        self.server: asyncio.Server | None = None
        self.port = 0

    async def __aenter__(self) -> Echo:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()

    @staticmethod
    async def _serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                if data == b"bye":
                    break
                writer.write(data)
                await writer.drain()
        finally:
            writer.close()


async def exchange(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, payload: bytes) -> float:
    started = time.perf_counter()
    writer.write(payload)
    await reader.readexactly(len(payload))
    return (time.perf_counter() - started) * 1000


def test_proxy_delays_each_exchange_by_the_rtt_and_keeps_every_byte() -> None:
    async def main() -> tuple[list[float], bytes, int]:
        async with Echo() as echo, LinkEmulator(NetProfile("fixed", rtt_ms=20), "127.0.0.1", echo.port) as link:
            reader, writer = await asyncio.open_connection("127.0.0.1", link.port)
            rtts = [await exchange(reader, writer, b"ping %d" % i) for i in range(6)]
            blob = random.Random(1).randbytes(1_000_000)
            writer.write(blob)
            back = await reader.readexactly(len(blob))
            writer.close()
            await writer.wait_closed()
            return rtts, back, link.connections

    rtts, back, connections = asyncio.run(main())
    assert back == random.Random(1).randbytes(1_000_000)  # nothing lost, nothing reordered
    assert connections == 1
    # Never faster than the profile; exact sums are the virtual-clock test's job below. The upper
    # bound is on the median, so one scheduling stall of a loaded CI machine cannot decide it.
    assert rtts[0] >= 40  # the handshake RTT, then the exchange
    assert all(r >= 20 for r in rtts[1:]) and statistics.median(rtts[1:]) < 20 + 15, rtts


def test_proxy_times_are_exact_on_the_virtual_clock() -> None:
    """Real loopback sockets, virtual time: the handshake, RTT and serialisation add up exactly."""
    clock = VirtualClock()

    async def main() -> list[float]:
        loop = asyncio.get_running_loop()
        profile = NetProfile("fixed", rtt_ms=40, bandwidth_mbps=8)
        async with Echo() as echo, LinkEmulator(profile, "127.0.0.1", echo.port) as link:
            reader, writer = await asyncio.open_connection("127.0.0.1", link.port)
            rtts = []
            for _ in range(3):
                started = loop.time()
                writer.write(b"x" * 1000)
                await reader.readexactly(1000)
                rtts.append(round((loop.time() - started) * 1000, 6))
            writer.close()
            return rtts

    assert run_on_clock(main(), clock) == [82.0, 42.0, 42.0]  # handshake 40 + RTT 40 + 2 x 1 ms at 8 Mbit/s


def test_proxy_passes_the_far_end_closing_and_refusing() -> None:
    async def main() -> tuple[bytes, bytes]:
        async with Echo() as echo, LinkEmulator(NetProfile("fixed", rtt_ms=4), "127.0.0.1", echo.port) as link:
            reader, writer = await asyncio.open_connection("127.0.0.1", link.port)
            writer.write(b"bye")
            closed = await asyncio.wait_for(reader.read(), 2)  # the echo server closed: EOF arrives
            writer.close()
        async with Echo() as gone:
            port = gone.port
        async with LinkEmulator(NetProfile("fixed"), "127.0.0.1", port) as link:
            reader, writer = await asyncio.open_connection("127.0.0.1", link.port)
            try:
                refused = await asyncio.wait_for(reader.read(), 2)
            except ConnectionResetError:
                refused = b""
            writer.close()
        return closed, refused

    assert asyncio.run(main()) == (b"", b"")


def test_stop_closes_open_connections() -> None:
    async def main() -> bytes:
        async with Echo() as echo:
            link = LinkEmulator(NetProfile("fixed", rtt_ms=2), "127.0.0.1", echo.port)
            await link.start()
            reader, writer = await asyncio.open_connection("127.0.0.1", link.port)
            await exchange(reader, writer, b"x")
            await link.stop()
            try:
                rest = await asyncio.wait_for(reader.read(), 2)
            except ConnectionResetError:
                rest = b""
            writer.close()
            return rest

    assert asyncio.run(main()) == b""


# --- the same profile inside a network namespace ------------------------------------------------


def test_namespace_commands_for_bandwidth_and_loss() -> None:
    commands = list(ns_commands(get_profile("internet"), "veth0"))
    assert commands[0][:8] == ["tc", "qdisc", "replace", "dev", "veth0", "root", "tbf", "rate"]
    assert commands[0][8] == "20000kbit"
    assert commands[-1][-4:] == ["1000", "<", "10", "drop"]  # 1 % as 10 per mille
    assert list(ns_commands(get_profile("loopback"), "lo")) == []


def test_tbf_applies_inside_a_fresh_namespace() -> None:
    assert shutil.which("unshare") and shutil.which("tc"), "needs unshare (util-linux) and tc (iproute2)"
    [tbf] = list(ns_commands(NetProfile("slow", bandwidth_mbps=8), "lo"))
    script = f"ip link set lo up && {' '.join(tbf)} && tc qdisc show dev lo"
    done = subprocess.run(["unshare", "-n", "sh", "-c", script], capture_output=True, text=True, timeout=10)
    assert done.returncode == 0, done.stderr
    assert "tbf" in done.stdout and "8Mbit" in done.stdout


UDP_COUNT = """
import socket
rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); rx.bind(("127.0.0.1", 0)); rx.setblocking(False)
tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
got = 0
for i in range(2000):
    try:
        tx.sendto(b"x", rx.getsockname())
    except PermissionError:  # dropped by the output hook: the kernel tells the sender
        continue
    try:  # loopback delivers within sendto; read at once so the receive buffer never overflows
        rx.recv(16); got += 1
    except BlockingIOError:
        pass
print(got)
"""


def test_nftables_loss_applies_inside_a_fresh_namespace() -> None:
    assert shutil.which("nft"), "nftables is not installed (apt-get install nftables)"
    commands = list(ns_commands(NetProfile("lossy", loss=0.3), "lo"))
    quoted = " && ".join(" ".join(f"'{part}'" for part in command) for command in commands)
    script = f"ip link set lo up && {quoted} && {sys.executable} -c '{UDP_COUNT}'"
    done = subprocess.run(["unshare", "-n", "sh", "-c", script], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    delivered = int(done.stdout.split()[-1]) / 2000
    # 2000 datagrams, 30 % dropped at random: the standard deviation is about 1 point
    assert 0.64 <= delivered <= 0.76, delivered
