"""``python -m pipeline.serve --processes N``: N server processes on one WebSocket port, each its own run.

A ``pipeline.serve`` process does its Python work (the protocol, Opus decoding, the VAD's bookkeeping,
the turns' tasks) on one event-loop thread, so one process holds as many devices as one core lets that
thread keep up with, however many cores the machine has. A server holds more by running one process per
core, as web servers do (gunicorn's and uvicorn's workers). Here every process listens on the same port
with ``SO_REUSEPORT``, and the kernel gives each new connection to one of them (by a hash of its
addresses): a device's session lives in one process for the whole connection, and a process never sees
another's devices.

Each process is a whole ``pipeline.serve`` (its models, its loop, its stand-ins) and its own run: run id
``RUN-pK``, traces and bench.csv under ``OUT/processes/K/``, ``server_processes = N`` in its config
identity (M11: the same devices meet a different server). This process only starts them (each told
``--process K/N``), forwards their lines prefixed ``[pK]``, says ``serving ws://...`` once every process
listens, and stops them all on SIGINT or SIGTERM. When one ends by itself the others are stopped too:
that process's devices are gone, and what the rest measured would be a smaller server's.

Only the WebSocket door is shared this way. MQTT devices keep one broker connection each and their UDP
audio port is told in the hello, and the OTA answer names one server, so ``--mqtt-port`` and
``--ota-port`` are refused with more than one process, as is ``--port 0`` (each process would take a
different free port).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from pipeline.transport.server.websocket import WebSocketSettings

READY = "serving ws://"  # the line a process prints once it listens (serve.serve_until_stopped)
START_LIMIT_S = 300.0  # a process loads its models before it listens: real ones take minutes on a cold cache
ORPHAN_CHECK_S = 1.0  # how often a process looks whether its parent is still there (it stops if not)
STOP_LIMIT_S = 30.0  # after SIGINT, a process writes its last turns and traces; then it is killed


def refusal(processes: int, port: int, other_doors: bool) -> str:
    """Why ``--processes`` cannot be served as asked ("" when it can); ``other_doors``: MQTT or OTA asked for."""
    if processes < 1:
        return f"--processes {processes}: at least 1"
    if processes == 1:
        return ""
    if other_doors:
        return (
            f"--processes {processes} shares only the WebSocket port: MQTT devices and the OTA answer are "
            "told one server; serve them with one process"
        )
    if port == 0:
        return f"--processes {processes} needs a fixed --port: with 0 each process would take its own"
    return ""


def parse_process(value: str) -> tuple[int, int]:
    """``--process K/N`` (given by the parent only): this is process K of N."""
    k, _, n = value.partition("/")
    if not (k.isdigit() and n.isdigit() and 1 <= int(k) <= int(n)):
        raise ValueError(f"{value!r}: K/N with 1 <= K <= N")
    return int(k), int(n)


def process_argv(argv: Sequence[str], k: int, n: int, run_id: str, out: Path) -> list[str]:
    """Process K's command line: the user's, then its own run id and folder (the parser keeps an option's last
    value, so the user's ``--run-id`` and ``--out`` are overridden, not edited out)."""
    folder = out / "processes" / str(k)
    return [*argv, "--process", f"{k}/{n}", "--run-id", f"{run_id}-p{k}", "--out", str(folder)]


class ServerProcesses:
    """The running processes, their lines forwarded, and when each said it listens."""

    def __init__(self, commands: list[list[str]], env: Mapping[str, str]) -> None:
        # each in a session of its own: a Ctrl-C at the terminal reaches this process only, which stops each
        # of them once (a second SIGINT would break a process's shutdown midway)
        self.procs = [
            subprocess.Popen(
                [sys.executable, "-m", "pipeline.serve", *command],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                env=dict(env),
                start_new_session=True,
            )
            for command in commands
        ]
        self.ready = [threading.Event() for _ in self.procs]
        self.last_lines: list[list[str]] = [[] for _ in self.procs]
        self.readers = [
            threading.Thread(target=self._forward, args=(i,), daemon=True, name=f"serve-p{i + 1}")
            for i in range(len(self.procs))
        ]
        for reader in self.readers:
            reader.start()

    def _forward(self, i: int) -> None:
        stream = self.procs[i].stdout
        assert stream is not None
        for line in stream:
            if line.startswith(READY):
                self.ready[i].set()
            self.last_lines[i] = [*self.last_lines[i][-4:], line.rstrip()]
            print(f"[p{i + 1}] {line}", end="", flush=True)

    def ended(self) -> list[tuple[int, int]]:
        """(process number, exit status) of those that have ended."""
        return [(i + 1, code) for i, proc in enumerate(self.procs) if (code := proc.poll()) is not None]

    def stop(self) -> list[int]:
        """SIGINT to each still running, then wait (killed after ``STOP_LIMIT_S``); their exit statuses."""
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
        deadline = time.monotonic() + STOP_LIMIT_S
        for proc in self.procs:
            try:
                proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for reader in self.readers:
            reader.join(timeout=5)
        return [proc.returncode for proc in self.procs]


@dataclass(frozen=True, slots=True)
class ProcessesShare:
    """What the processes share: how many, where they listen, the run they are parts of."""

    processes: int
    host: str
    port: int
    out: Path
    run_id: str


def supervise(shared: ProcessesShare, argv: Sequence[str], env: Mapping[str, str]) -> int:
    """Run ``shared.processes`` servers on one port until SIGINT or SIGTERM; the exit status (2: one could not
    start, 1: one ended by itself)."""
    n, run_id = shared.processes, shared.run_id
    stop = threading.Event()

    def stopping(_signum: int, _frame: FrameType | None) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, stopping) for sig in (signal.SIGINT, signal.SIGTERM)}
    group = ServerProcesses([process_argv(argv, k, n, run_id, shared.out) for k in range(1, n + 1)], env)
    status = 1
    try:
        status = _watch(group, stop, shared)
    finally:
        codes = group.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if status == 0 and any(codes):
        print(f"error: not every process stopped cleanly (exit statuses {codes})", file=sys.stderr)
        return 1
    return status


def _watch(group: ServerProcesses, stop: threading.Event, shared: ProcessesShare) -> int:
    n, started = shared.processes, time.monotonic()
    while not all(ready.is_set() for ready in group.ready):
        if ended := group.ended():
            k, code = ended[0]
            group.readers[k - 1].join(timeout=2)  # its last lines, the error among them, read to the end
            last = "; ".join(group.last_lines[k - 1][-2:]) or "nothing"
            print(f"error: process {k} of {n} ended before it listened (exit {code}; it said: {last})", file=sys.stderr)
            return 2
        if stop.is_set():
            return 0
        if time.monotonic() - started > START_LIMIT_S:
            print(f"error: not every process listened within {START_LIMIT_S:g} s", file=sys.stderr)
            return 2
        stop.wait(0.1)
    where = f"{shared.host}:{shared.port}{WebSocketSettings().path}"
    print(f"serving ws://{where} with {n} processes (runs {shared.run_id}-p1 to -p{n})", flush=True)
    while not stop.wait(0.2):
        if ended := group.ended():
            k, code = ended[0]
            print(f"error: process {k} of {n} ended by itself (exit {code}); stopping the others", file=sys.stderr)
            return 1
    return 0
