"""Records every attempt by Python code in this process to reach beyond loopback.

A Python audit hook sees name lookups (``socket.getaddrinfo``), connects and
datagram sends, whichever library makes them, and names the module that asked.
Native code below Python (onnxruntime's C++ telemetry, say) is invisible here;
the offline run's strace log catches that (``pipeline.offline.verdict``). Entries are
JSON lines written at once, so a crash loses nothing.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import os
import sys
import threading
import time
from pathlib import Path
from types import FrameType
from typing import Any, TextIO

LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost", ""})
# modules that only pass a request along; the component is whoever called them
PLUMBING = (
    *("socket", "ssl", "asyncio", "selectors", "concurrent", "threading", "urllib", "http", "yarl"),
    *("aiohttp", "aiohappyeyeballs", "aiodns", "requests", "urllib3", "httpx", "httpcore", "anyio"),
    "pipeline.offline.guard",
)


def is_loopback(host: object) -> bool:
    if not isinstance(host, str):
        return True  # bytes paths (AF_UNIX) and the like are local
    name = host.strip("[]").lower()
    if name in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(name.split("%")[0]).is_loopback
    except ValueError:
        return False  # a host name other than localhost: it needs a lookup


def component(frame: FrameType | None) -> str:
    """The first module up the stack that is not socket or HTTP plumbing."""
    while frame is not None:
        name = str(frame.f_globals.get("__name__", "?"))
        if not name.startswith(PLUMBING):
            return name
        frame = frame.f_back
    return "?"


class NetGuard:
    """The audit hook: writes each attempt to reach beyond loopback as a JSON line, naming who asked (for a
    lookup run in a worker thread, whoever handed it there: ``asked``)."""

    def __init__(self, out: TextIO) -> None:
        self._out = out
        self._lock = threading.Lock()
        self._asked: dict[tuple[str, object], str] = {}  # lookups handed to a thread pool, by who asked

    def asked(self, host: object, port: object, who: str) -> None:
        """An event-loop lookup (``loop.getaddrinfo``) is about to run in a worker thread for ``who``."""
        with self._lock:
            self._asked[(str(host), port)] = who

    def hook(self, event: str, args: tuple[Any, ...]) -> None:
        target = _target(event, args)
        if target is None or is_loopback(target[0]):
            return
        who = component(sys._getframe(1))
        if who == "?":  # a worker thread's stack ends in the pool: ask who queued the lookup
            with self._lock:
                who = self._asked.get((str(target[0]), target[1]), "?")
        entry = {
            "event": event,
            "host": str(target[0]),
            "port": target[1],
            "component": who,
            "thread": threading.current_thread().name,
            "time": time.time(),  # to pair it with the system call strace saw
        }
        with self._lock:
            self._out.write(json.dumps(entry) + "\n")
            self._out.flush()


def _target(event: str, args: tuple[Any, ...]) -> tuple[object, object] | None:
    if event == "socket.getaddrinfo":
        return args[0], args[1]
    if event in ("socket.connect", "socket.sendto") and len(args) > 1:
        address = args[1]
        if isinstance(address, tuple) and address:
            return address[0], address[1] if len(address) > 1 else None
    return None


def install(path: Path | str) -> None:
    """Record outbound attempts to ``path`` for the rest of this process (audit hooks cannot be removed)."""
    out = Path(path).open("a", encoding="utf-8")  # noqa: SIM115 (open for the life of the process)
    start = {"event": "start", "pid": os.getpid(), "time": time.time()}  # which process is ours, and since when
    out.write(json.dumps(start) + "\n")
    out.flush()
    global _GUARD
    _GUARD = NetGuard(out)
    sys.addaudithook(_GUARD.hook)
    _watch_loop_lookups(_GUARD)
    watch_http_clients()


_GUARD: NetGuard | None = None


def watch_http_clients() -> None:
    """Note who makes each aiohttp request; call again once site-packages are importable."""
    if _GUARD is not None:
        _watch_http_requests(_GUARD)


def _watch_loop_lookups(guard: NetGuard) -> None:
    """asyncio resolves names in a thread pool, whose stack no longer shows who asked; note it first."""
    original = asyncio.base_events.BaseEventLoop.getaddrinfo

    async def getaddrinfo(self: asyncio.AbstractEventLoop, host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        if not is_loopback(host):
            who = component(sys._getframe(1))
            if who.split(".")[0] != "pipeline":  # not the event loop's own caller: a real component asked
                guard.asked(host, port, who)
        return await original(self, host, port, *args, **kwargs)  # type: ignore[arg-type]

    asyncio.base_events.BaseEventLoop.getaddrinfo = getaddrinfo  # type: ignore[method-assign]


def _watch_http_requests(guard: NetGuard) -> None:
    """aiohttp resolves in a task of its own, whose stack ends in the loop: note who is connecting first."""
    try:
        from aiohttp.connector import TCPConnector
    except ImportError:
        return
    original = TCPConnector._resolve_host
    if getattr(original, "watched", False):
        return

    async def resolve_host(self: TCPConnector, host: str, port: int, *args: Any, **kwargs: Any) -> Any:
        if not is_loopback(host):
            guard.asked(host, port, component(sys._getframe(1)))
        return await original(self, host, port, *args, **kwargs)

    resolve_host.watched = True  # type: ignore[attr-defined]
    TCPConnector._resolve_host = resolve_host  # type: ignore[method-assign]
