"""Records every attempt by Python code in this process to reach beyond loopback.

A Python audit hook sees name lookups (``socket.getaddrinfo``), connects and
datagram sends, whichever library makes them, and names the module that asked.
Native code below Python (onnxruntime's C++ telemetry, say) is invisible here;
the offline run's strace log catches that (``pipeline.offline``). Entries are
JSON lines written at once, so a crash loses nothing.
"""

from __future__ import annotations

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
    *("socket", "ssl", "asyncio", "selectors", "concurrent", "threading", "urllib", "http"),
    *("aiohttp", "aiohappyeyeballs", "aiodns", "requests", "urllib3", "httpx", "httpcore", "anyio"),
    "pipeline.netguard",
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
    def __init__(self, out: TextIO) -> None:
        self._out = out
        self._lock = threading.Lock()

    def hook(self, event: str, args: tuple[Any, ...]) -> None:
        target = _target(event, args)
        if target is None or is_loopback(target[0]):
            return
        entry = {
            "event": event,
            "host": str(target[0]),
            "port": target[1],
            "component": component(sys._getframe(1)),
            "thread": threading.current_thread().name,
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
    sys.addaudithook(NetGuard(out).hook)
