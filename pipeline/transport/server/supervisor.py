"""``pipeline.serve --processes N``'s parent: it starts the processes, says ``serving ws://...`` once every one
listens, restarts one that dies, and stops them all on SIGINT or SIGTERM.

A process that dies takes its devices' connections with it (the kernel closes them: each device sees its
connection cut and connects again, as the firmware does), while the devices of the others carry on; new
connections go to the processes still listening (``SO_REUSEPORT`` hashes over the listeners there are) and,
once it listens again, to its restart too. A restart is a new segment of the process's run (``process_argv``):
it is said on stderr (the process, how it ended, its restart count, the new run id, and later how long it took
to listen again) and written to ``OUT/restarts/RUN.json`` (``restart_record``). Restarts are bounded
(``restart_budget``): past the limit, or when a restart does not listen within ``START_LIMIT_S``, every process
is stopped and the exit status is 1, with why. A process that ends before the first ``serving`` line is not
restarted: the others have not started either, and its fault is in the setup (exit status 2).
"""

from __future__ import annotations

import signal
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import FrameType

from pipeline.transport.server.processes import (
    START_LIMIT_S,
    ProcessesShare,
    ServerProcess,
    ServerProcesses,
    process_argv,
)
from pipeline.transport.server.restart_budget import RestartBudget
from pipeline.transport.server.restart_record import (
    Restart,
    RestartRecord,
    ended_how,
    record_path,
    segment_run_id,
)
from pipeline.transport.server.websocket import WebSocketSettings

POLL_S = 0.05  # how often the processes are looked at: at most this is added to a restart's own start


class Stopping:
    """The signal handler for SIGINT and SIGTERM: a plain flag, since a handler that takes a lock (as
    ``threading.Event.set`` does) deadlocks when it interrupts code holding that lock."""

    def __init__(self) -> None:
        self.asked = False

    def __call__(self, _signum: int, _frame: FrameType | None) -> None:
        self.asked = True


def supervise(shared: ProcessesShare, argv: Sequence[str], env: Mapping[str, str]) -> int:
    """Run ``shared.processes`` servers on one port until SIGINT or SIGTERM, restarting those that die; the exit
    status (2: one could not start, 1: past the restart limit, or one did not stop cleanly)."""
    n = shared.processes
    stopping = Stopping()
    previous = {sig: signal.signal(sig, stopping) for sig in (signal.SIGINT, signal.SIGTERM)}
    group = ServerProcesses([process_argv(argv, k, n, shared.run_id, shared.out) for k in range(1, n + 1)], env)
    status = 1
    try:
        status = Supervisor(group, shared, argv, stopping).run()
    finally:
        codes = group.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    # one stopped before it listened (a restart still loading its models) had no device and nothing to write
    if status == 0 and any(code for p, code in zip(group.procs, codes, strict=True) if p.ready.is_set()):
        print(f"error: not every process stopped cleanly (exit statuses {codes})", file=sys.stderr)
        return 1
    return status


@dataclass(slots=True)
class Waiting:
    """A restarted process that has not said it listens yet."""

    process: ServerProcess
    restart: Restart
    ended_mono: float  # time.monotonic() when it was seen to end


