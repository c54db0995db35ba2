"""A real Mosquitto broker on a free loopback port for the test that asks, stopped afterwards."""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def mosquitto(folder: Path) -> Iterator[int]:
    """Runs ``mosquitto`` (Debian package; ``make test`` installs it) and yields its port."""
    binary = shutil.which("mosquitto") or ("/usr/sbin/mosquitto" if Path("/usr/sbin/mosquitto").exists() else None)
    if binary is None:
        pytest.fail("mosquitto is not installed: `make system` (part of `make test`) installs it")
    port = free_port()
    conf = folder / "mosquitto.conf"
    conf.write_text(f"listener {port} 127.0.0.1\nallow_anonymous true\npersistence false\n", encoding="utf-8")
    broker = subprocess.Popen([binary, "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 10
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
                break
            if broker.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"mosquitto did not start: {broker.stderr.read() if broker.stderr else b''!r}")
            time.sleep(0.05)
        yield port
    finally:
        broker.terminate()
        try:
            broker.wait(5)
        except subprocess.TimeoutExpired:
            broker.kill()
            broker.wait()
        if broker.stderr is not None:
            broker.stderr.close()
