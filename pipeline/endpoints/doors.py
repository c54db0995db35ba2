"""What every listener of the lab's keeps to: how many connections at once, and how long one may wait.

aiohttp keeps a connection that sends nothing for an hour (``keepalive_timeout`` 3630 s) and takes every
connection offered; 1,100 idle sockets under a 1,024-descriptor limit left an honest device unanswered
(issue 42). So every listener here:

- closes a connection that waits ``idle_s`` for a request: its first (headers that trickle in count as waiting)
  or its next on keep-alive (aiohttp's keep-alive timer, which it starts with the connection);
- holds at most ``max_connections``, by default half the process's descriptor limit, so that a full door leaves
  descriptors for everything else. At the cap a newcomer closes the connection that has waited longest for a
  request, as nginx reuses its idle keep-alive connections when it runs out (``ngx_drain_connections``): a
  socket left idle cannot lock an honest client out. When every one is mid-request, the newcomer gets 503;
- says its refusals, and the event loop's repeated errors, once with a count (``repeats``);
- gives a request's body ``body_s`` to arrive (``body_within``): one trickled a byte at a time is refused with
  408 rather than hold its handler, and its connection, for as long as the client likes.

``WaitingRoom`` is the same rule for the xiaozhi doors' handshakes (a WebSocket upgrade, an MQTT CONNECT).
"""

from __future__ import annotations

import asyncio
import logging
import resource
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from aiohttp import web
from aiohttp.web_protocol import RequestHandler

from pipeline.endpoints.repeats import Repeats, say_loop_errors_once

K = TypeVar("K", bound=Hashable)
T = TypeVar("T")
REFUSAL = b"HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
MOST = 65536  # a descriptor limit of "unlimited" is taken as this
_log = logging.getLogger(__name__)


def descriptor_share() -> int:
    """Half the process's descriptor limit (its soft RLIMIT_NOFILE), at least 16: what one door may hold."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return max(16, (MOST if soft == resource.RLIM_INFINITY else min(soft, MOST)) // 2)


@dataclass(frozen=True, slots=True)
class HttpLimits:
    """An HTTP listener's limits: connections at once, and how long one may wait for a request."""

    max_connections: int = 0  # 0: half the process's descriptor limit (512 under 1,024)
    idle_s: float = 15.0  # aiohttp's client keeps an idle connection 15 s; httpx 5 s: they close first
    body_s: float = 30.0  # a request's whole body: a 25 MiB upload at 10 Mbit/s takes 21 s

    def __post_init__(self) -> None:
        if self.max_connections < 0 or self.idle_s <= 0 or self.body_s <= 0:
            raise ValueError("max_connections >= 0, idle_s > 0 and body_s > 0")

    def cap(self) -> int:
        return self.max_connections or descriptor_share()


class SlowBody(Exception):
    """A request body that did not arrive in time: a client trickling it would hold its handler for good."""


async def body_within(read: Awaitable[T], seconds: float) -> T:
    """``read`` (a request body's reading), or ``SlowBody`` once it has taken ``seconds``."""
    try:
        async with asyncio.timeout(seconds):
            return await read
    except TimeoutError:
        raise SlowBody(f"the request body did not arrive within {seconds:g} s") from None


class WaitingRoom(Generic[K]):
    """Connections waiting for something of theirs (a request, a handshake), oldest first; with a ``cap``, a
    newcomer past it closes the one that has waited longest."""

    def __init__(self, close: Callable[[K], None], cap: int = 0) -> None:
        self.close, self.cap = close, cap
        self._waiting: dict[K, None] = {}  # insertion order: who has waited longest
        self.closed = 0

    def __len__(self) -> int:
        return len(self._waiting)

    def enter(self, key: K) -> None:
        """``key`` waits from now (again, if it waited before)."""
        self._waiting.pop(key, None)
        if self.cap and len(self._waiting) >= self.cap:
            self.close_oldest()
        self._waiting[key] = None

    def leave(self, key: K) -> None:
        self._waiting.pop(key, None)

    def close_oldest(self, alive: Callable[[K], bool] = lambda _key: True) -> bool:
        """Closes the one that has waited longest; those no longer ``alive`` are forgotten on the way. False when
        none is left to close."""
        for key in list(self._waiting):
            del self._waiting[key]
            if alive(key):
                self.close(key)
                self.closed += 1
                return True
        return False

    def keep(self, alive: Callable[[K], bool]) -> None:
        self._waiting = {key: None for key in self._waiting if alive(key)}


class _Refused(asyncio.Protocol):
    """A connection past the cap when none can make room: told 503 and closed."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if isinstance(transport, asyncio.WriteTransport):
            transport.write(REFUSAL)
        transport.close()


class HttpDoor:
    """An aiohttp server's protocol factory under ``HttpLimits``, and the middleware that tells it which
    connections are mid-request (install it first, ``serve_app`` does)."""

    def __init__(self, limits: HttpLimits, say: Callable[[str], None] | None = None) -> None:
        self.limits, self.cap = limits, limits.cap()
        self.server: web.Server | None = None
        self.room: WaitingRoom[RequestHandler] = WaitingRoom(lambda handler: handler.force_close())
        self.refused = 0
        self.repeats = Repeats(say or _log.warning, now=asyncio.get_running_loop().time)

    def __call__(self) -> asyncio.BaseProtocol:
        assert self.server is not None, "serve_app sets the server"
        live = set(self.server.connections)
        if len(live) >= self.cap and not self.room.close_oldest(live.__contains__):
            self.refused += 1
            self.repeats.say("full", f"{self.cap} HTTP connections are open, all mid-request: one more was told 503")
            return _Refused()
        if len(self.room) > 2 * self.cap:  # those that closed while waiting, forgotten now and then
            self.room.keep(live.__contains__)
        handler = self.server()
        self.room.enter(handler)
        return handler

    @web.middleware
    async def middleware(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        connection = request.protocol
        self.room.leave(connection)
        try:
            return await handler(request)
        finally:
            self.room.enter(connection)  # waits for its next request


class DoorSite(web.BaseSite):
    """A TCP site whose connections come through an ``HttpDoor``."""

    def __init__(self, runner: web.BaseRunner, host: str, port: int, door: HttpDoor) -> None:
        super().__init__(runner)
        self.host, self.port, self.door = host, port, door

    @property
    def name(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def start(self) -> None:
        await super().start()
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(self.door, self.host, self.port, backlog=self._backlog)


async def serve_app(
    app: web.Application, host: str, port: int, limits: HttpLimits, say: Callable[[str], None] | None = None, **kw: Any
) -> tuple[web.AppRunner, HttpDoor]:
    """``app`` served on ``host:port`` under ``limits`` (``kw``: more of ``web.AppRunner``'s settings); the caller
    cleans the runner up. Raises OSError when the address cannot be bound, having cleaned up."""
    door = HttpDoor(limits, say)
    app.middlewares.insert(0, door.middleware)
    runner = web.AppRunner(app, access_log=None, handle_signals=False, keepalive_timeout=limits.idle_s, **kw)
    await runner.setup()
    door.server = runner.server
    try:
        await DoorSite(runner, host, port, door).start()
    except BaseException:
        await runner.cleanup()
        raise
    say_loop_errors_once()
    return runner, door
