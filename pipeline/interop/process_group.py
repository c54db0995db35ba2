"""The processes an interop run starts, and the guarantee that it stops every one of them.

Each process runs in a session of its own (node and pip start children), with its output in
a log file under the run's folder. ``ProcessGroup`` is a context manager: on every way out of
the block (a failure, Ctrl-C, the end) each process it started gets SIGTERM, then SIGKILL
after a grace period, youngest first. What goes wrong is an ``InteropError`` whose message
a user can act on: which process, what it last said, which port.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType


class InteropError(RuntimeError):
    """Something the user must fix or know; the message says what, without a traceback."""


@dataclass
class StartedProcess:
    """A process an interop run started: its name, the process, and the log file its output goes to.

    (Not ``endpoints.serving.Started``, the lab's own servers' base class: this is an OS process.)"""

    name: str
    process: subprocess.Popen[bytes]
    log: Path

    def tail(self, lines: int = 12) -> str:
        """The last lines of its log ("" where there is none)."""
        try:
            text = self.log.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        return "\n".join(text.rstrip().splitlines()[-lines:])

    def said(self, pattern: str) -> re.Match[str] | None:
        """Where its log matches ``pattern`` first (None: nowhere, or no log)."""
        try:
            return re.search(pattern, self.log.read_text(encoding="utf-8", errors="replace"))
        except OSError:
            return None


def port_free(port: int, host: str = "127.0.0.1") -> bool:
    """Whether ``host:port`` can be bound now, by TCP and by UDP."""
    for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM):
        with socket.socket(socket.AF_INET, kind) as s:
            try:
                s.bind((host, port))
            except OSError:
                return False
    return True


def free_ports(count: int, first: int = 0) -> list[int]:
    """``count`` ports free now: any the system gives (``first`` 0), or ``first``, ``first + 1``, ... each checked."""
    ports: list[int] = []
    if first:
        for port in range(first, first + count):
            if not port_free(port):
                raise InteropError(f"port {port} is taken: stop what holds it, or give another --ports-from")
            ports.append(port)
        return ports
    while len(ports) < count:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port not in ports and port_free(port):
            ports.append(port)
    return ports


class ProcessGroup:
    """Starts processes, waits for them, and stops all of them when the block ends."""

    def __init__(self, logs: Path, environment: Mapping[str, str]) -> None:
        self.logs = logs
        self.environment = dict(environment)  # what every process starts with (the entry point's own)
        self.started: list[StartedProcess] = []

    def __enter__(self) -> ProcessGroup:
        self.logs.mkdir(parents=True, exist_ok=True)
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        while self.started:
            self.stop(self.started[-1])

    def start(
        self, name: str, argv: Sequence[str], cwd: Path | None = None, env: Mapping[str, str] | None = None
    ) -> StartedProcess:
        log = self.logs / f"{name}.log"
        with log.open("wb") as out:
            try:
                process = subprocess.Popen(
                    list(argv),
                    cwd=cwd,
                    env={**self.environment, **(env or {})},
                    stdin=subprocess.PIPE,  # held open: the real server reads its stdin and must not see EOF
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            except OSError as exc:
                raise InteropError(f"{name}: cannot start {argv[0]}: {exc}") from None
        started = StartedProcess(name, process, log)
        self.started.append(started)
        return started

    def stop(self, started: StartedProcess, grace_s: float = 8.0) -> None:
        if started in self.started:
            self.started.remove(started)
        process = started.process
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(grace_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        # children it left in its session (node, a pip build) go too
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        if process.stdin is not None:
            with contextlib.suppress(OSError):
                process.stdin.close()

    def wait_port(self, started: StartedProcess, port: int, timeout_s: float, host: str = "127.0.0.1") -> None:
        """Until ``host:port`` accepts a TCP connection; an error naming the process when it exits or the time is up."""
        deadline = time.monotonic() + timeout_s
        while True:
            if started.process.poll() is not None:
                raise InteropError(
                    f"{started.name} exited with code {started.process.returncode} before it listened on {port}; "
                    f"its log ({started.log}) ends:\n{started.tail()}"
                )
            with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=0.5):
                return
            if time.monotonic() > deadline:
                raise InteropError(
                    f"{started.name} did not listen on {host}:{port} within {timeout_s:g} s; "
                    f"its log ({started.log}) ends:\n{started.tail()}"
                )
            time.sleep(0.2)

    def wait_line(self, started: StartedProcess, pattern: str, timeout_s: float) -> re.Match[str]:
        """Until the process's log has a line matching ``pattern``."""
        deadline = time.monotonic() + timeout_s
        while True:
            found = started.said(pattern)
            if found:
                return found
            if started.process.poll() is not None or time.monotonic() > deadline:
                how = (
                    f"exited with code {started.process.returncode}"
                    if started.process.poll() is not None
                    else f"did not say it was ready within {timeout_s:g} s"
                )
                raise InteropError(f"{started.name} {how}; its log ({started.log}) ends:\n{started.tail()}")
            time.sleep(0.2)

    def run(self, name: str, argv: Sequence[str], cwd: Path | None = None, timeout_s: float = 1800) -> StartedProcess:
        """A process run to its end (an install, a replay); an error with its log's tail when it fails."""
        started = self.start(name, argv, cwd)
        try:
            code = started.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            raise InteropError(
                f"{name} did not finish within {timeout_s:g} s; its log ({started.log}) ends:\n{started.tail()}"
            ) from None
        finally:
            self.stop(started)
        if code != 0:
            raise InteropError(f"{name} failed (exit code {code}); its log ({started.log}) ends:\n{started.tail()}")
        return started


def run_script(work: Callable[[], int]) -> int:
    """A script's exit code from ``work``, which holds a ``ProcessGroup``: SIGTERM ends it as Ctrl-C does (every
    process started is stopped on the way out), and what stopped it is said on stderr: an ``InteropError``'s
    message (2), an interrupt (130)."""
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        return work()
    except InteropError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted: every process started was stopped", file=sys.stderr)
        return 130


def _interrupt(_signum: int, _frame: object) -> None:
    raise KeyboardInterrupt
