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

The named profiles are *estimated* from the RTT table of docs/reference/cited.md, not measured.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from dataclasses import dataclass

from pipeline.endpoints.link.direction import SPIN_MS, DirectionStats, LinkDirection, sleep_until
from pipeline.endpoints.link.profiles import NetProfile
from pipeline.endpoints.serving import Started

_EOF = b""


@dataclass(slots=True)
class _Reset:
    """The sending side was reset: the receiving side is aborted, not closed."""


class LinkEmulator(Started):
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
        connect_timeout_s: float = 10.0,
    ) -> None:
        self.profile = profile
        self.connect_timeout_s = connect_timeout_s
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
            connecting = asyncio.open_connection(*self.target)
            server_r, server_w = await asyncio.wait_for(connecting, self.connect_timeout_s)
        except (OSError, TimeoutError):
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
