"""What the lab's servers share (``pipeline.endpoints.serving``): an aiohttp app started and stopped
by ``async with`` on a port of its own choosing, and an entry point's wait for SIGINT or SIGTERM."""

from __future__ import annotations

import asyncio
import os
import signal

import aiohttp
import pytest
from aiohttp import web

from pipeline.endpoints.serving import HttpApp, until_signalled


class Hello(HttpApp):
    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/v1/hello", self._hello)
        return app

    async def _hello(self, request: web.Request) -> web.Response:
        return web.json_response({"port": self.port})


def test_an_app_serves_on_the_port_it_took_and_frees_it_on_leaving() -> None:
    async def main() -> tuple[str, dict[str, int], int]:
        async with Hello("127.0.0.1", 0) as server, aiohttp.ClientSession() as http:
            url = server.base_url
            async with http.get(url + "/hello") as resp:
                answer = await resp.json()
        async with aiohttp.ClientSession() as http:
            with pytest.raises(aiohttp.ClientConnectionError):
                await http.get(url + "/hello")
        return url, answer, server.port

    url, answer, port = asyncio.run(main())
    assert port > 0 and url == f"http://127.0.0.1:{port}/v1"
    assert answer == {"port": port}


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_the_wait_ends_on_the_signal_and_leaves_no_handler_behind(sig: signal.Signals) -> None:
    async def main() -> bool:
        asyncio.get_running_loop().call_later(0.05, os.kill, os.getpid(), sig)
        await asyncio.wait_for(until_signalled(), timeout=10)
        return asyncio.get_running_loop().remove_signal_handler(sig)

    assert asyncio.run(main()) is False  # nothing of the wait's own is left installed
