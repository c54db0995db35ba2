"""The limits every listener keeps (``pipeline.endpoints.doors``): idle connections closed at ``idle_s`` exactly
(the virtual clock), at the cap the longest-waiting connection makes room for a newcomer, and a newcomer when
every connection is mid-request told 503. Real loopback sockets."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from pipeline.clock import RealClock, VirtualClock, run_on_clock
from pipeline.endpoints.doors import HttpLimits, WaitingRoom, descriptor_share
from pipeline.endpoints.serving import HttpApp

GET = b"GET /v1/hello HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"


class Hello(HttpApp):
    """Answers /v1/hello; /v1/hold waits until ``release`` is set (a request in flight)."""

    def __init__(self, limits: HttpLimits) -> None:
        super().__init__("127.0.0.1", 0)
        self.limits = limits
        self.release = asyncio.Event()

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/v1/hello", self._hello)
        app.router.add_get("/v1/hold", self._hold)
        return app

    async def _hello(self, request: web.Request) -> web.Response:
        return web.Response(text="hello")

    async def _hold(self, request: web.Request) -> web.Response:
        await self.release.wait()
        return web.Response(text="held")


@contextlib.asynccontextmanager
async def opened(port: int) -> AsyncIterator[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        yield reader, writer
    finally:
        writer.close()


async def ask(port: int, request: bytes = GET) -> bytes:
    """The status line the server answers ``request`` with, b"" when it closed without one."""
    async with opened(port) as (reader, writer):
        writer.write(request)
        return (await reader.readline()).strip()


async def closed(reader: asyncio.StreamReader) -> bool:
    """Whether the server has closed the connection (what the loop has seen so far)."""
    await asyncio.sleep(0)
    return reader.at_eof()


def test_a_connection_that_sends_nothing_is_closed_at_idle_s_and_one_between_requests_too() -> None:
    """Attack: aiohttp's keep-alive of 3630 s held 1,100 idle sockets (issue 42)."""

    async def scenario() -> list[bool]:
        seen = []
        async with Hello(HttpLimits(idle_s=15.0)) as server, opened(server.port) as (silent, _):
            await asyncio.sleep(14.999)
            seen.append(await closed(silent))
            await asyncio.sleep(0.002)
            seen.append(await closed(silent))
            async with opened(server.port) as (reader, writer):
                writer.write(GET)
                await reader.readuntil(b"hello")  # answered at 15.001 s; kept alive from then on
                await asyncio.sleep(14.999)
                seen.append(await closed(reader))
                await asyncio.sleep(0.002)
                seen.append(await closed(reader))
        return seen

    assert run_on_clock(scenario(), VirtualClock()) == [False, True, False, True]


def test_at_the_cap_a_newcomer_closes_the_connection_that_waited_longest_and_is_answered() -> None:
    async def scenario() -> tuple[bytes, list[bool], int, int]:
        async with Hello(HttpLimits(max_connections=4)) as server, contextlib.AsyncExitStack() as stack:
            idle = [(await stack.enter_async_context(opened(server.port)))[0] for _ in range(4)]
            await asyncio.sleep(0.1)
            answer = await ask(server.port)
            await asyncio.sleep(0.1)
            assert server.door is not None and server.door.server is not None
            return answer, [r.at_eof() for r in idle], len(server.door.server.connections), server.door.room.closed

    answer, idle_closed, open_now, evicted = run_on_clock(scenario(), RealClock())
    assert answer == b"HTTP/1.1 200 OK"
    assert idle_closed == [True, False, False, False] and evicted == 1 and open_now <= 4


def test_when_every_connection_is_mid_request_a_newcomer_is_told_503() -> None:
    async def scenario() -> tuple[bytes, bytes, bytes]:
        async with Hello(HttpLimits(max_connections=2)) as server, opened(server.port) as a, opened(server.port) as b:
            for _, writer in (a, b):
                writer.write(GET.replace(b"hello", b"hold"))
            await asyncio.sleep(0.1)
            refused = await ask(server.port)
            server.release.set()
            return refused, (await a[0].readline()).strip(), (await b[0].readline()).strip()

    refused, first, second = run_on_clock(scenario(), RealClock())
    assert refused == b"HTTP/1.1 503 Service Unavailable"
    assert first == second == b"HTTP/1.1 200 OK"  # those in flight are never dropped for a newcomer


def test_the_waiting_room_closes_the_oldest_past_its_cap_and_one_that_waits_again_is_newest() -> None:
    shut: list[str] = []
    room: WaitingRoom[str] = WaitingRoom(shut.append, cap=2)
    room.enter("a")
    room.enter("b")
    room.enter("a")  # a request answered: it waits again, from now
    room.enter("c")
    assert shut == ["b"] and len(room) == 2
    room.leave("a")
    assert room.close_oldest(alive=lambda key: key != "c") is False  # c is gone already: forgotten, not closed
    assert shut == ["b"] and len(room) == 0 and room.closed == 1


def test_the_default_cap_is_half_the_descriptor_limit() -> None:
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert HttpLimits().cap() == descriptor_share() == max(16, min(soft, 65536) // 2)
    assert HttpLimits(max_connections=7).cap() == 7
    with pytest.raises(ValueError):
        HttpLimits(idle_s=0)
