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
identity (M11: the same devices meet a different server). This module starts them (each told
``--process K/N``) and forwards their lines prefixed ``[pK]``; ``supervisor`` watches them, restarting one
that dies.

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
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.transport.server.restart_budget import RestartLimit
from pipeline.transport.server.restart_record import segment_run_id

READY = "serving ws://"  # the line a process prints once it listens (front_doors.serve_until_stopped)
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


def process_argv(argv: Sequence[str], k: int, n: int, run_id: str, out: Path, restart: int = 0) -> list[str]:
    """Process K's command line: the user's, then its own run id and folder (the parser keeps an option's last
    value, so the user's ``--run-id`` and ``--out`` are overridden, not edited out). After its ``restart``-th
    restart it serves in the same folder as a new run (``segment_run_id``): its rows and traces join the
    folder's others, told apart by the run id, and a trace file the dead process left is never written again."""
    folder = out / "processes" / str(k)
    own = segment_run_id(run_id, k, restart)
    return [*argv, "--process", f"{k}/{n}", "--run-id", own, "--out", str(folder)]


class ServerProcess:
    """One running ``pipeline.serve``, its lines forwarded, and when it said it listens."""

    def __init__(self, number: int, command: list[str], env: Mapping[str, str]) -> None:
        self.number = number
        # in a session of its own: a Ctrl-C at the terminal reaches the parent only, which stops each process
        # once (a second SIGINT would break a process's shutdown midway)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "pipeline.serve", *command],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=dict(env),
            start_new_session=True,
        )
        self.started_at = time.monotonic()
        self.ready = threading.Event()
        self.ready_at: float | None = None  # time.monotonic() when it said it listens
        self.last_lines: list[str] = []
        self.reader = threading.Thread(target=self._forward, daemon=True, name=f"serve-p{number}")
        self.reader.start()

    def _forward(self) -> None:
        stream = self.proc.stdout
        assert stream is not None
        for line in stream:
            if line.startswith(READY) and not self.ready.is_set():
                self.ready_at = time.monotonic()
                self.ready.set()
            self.last_lines = [*self.last_lines[-4:], line.rstrip()]
            print(f"[p{self.number}] {line}", end="", flush=True)

    def said_last(self) -> str:
        """Its last two lines, read to the end (the error among them when it ended)."""
        self.reader.join(timeout=2)
        return "; ".join(self.last_lines[-2:]) or "nothing"


class ServerProcesses:
    """The running processes, process K at ``procs[K - 1]``; one that ended can be started again in its place."""

    def __init__(self, commands: list[list[str]], env: Mapping[str, str]) -> None:
        self.env = env
        self.procs = [ServerProcess(k, command, env) for k, command in enumerate(commands, start=1)]
        self.readers = [p.reader for p in self.procs]  # every process's, those restarted included

    def ended(self) -> list[tuple[int, int]]:
        """(process number, exit status) of those that have ended."""
        return [(p.number, code) for p in self.procs if (code := p.proc.poll()) is not None]

    def restart(self, k: int, command: list[str]) -> ServerProcess:
        """Process K, which has ended, started again with ``command``."""
        assert self.procs[k - 1].proc.poll() is not None, f"process {k} is still running"
        fresh = ServerProcess(k, command, self.env)
        self.procs[k - 1] = fresh
        self.readers.append(fresh.reader)
        return fresh

    def stop(self) -> list[int]:
        """SIGINT to each still running, then wait (killed after ``STOP_LIMIT_S``); their exit statuses."""
        for p in self.procs:
            if p.proc.poll() is None:
                p.proc.send_signal(signal.SIGINT)
        deadline = time.monotonic() + STOP_LIMIT_S
        for p in self.procs:
            try:
                p.proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.proc.kill()
                p.proc.wait()
        for reader in self.readers:
            reader.join(timeout=5)
        return [p.proc.returncode for p in self.procs]


@dataclass(frozen=True, slots=True)
class ProcessesShare:
    """What the processes share: how many, where they listen, the run they are parts of, how often one that
    died may be restarted."""

    processes: int
    host: str
    port: int
    out: Path
    run_id: str
    restart: RestartLimit = field(default_factory=RestartLimit)
