"""A fault proxy in front of an HTTP endpoint (the emulated cloud, the speech services): it passes requests on
until told to fail them, then fails each new one as a broken provider would, until told to pass again.

Why a proxy and not the emulated cloud's own faults: ``--fault`` fails every request of a run and the
``X-Emulator-Fault`` header is one the server's client never sends; a fault case needs the endpoint to
break at a moment it chooses, mid-run, and to come back, with the server's own client and settings
untouched. The proxy sits on the wire, so the server sees exactly what a failing provider gives it.

Each request is taken alone: its head is read, ``Connection: close`` put in, and then, by the mode at that
moment, it is passed on (the answer piped back until the endpoint closes), answered ``503`` with OpenAI's
error body, reset (a TCP RST), or held unanswered until the client gives up or the proxy stops. It runs on
an event loop of its own, in a thread, so a harness of blocking calls (``ProcessGroup``) drives it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import struct
import threading
from collections import Counter
from types import TracebackType
from typing import Literal

Mode = Literal["pass", "503", "reset", "stall"]
MODES: tuple[Mode, ...] = ("pass", "503", "reset", "stall")
HEAD_LIMIT = 64 * 1024  # a request head longer than this is cut off (the lab's clients send a few hundred bytes)
BODY_LIMIT = 64 * 1024 * 1024  # a body read before a 503 at most: a speech upload, not a flood
ERROR_BODY = json.dumps(
    {"error": {"message": "The server is overloaded.", "type": "server_error", "param": None, "code": None}}
).encode()


def _with_close(head: bytes) -> bytes:
    """The request head with its Connection header replaced by ``close``: one request per connection, so a
    mode change reaches the next request even where the client keeps connections alive."""
    lines = head.split(b"\r\n")
    kept = [line for line in lines[1:] if line and not line.lower().startswith(b"connection:")]
    return b"\r\n".join([lines[0], *kept, b"Connection: close", b"", b""])


def _content_length(head: bytes) -> int:
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            with contextlib.suppress(ValueError):
                return min(int(value.strip()), BODY_LIMIT)
    return 0


class FaultProxy:
    """``with FaultProxy(port) as proxy``: clients use ``proxy.port``; ``proxy.mode = "503"`` fails new requests."""

    def __init__(self, target_port: int, target_host: str = "127.0.0.1") -> None:
        self.target = (target_host, target_port)
        self.mode: Mode = "pass"  # read by the loop thread at each request: a plain attribute swap is atomic
        self.port = 0
        self.seen: Counter[str] = Counter()  # requests by what was done with them
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="fault-proxy", daemon=True)
        self._server: asyncio.Server | None = None
        self._held: set[asyncio.Task[None]] = set()

    def __enter__(self) -> FaultProxy:
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    async def _start(self) -> asyncio.Server:
        server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = int(server.sockets[0].getsockname()[1])
        return server

    async def _stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._held):
            task.cancel()
        if self._held:
            await asyncio.wait(self._held, timeout=5)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._held.add(task)
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            mode = self.mode
            self.seen[mode] += 1
            handle = {"pass": self._pass, "503": self._fail, "reset": self._reset, "stall": self._stall}[mode]
            await handle(head, reader, writer)
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        except asyncio.CancelledError:  # the proxy stops: a held request ends here, not as the loop's error
            pass
        finally:
            self._held.discard(task)
            writer.close()

    async def _pass(self, head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self.target)
        try:
            up_writer.write(_with_close(head))
            body = asyncio.ensure_future(_pipe(reader, up_writer))
            try:
                await _pipe(up_reader, writer)  # the endpoint closes after its answer: the request is done
            finally:
                body.cancel()
        finally:
            up_writer.close()

    async def _fail(self, head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readexactly(_content_length(head))  # the whole request read, as a server does before it answers
        status = b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
        writer.write(status + b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(ERROR_BODY) + ERROR_BODY)
        await writer.drain()

    async def _reset(self, head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        if sock is not None:  # a zero linger turns the close into a RST, as a crashed peer or a middlebox gives
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.transport.abort()

    async def _stall(self, head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while await reader.read(65536):  # nothing is answered; held until the client goes away or the proxy stops
            pass


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    finally:
        with contextlib.suppress(OSError, RuntimeError):
            if writer.can_write_eof():
                writer.write_eof()
