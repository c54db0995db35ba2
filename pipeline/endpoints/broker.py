"""A private Mosquitto broker on a free loopback port, for a test or a benchmark that needs MQTT.

Debian's ``mosquitto`` package installs the broker without starting it (no systemd here);
this runs one with a throwaway configuration (loopback only, anonymous, no persistence)
and stops it afterwards.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path


class BrokerError(RuntimeError):
    """No broker could be started: the binary is missing or it exited."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def mosquitto_binary() -> str | None:
    found = shutil.which("mosquitto")
    return found or ("/usr/sbin/mosquitto" if Path("/usr/sbin/mosquitto").exists() else None)


@contextlib.contextmanager
def local_broker(start_timeout_s: float = 10.0) -> Iterator[int]:
    """Runs a broker and yields its port; the broker is stopped when the block ends."""
    binary = mosquitto_binary()
    if binary is None:
        raise BrokerError("mosquitto is not installed (Debian package `mosquitto`; `make system` installs it)")
    with tempfile.TemporaryDirectory(prefix="lab-mosquitto-") as folder:
        port = _free_port()
        conf = Path(folder) / "mosquitto.conf"
        conf.write_text(f"listener {port} 127.0.0.1\nallow_anonymous true\npersistence false\n", encoding="utf-8")
        broker = subprocess.Popen([binary, "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            deadline = time.monotonic() + start_timeout_s
            while True:
                with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
                    break
                if broker.poll() is not None or time.monotonic() > deadline:
                    said = broker.stderr.read().decode("utf-8", "replace") if broker.stderr else ""
                    raise BrokerError(f"mosquitto did not start: {said.strip()[:300]}")
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
