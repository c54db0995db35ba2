"""What the lab's servers share: started by ``async with``, an aiohttp app on a port, serving until signalled.

The emulated cloud, the speech services and the link emulator are each a server a test or an
entry point starts, uses and stops; the two HTTP ones run an aiohttp application the same way, under
the limits every listener keeps (``doors``: connections at once, a connection waiting for a request
closed after ``idle_s``, repeated errors said once with a count). Their entry points serve until SIGINT
or SIGTERM.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from typing import Self

from aiohttp import web

from pipeline.endpoints.doors import HttpDoor, HttpLimits, serve_app


class Started:
    """A server that ``async with`` starts and stops; ``start`` returns the port it listens on."""

    async def start(self) -> int:
        raise NotImplementedError

    async def stop(self) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


class HttpApp(Started):
    """An aiohttp application (``app()``) served on ``host:port``; port 0 takes any free one, read after start."""

    # a request whose client went away is cancelled (and frees what it holds) rather than run to its end
    cancel_abandoned = False
    limits = HttpLimits()  # connections at once, and how long one may wait for a request (doors)

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self._runner: web.AppRunner | None = None
        self.door: HttpDoor | None = None  # its connections, once started

    @property
    def base_url(self) -> str:
        """What an OpenAI client is given."""
        return f"http://{self.host}:{self.port}/v1"

    def app(self) -> web.Application:
        raise NotImplementedError

    async def start(self) -> int:
        self._runner, self.door = await serve_app(
            self.app(),
            self.host,
            self.port,
            self.limits,
            shutdown_timeout=0.5,
            handler_cancellation=self.cancel_abandoned,
        )
        self.port = int(self._runner.addresses[0][1])
        return self.port

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None


async def until_signalled(orphan_check_s: float | None = None) -> None:
    """Return once the process is sent SIGINT or SIGTERM (an entry point's server then stops cleanly); with
    ``orphan_check_s``, also once the process that started it is gone (looked at that often), so that a server
    started by another never outlives it."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    parent = os.getppid()
    try:
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), orphan_check_s)
            if orphan_check_s is not None and os.getppid() != parent:
                return
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
