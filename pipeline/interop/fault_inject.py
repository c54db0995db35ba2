"""Putting a fault case's fault in: at the moment it chooses, on the processes and the network of a running case.

Each injection waits for the device's first row (the next question is then being asked), waits ``mid_turn_s``
more so the fault lands mid-turn, breaks something, and says what it did, when (seconds from the device's
start, in ``stage.events``) and the moment of the fault (``stage.fault_ns``, the rows' clock: Unix ns).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.interop.fault_kinds import FaultCase
from pipeline.interop.fault_leftovers import children
from pipeline.interop.fault_proxy import FaultProxy, Mode
from pipeline.interop.process_group import InteropError, ProcessGroup, StartedProcess

NFT_TABLE = "labfault"  # the cut's table, in the case's own network namespace


@dataclass
class CaseStage:
    """A running case: its processes, its ports and what the harness did to it."""

    case: FaultCase
    folder: Path
    group: ProcessGroup
    port: int
    start_server: Callable[[str], StartedProcess]  # a server (again) on ``port``, its folder named
    servers: list[StartedProcess] = field(default_factory=list)
    device: StartedProcess | None = None
    proxy: FaultProxy | None = None
    started_ns: int = 0
    fault_ns: int | None = None
    events: list[str] = field(default_factory=list)

    def said(self, what: str) -> None:
        self.events.append(f"t+{(time.time_ns() - self.started_ns) / 1e9:.1f} s: {what}")

    @property
    def bench(self) -> Path:
        return self.folder / "device" / "bench.csv"


def rows_written(bench: Path) -> int:
    """Rows in a bench.csv (its whole lines after the header; none before it exists)."""
    try:
        return max(0, bench.read_bytes().count(b"\n") - 1)
    except OSError:
        return 0


def wait_rows(stage: CaseStage, rows: int, timeout_s: float = 120.0) -> None:
    """Until the device has written ``rows`` rows; an error when it ends first or the time is up."""
    assert stage.device is not None
    deadline = time.monotonic() + timeout_s
    while rows_written(stage.bench) < rows:
        if stage.device.process.poll() is not None:
            raise InteropError(f"the device ended before its row {rows}; its log ends:\n{stage.device.tail()}")
        if time.monotonic() > deadline:
            raise InteropError(f"the device wrote no row {rows} within {timeout_s:g} s")
        time.sleep(0.1)


def mid_turn(stage: CaseStage) -> None:
    wait_rows(stage, 1)
    time.sleep(stage.case.mid_turn_s)


def kill(stage: CaseStage) -> None:
    mid_turn(stage)
    server = stage.servers[-1]
    os.kill(server.process.pid, signal.SIGKILL)
    stage.fault_ns = time.time_ns()
    stage.said(f"kill -9 server pid {server.process.pid}")


def kill_restart(stage: CaseStage) -> None:
    kill(stage)
    time.sleep(stage.case.duration_s)
    server = stage.start_server(f"server-{len(stage.servers) + 1}")
    stage.servers.append(server)
    stage.group.wait_port(server, stage.port, 60)
    stage.said(f"server started again on port {stage.port} (pid {server.process.pid}), listening")


def busiest_worker(server: StartedProcess) -> tuple[int, str]:
    """The server process (of ``--processes N``) that said the latest turn line: it holds a device mid-turn."""
    workers = {}
    for pid, command in children(server.process.pid):
        found = re.search(r"--process (\d+)/", command)
        if found:
            workers[found.group(1)] = pid
    if not workers:
        raise InteropError(f"{server.name}: no worker process found (is --processes above 1?)")
    text = server.log.read_text(encoding="utf-8", errors="replace")
    last = {k: text.rfind(f"[p{k}]") for k in workers}
    chosen = max(last, key=lambda k: last[k])
    return workers[chosen], f"p{chosen}"


def kill_worker(stage: CaseStage) -> None:
    mid_turn(stage)
    pid, which = busiest_worker(stage.servers[-1])
    os.kill(pid, signal.SIGKILL)
    stage.fault_ns = time.time_ns()
    stage.said(f"kill -9 server process {which} (pid {pid}), the last to report a turn")


def nft(*words: str) -> None:
    done = subprocess.run(["nft", *words], capture_output=True, text=True)
    if done.returncode != 0:
        raise InteropError(f"nft {' '.join(words)}: {done.stderr.strip()}")


def cut(stage: CaseStage) -> None:
    """Every TCP segment to or from the server's port dropped for ``duration_s`` (both directions: loopback
    traffic passes the output hook once each way), then the rule deleted."""
    mid_turn(stage)
    nft("add", "table", "inet", NFT_TABLE)
    nft("add", "chain", "inet", NFT_TABLE, "out", "{ type filter hook output priority 0 ; }")
    nft("add", "rule", "inet", NFT_TABLE, "out", "tcp", "dport", str(stage.port), "drop")
    nft("add", "rule", "inet", NFT_TABLE, "out", "tcp", "sport", str(stage.port), "drop")
    stage.fault_ns = time.time_ns()
    stage.said(f"network cut: nftables drops tcp port {stage.port} both ways")
    time.sleep(stage.case.duration_s)
    nft("delete", "table", "inet", NFT_TABLE)
    stage.said("network back: the rule deleted")


def endpoint(stage: CaseStage) -> None:
    """The endpoint behind the fault proxy fails each new request for ``duration_s``, then passes again."""
    assert stage.proxy is not None
    mid_turn(stage)
    mode: Mode = stage.case.mode  # type: ignore[assignment]  # checked against MODES where the case is made
    stage.proxy.mode = mode
    stage.fault_ns = time.time_ns()
    stage.said(f"endpoint fails new requests: {mode}")
    time.sleep(stage.case.duration_s)
    stage.proxy.mode = "pass"
    stage.said(f"endpoint passes again; requests so far: {dict(stage.proxy.seen)}")


def whole_run(stage: CaseStage) -> None:
    """A fault that holds from the start (a lossy link): the fault's moment is the device's start."""
    stage.fault_ns = stage.started_ns


def disk(stage: CaseStage) -> None:
    """The disk fills by itself: its moment is when the server first says it cannot write."""
    assert stage.device is not None
    server = stage.servers[-1]
    while stage.device.process.poll() is None:
        if server.said(r"No space left|cannot be written"):
            stage.fault_ns = time.time_ns()
            stage.said("the server says its disk is full")
            return
        time.sleep(0.2)


INJECT: dict[str, Callable[[CaseStage], None]] = {
    "kill": kill,
    "kill-restart": kill_restart,
    "kill-worker": kill_worker,
    "cut": cut,
    "loss": whole_run,
    "llm": endpoint,
    "speech": endpoint,
    "disk": disk,
}