@dataclass(slots=True)
class Supervisor:
    """Watches the processes of one run: the restarts taken, those not listening yet, the record."""

    group: ServerProcesses
    shared: ProcessesShare
    argv: Sequence[str]
    stopping: Stopping
    budget: RestartBudget = field(init=False)
    record: RestartRecord = field(init=False)
    counts: dict[int, int] = field(default_factory=dict)  # process number -> its restarts so far
    waiting: list[Waiting] = field(default_factory=list)
    unwritten: bool = False  # the record could not be written last time (said once until it can again)

    def __post_init__(self) -> None:
        self.budget = RestartBudget(self.shared.restart)
        self.record = RestartRecord(self.shared.run_id, self.shared.processes, self.shared.restart)

    def run(self) -> int:
        if (status := self._started()) is not None:
            return status
        n, where = self.shared.processes, f"{self.shared.host}:{self.shared.port}{WebSocketSettings().path}"
        print(f"serving ws://{where} with {n} processes (runs {self.shared.run_id}-p1 to -p{n})", flush=True)
        self._write()  # once every process has its run: an earlier run with this id was refused by them
        while not self.stopping.asked:
            time.sleep(POLL_S)
            if why := self._look():
                print(f"error: {why}", file=sys.stderr)
                self.record.gave_up = why
                self._write()
                return 1
        return 0

    def _started(self) -> int | None:
        """None once every process listens; else the exit status (2: one could not start, 0: stopped meanwhile)."""
        n, started = self.shared.processes, time.monotonic()
        while not all(p.ready.is_set() for p in self.group.procs):
            if ended := self.group.ended():
                k, code = ended[0]
                said = self.group.procs[k - 1].said_last()
                print(
                    f"error: process {k} of {n} ended before it listened ({ended_how(code)}; it said: {said})",
                    file=sys.stderr,
                )
                return 2
            if self.stopping.asked:
                return 0
            if time.monotonic() - started > START_LIMIT_S:
                print(f"error: not every process listened within {START_LIMIT_S:g} s", file=sys.stderr)
                return 2
            time.sleep(POLL_S)
        return None

    def _look(self) -> str:
        """One look: those that ended restarted, those restarted that listen noted; why to give up ("": not)."""
        for k, code in self.group.ended():
            if why := self._restart(k, code):
                return why
        return self._listening()

    def _restart(self, k: int, code: int) -> str:
        n, limit, now = self.shared.processes, self.shared.restart, time.monotonic()
        how = ended_how(code)
        if not self.budget.take(now):
            if limit.restarts == 0:
                return f"process {k} of {n} ended by itself ({how}); --max-restarts 0: stopping every process"
            return (
                f"process {k} of {n} ended by itself ({how}) with {limit.restarts} restart(s) already in the last "
                f"{limit.window_s:g} s (--max-restarts {limit.restarts} in --restart-window-s {limit.window_s:g}): "
                "stopping every process"
            )
        j = self.counts[k] = self.counts.get(k, 0) + 1
        run_id = segment_run_id(self.shared.run_id, k, j)
        try:
            fresh = self.group.restart(k, process_argv(self.argv, k, n, self.shared.run_id, self.shared.out, j))
        except OSError as exc:  # no process to be had (fork refused: memory, process limit)
            return f"process {k} of {n} ended by itself ({how}) and could not be started again: {exc}"
        restart = Restart(k, j, segment_run_id(self.shared.run_id, k, j - 1), run_id, how, code, time.time())
        self.record.restarts.append(restart)
        self.waiting.append(Waiting(fresh, restart, now))
        used = self.budget.in_window(now)
        print(
            f"warning: process {k} of {n} ended by itself ({how}); restarted as run {run_id}, its restart {j} "
            f"({used} of at most {limit.restarts} in {limit.window_s:g} s)",
            file=sys.stderr,
            flush=True,
        )
        self._write()
        return ""

    def _listening(self) -> str:
        """Restarts that said they listen noted (their time to listen recorded); why to give up ("": not)."""
        still: list[Waiting] = []
        for w in self.waiting:
            if w.process.ready_at is not None:
                w.restart.listening_after_s = round(w.process.ready_at - w.ended_mono, 3)
                print(
                    f"process {w.restart.process} listens again as run {w.restart.run_id}, "
                    f"{w.restart.listening_after_s:.2f} s after it ended",
                    file=sys.stderr,
                    flush=True,
                )
                self._write()
            elif w.process.proc.poll() is None:  # one that ended again is being restarted anew
                if time.monotonic() - w.process.started_at > START_LIMIT_S:
                    return f"process {w.restart.process}'s restart did not listen within {START_LIMIT_S:g} s"
                still.append(w)
        self.waiting = still
        return ""

    def _write(self) -> None:
        path = record_path(self.shared.out, self.shared.run_id)
        try:
            self.record.write(path)
        except OSError as exc:  # a full disk must not stop the supervisor: its processes still serve
            if not self.unwritten:
                print(f"warning: cannot write {path} ({exc.strerror or exc}); restarts go on", file=sys.stderr)
            self.unwritten = True
        else:
            self.unwritten = False
