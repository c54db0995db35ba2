"""Benchmark of the link emulator: configured vs measured RTT for each network profile (METHOD M14).

1. TCP: ``--n`` request/response exchanges of a small message through the link emulator
   to an echo server on loopback, over one kept-alive connection (the first exchange,
   which pays the handshake, is reported apart). "configured" is the profile's own model
   (``NetProfile.model_rtts_ms``, 200 000 draws, serialisation of the message included).
2. HTTP: ``--http-n`` chat calls through the link emulator to the emulated cloud with zero
   compute (profile ``instant``): the network segment a row would show, client first token
   minus the server's own queue + prompt time; and how long after the call's start
   (the moment ``CallStart`` is stamped) the request headers left (aiohttp's
   ``on_request_headers_sent``).
3. Pipeline (``--pipeline-turns N``): full turns through ``run_turn`` with fixed-RTT
   profiles, rows computed from the traces, network segment minus the configured RTT:
   the measurement behind the CI test's tolerance (tests/endpoints/cloud/test_chat_server.py).

All profiles are estimated (docs/reference/cited.md); the measured columns are measured here, on
this machine, and shift with its load. Run:
``python scripts/bench_network.py [--n 200] [--http-n 100] [--pipeline-turns 0]``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp

from labtools.cloud_turns import TraceRows, cloud_turn, network_ms
from pipeline.analysis.numbers import median, quantile
from pipeline.endpoints.cloud import ComputeProfile, EmulatedCloud, get_compute_profile
from pipeline.endpoints.link import PROFILES, LinkEmulator, NetProfile, get_profile
from pipeline.events import CallEnd, TokenDelta
from stages.llm import ChatRequest, Message
from stages.llm.openai import OpenAIChatBackend, OpenAISettings

MESSAGE = b"x" * 200


@dataclass(frozen=True, slots=True)
class Dist:
    """A set of times (ms) as the tables print them: median, P90, standard deviation and count."""

    median: float
    p90: float
    sd: float
    n: int

    @classmethod
    def of(cls, values: Sequence[float]) -> Dist:
        ordered = sorted(values)
        sd = statistics.stdev(ordered) if len(ordered) > 1 else 0.0
        return cls(quantile(ordered, 0.5), quantile(ordered, 0.9), sd, len(ordered))


def ms(value: float) -> str:
    return f"{value:8.2f}"


# --- 1. TCP echo ------------------------------------------------------------------------------


async def _echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    finally:
        writer.close()


async def tcp_rtts(profile: NetProfile, n: int) -> tuple[float, list[float], LinkEmulator]:
    server = await asyncio.start_server(_echo, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        async with LinkEmulator(profile, "127.0.0.1", port) as link:
            reader, writer = await asyncio.open_connection("127.0.0.1", link.port)
            rtts = []
            for _ in range(n + 1):
                started = time.perf_counter_ns()
                writer.write(MESSAGE)
                await reader.readexactly(len(MESSAGE))
                rtts.append((time.perf_counter_ns() - started) / 1e6)
            writer.close()
            await writer.wait_closed()
    finally:
        server.close()
        await server.wait_closed()
    return rtts[0], rtts[1:], link


def tcp_table(names: Sequence[str], n: int) -> None:
    print(f"1. TCP exchanges of {len(MESSAGE)} bytes each way through the link emulator (n={n} per profile)")
    print("   configured = the profile's model (estimated); measured = here, one kept-alive connection")
    head = "   profile      configured: median     P90      sd | measured: median     P90      sd"
    print(head + " | first (handshake)  retransmissions  timer late (median/max)")
    for name in names:
        profile = get_profile(name)
        model = Dist.of(profile.model_rtts_ms(200_000, nbytes=len(MESSAGE)))
        first, rtts, link = asyncio.run(tcp_rtts(profile, n))
        got = Dist.of(rtts)
        late = link.up.late_ms + link.down.late_ms
        retrans = link.up.retransmissions + link.down.retransmissions
        print(
            f"   {name:<12} {ms(model.median)}        {ms(model.p90)}{ms(model.sd)} |"
            f" {ms(got.median)}        {ms(got.p90)}{ms(got.sd)} | {ms(first)}          {retrans:5d}"
            f"           {median(late):6.2f} / {max(late):6.2f}"
        )


# --- 2. HTTP through the emulated cloud ---------------------------------------------------------


async def http_segments(profile: NetProfile, n: int) -> tuple[list[float], list[float]]:
    """Per call: network segment (client first token - server queue - server prompt), and
    call start -> request headers sent."""
    sent: list[int] = []

    async def on_sent(session: aiohttp.ClientSession, ctx: Any, params: Any) -> None:
        sent.append(time.perf_counter_ns())

    hooks = aiohttp.TraceConfig()
    hooks.on_request_headers_sent.append(on_sent)
    segments, overheads = [], []
    async with (
        EmulatedCloud(get_compute_profile("instant")) as cloud,
        LinkEmulator(profile, "127.0.0.1", cloud.port) as link,
    ):
        settings = OpenAISettings(cloud.base_url, "emulated")
        backend = OpenAIChatBackend(settings, trace_configs=[hooks], connect_to=("127.0.0.1", link.port))
        async with backend:
            for i in range(n + 1):
                request = ChatRequest((Message("user", f"Question number {i}?"),), max_tokens=8)
                start, first, done = time.perf_counter_ns(), 0, None
                async for chunk in backend.stream(request):
                    if isinstance(chunk, TokenDelta) and chunk.text.strip() and not first:
                        first = time.perf_counter_ns()
                    if isinstance(chunk, CallEnd):
                        done = chunk
                assert done is not None and first
                timings = dict(done.server_timings)
                if i:  # call 0 paid the handshake
                    segments.append((first - start) / 1e6 - timings["queue_ms"] - timings["prompt_ms"])
                    overheads.append((sent[-1] - start) / 1e6)
    return segments, overheads


def http_table(names: Sequence[str], n: int) -> None:
    print(f"\n2. Chat calls to the emulated cloud (profile instant) through the link emulator (n={n} per profile)")
    print("   network = client first token - (server queue_ms + prompt_ms); configured: model, ~1 kB each way")
    print("   profile      configured: median     P90 | measured: median     P90      sd | start->headers sent median")
    for name in names:
        profile = get_profile(name)
        model = Dist.of(profile.model_rtts_ms(200_000, nbytes=1000))
        segments, overheads = asyncio.run(http_segments(profile, n))
        got = Dist.of(segments)
        print(
            f"   {name:<12} {ms(model.median)}        {ms(model.p90)} | {ms(got.median)}        {ms(got.p90)}"
            f"{ms(got.sd)} | {median(overheads):8.3f}"
        )


# --- 3. Full turns, rows from traces ------------------------------------------------------------


async def pipeline_excess(rtt_ms: float, turns: int) -> tuple[float, list[float]]:
    rows = TraceRows()
    try:
        async with (
            EmulatedCloud(ComputeProfile("ci", ttft_ms=25, per_token_ms=1, slots=4)) as cloud,
            LinkEmulator(NetProfile(f"fixed-{rtt_ms:g}ms", rtt_ms=rtt_ms), "127.0.0.1", cloud.port) as link,
            OpenAIChatBackend(
                OpenAISettings(cloud.base_url, "emulated"), connect_to=("127.0.0.1", link.port)
            ) as backend,
        ):
            segments = []
            for _ in range(turns + 1):
                row = rows.row(await cloud_turn(backend), note=cloud.label)
                if row.ok != 1:
                    raise RuntimeError(f"turn failed: {row.error}")
                segments.append(network_ms(row) - rtt_ms)
    finally:
        rows.close()
    return segments[0], segments[1:]


def pipeline_table(turns: int) -> None:
    print(f"\n3. Full turns (run_turn -> traces -> rows), fixed RTT, network segment minus configured RTT (n={turns})")
    print("   RTT ms   first turn (handshake)   excess: median     P90     min     max")
    for rtt in (0.0, 10.0, 30.0):
        first, excess = asyncio.run(pipeline_excess(rtt, turns))
        d = Dist.of(excess)
        print(f"   {rtt:6g}   {ms(first)}                {ms(d.median)}{ms(d.p90)}{ms(min(excess))}{ms(max(excess))}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--profiles", default=",".join(PROFILES), help="comma-separated profile names")
    parser.add_argument("--n", type=int, default=200, help="TCP exchanges per profile")
    parser.add_argument("--http-n", type=int, default=100, help="chat calls per profile (0 = skip)")
    parser.add_argument("--pipeline-turns", type=int, default=0, help="full turns per fixed RTT (0 = skip)")
    args = parser.parse_args(argv)
    try:
        names = [get_profile(name).name for name in args.profiles.split(",")]
    except ValueError as exc:
        print(f"bench_network: {exc}", file=sys.stderr)
        return 2
    with open("/proc/loadavg", encoding="ascii") as fh:
        load = fh.read().split()[:3]
    print(f"load average before: {' '.join(load)} (2 cores; other work on the machine shifts the measured columns)\n")
    tcp_table(names, args.n)
    if args.http_n:
        http_table(names, args.http_n)
    if args.pipeline_turns:
        pipeline_table(args.pipeline_turns)
    return 0


if __name__ == "__main__":
    sys.exit(main())
