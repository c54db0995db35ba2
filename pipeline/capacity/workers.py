"""A capacity step's devices spread over Ray workers (``--workers W``), when one process cannot hold the fleet.

Device ``i`` of a step runs on worker ``i mod W`` (``pipeline.run.ray_workers.shares``), as ``Users`` with the
step's profile, arrival offsets and question orders exactly as a one-process step gives them: each worker
prepares the step as the ramp does (``prepare_step``, into a folder of its own) and runs only its share.

One hold for the whole fleet. Each worker first loads its clips and finds their ends of speech, then
waits; when every worker is ready the driver names one wall-clock start for all of them, so the fleet's
last arrival is the same instant everywhere. The driver then ends the hold for all: ``hold_s`` after that
last arrival once the whole fleet's measured turns (drained so far) reach ``min_turns``, or at
``max_hold_s`` after it; a worker hears it at the next drain, at most ``DRAIN_S`` later (one more chance
for each device to start a turn; a one-process step checks its window the same way, only sooner).

Every ``DRAIN_S`` the driver drains each worker's finished trace lines into the step's one trace file and
bench.csv (``pipeline.run.ray_workers.hand_over``) and its paced sends' lateness values (each worker's event
loop keeps its own record), pooled so the step's generator lateness P99 covers the whole fleet. A worker
that dies is said once; each of its devices gets one failed turn (``worker_lost``), the turn it was in
(METHOD M7): a step of open-ended asking has no list of turns it would have finished. The step then has
failures and cannot hold.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.capacity.probe import ServerProbe
from pipeline.capacity.profile import LoadProfile
from pipeline.capacity.ramp import RampError, Say, Target, prepare_step
from pipeline.capacity.ramp_plan import RampPlan
from pipeline.capacity.users import Users, Window
from pipeline.clock import run_on_clock
from pipeline.fleet.arrivals import rotated
from pipeline.plan.prepare import make_run
from pipeline.run.ray_workers import DRAIN_S, hand_over, lost_turn, ray_started, reason, shares, take_all
from pipeline.run.session import Run, TraceSink
from pipeline.tracing import names
from pipeline.tracing.export import SERVICE, Tracing
from pipeline.transport.device.pacer import SendLateness, send_lateness

GO_LEAD_S = 0.5  # from the driver's "go" to the fleet's start: every worker hears it before then


@dataclass(frozen=True)
class ShareSpec:
    """What a worker needs for its share of one step."""

    target: Target
    profile: LoadProfile
    plan: RampPlan
    devices: int  # the step's fleet
    share: tuple[int, ...]  # the devices this worker runs
    run_id: str
    service: str
    env: dict[str, str] = field(repr=False)
    scratch: str = ""  # the step's folder for its workers' own files, which the driver removes ("": the system's)


@dataclass
class FleetWindow(Window):
    """A worker's window: open until its driver ends the hold (``max_hold_s`` bounds it if the driver is gone)."""

    ended: threading.Event = field(default_factory=threading.Event)

    def asking(self) -> bool:
        elapsed_s = (self.clock.now_ns() - self.arrived_ns) / 1e9
        return not self.ended.is_set() and elapsed_s < self.max_hold_s


class ShareWorker:
    """The Ray actor's body: its share of the step on a thread of its own; lines and lateness handed over."""

    def __init__(self, spec: ShareSpec) -> None:
        self.spec = spec
        self.lines: list[dict[str, Any]] = []
        self.late: list[np.ndarray] = []
        self.prepared, self.started, self.ended = threading.Event(), threading.Event(), threading.Event()
        self.start_ns = 0  # wall clock

    async def run(self) -> float:
        """The share, start to end; its hold (s, from the last arrival to its last turn's end)."""
        return await asyncio.to_thread(self._run)

    async def ready(self) -> bool:
        await asyncio.to_thread(self.prepared.wait)
        return True

    async def go(self, start_ns: int) -> None:
        self.start_ns = start_ns
        self.started.set()

    async def end(self) -> None:
        self.ended.set()

    async def drain(self) -> tuple[list[dict[str, Any]], np.ndarray]:
        lines, late = take_all(self.lines), take_all(self.late)
        return lines, np.concatenate(late) if late else np.empty(0)

    def _run(self) -> float:
        scratch = self.spec.scratch or None
        if scratch is not None:  # on another machine of a cluster the driver's folder is not there yet
            Path(scratch).mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="lab-capacity-worker-", dir=scratch) as folder:
            return self._run_in(Path(folder))

    def _run_in(self, folder: Path) -> float:
        """The share, its own files (bench.csv, traces) in ``folder``: its driver keeps what counts."""
        s = self.spec
        p = prepare_step(s.target, s.profile, s.devices, folder, s.run_id, s.env)
        run = dataclasses.replace(make_run(s.run_id, p, s.env), only_devices=s.share)
        tracing = Tracing(folder / "traces" / f"{s.run_id}.jsonl", s.service, p.otlp, tee=self.lines.append)
        window = partial(FleetWindow, ended=self.ended)
        users = Users(run, s.profile, tracing, _no_rows, s.plan.hold_s, s.plan.max_hold_s, s.plan.min_turns)
        users.make_window = window
        try:
            return run_on_clock(self._hold(users), run.clock).held_s
        finally:
            tracing.shutdown()
            p.engines.close()

    async def _hold(self, users: Users) -> Window:
        record = send_lateness()
        await users.prepare()
        self.prepared.set()
        await asyncio.to_thread(self.started.wait)
        await asyncio.sleep(max(0.0, (self.start_ns - time.time_ns()) / 1e9))
        record.take()  # the fleet's lateness counts from its start
        shipping = asyncio.create_task(self._ship(record))
        try:
            return await users.run_step()
        finally:
            shipping.cancel()
            self.late.append(record.take())

    async def _ship(self, record: SendLateness) -> None:
        while True:
            await asyncio.sleep(DRAIN_S)
            self.late.append(record.take())


def _no_rows(_line: dict[str, Any]) -> None:
    """A worker makes no rows: its driver does, from the lines it is handed."""


@dataclass
class Tally:
    """What the driver knows of the fleet from the lines drained so far."""

    asked: dict[int, int] = field(default_factory=dict)  # turns each device has finished (refusals too)
    measured: int = 0  # finished turns that are not warm-ups
    late: list[np.ndarray] = field(default_factory=list)

    def count(self, turns: list[dict[str, Any]]) -> None:
        for attrs in turns:
            device = int(attrs.get(names.DEVICE_INDEX) or 0)
            self.asked[device] = self.asked.get(device, 0) + 1
            self.measured += not attrs.get(names.WARMUP)


@dataclass
class RayFleet:
    """``Ramp.spread``: runs each step's devices on ``workers`` Ray actors (Ray already started, see ``on_ray``)."""

    ray: Any
    workers: int
    target: Target
    profile: LoadProfile
    plan: RampPlan
    env: Mapping[str, str]
    say: Say = print
    lost: list[str] = field(default_factory=list)  # one message per worker that died, over the whole ramp
    worker: type[ShareWorker] = ShareWorker  # the actor's body
    scratch: str | None = None  # where each step's scratch folder is made (None: the system's temporary folder)

    def __call__(
        self, run: Run, tracing: Tracing, sink: TraceSink, probe: ServerProbe, offsets_ms: list[float]
    ) -> tuple[float, np.ndarray]:
        """The step of ``run``: its hold (s) and the pooled lateness of every worker's sends (ms)."""
        plan = shares(run.config.fleet.devices, self.workers)
        service = self.env.get("OTEL_SERVICE_NAME", SERVICE)
        actor = self.ray.remote(num_cpus=0)(self.worker)
        devices, env = run.config.fleet.devices, dict(self.env)
        # a worker killed mid-step never removes its folder: the driver removes the step's, here (on a
        # cluster, only this machine's: a killed worker elsewhere leaves its own behind)
        scratch = tempfile.mkdtemp(prefix="lab-capacity-step-", dir=self.scratch)
        specs = [
            ShareSpec(self.target, self.profile, self.plan, devices, s, run.run_id, service, env, scratch) for s in plan
        ]
        handles = [actor.remote(spec) for spec in specs]
        try:
            return run_on_clock(self._drive(run, handles, plan, tracing, sink, probe, max(offsets_ms)), run.clock)
        finally:
            for handle in handles:  # a step's workers end with it
                with contextlib.suppress(Exception):
                    self.ray.kill(handle)
            shutil.rmtree(scratch, ignore_errors=True)

    async def _drive(
        self,
        run: Run,
        handles: list[Any],
        plan: list[tuple[int, ...]],
        tracing: Tracing,
        sink: TraceSink,
        probe: ServerProbe,
        last_ms: float,
    ) -> tuple[float, np.ndarray]:
        running = {i: h.run.remote() for i, h in enumerate(handles)}
        await self._all_ready(handles, running, run.config.fleet.devices)
        start_ns = time.time_ns() + int(GO_LEAD_S * 1e9)
        self.ray.get([h.go.remote(start_ns) for h in handles])
        last_ns = start_ns + int(last_ms * 1e6)
        tally, held, ended = Tally(), [0.0], False
        try:
            while running:
                done, _ = await asyncio.to_thread(self.ray.wait, list(running.values()), timeout=DRAIN_S)
                for i in running:
                    self._take(handles[i], tracing, sink, tally)
                for i, ref in list(running.items()):
                    if ref in done:
                        del running[i]
                        held.append(self._finish(run, i, ref, handles[i], plan[i], tracing, sink, tally))
                elapsed_s = (time.time_ns() - last_ns) / 1e9
                if elapsed_s >= 0:
                    probe.start()
                if not ended and self._over(elapsed_s, tally.measured):
                    ended = True
                    for h in handles:
                        h.end.remote()
        finally:
            await probe.stop()
        return max(held), np.concatenate(tally.late) if tally.late else np.empty(0)

    def _over(self, elapsed_s: float, measured: int) -> bool:
        hold = self.plan
        return elapsed_s >= hold.max_hold_s or (elapsed_s >= hold.hold_s and measured >= hold.min_turns)

    async def _all_ready(self, handles: list[Any], running: dict[int, Any], devices: int) -> None:
        """Every worker has prepared its share; one whose run ended first could not start: the step stops."""
        waiting = {h.ready.remote(): i for i, h in enumerate(handles)}
        while waiting:
            done, _ = await asyncio.to_thread(
                self.ray.wait, [*waiting, *running.values()], timeout=DRAIN_S, num_returns=1
            )
            for ref in done:
                if ref in waiting:
                    del waiting[ref]
                    continue
                i = next(i for i, r in running.items() if r == ref)
                try:
                    self.ray.get(ref)
                    problem = "it ended before its devices started"
                except Exception as exc:
                    problem = reason(exc)
                raise RampError(f"step of {devices} device(s): worker {i} could not start its devices: {problem}")

    def _take(self, handle: Any, tracing: Tracing, sink: TraceSink, tally: Tally) -> None:
        try:
            lines, late = self.ray.get(handle.drain.remote())
        except Exception:  # a dead actor answers nothing more; its run's result says why
            return
        tally.count(hand_over(lines, tracing, sink))
        tally.late.append(late)

    def _finish(
        self,
        run: Run,
        i: int,
        ref: Any,
        handle: Any,
        devices: tuple[int, ...],
        tracing: Tracing,
        sink: TraceSink,
        tally: Tally,
    ) -> float:
        """A worker's run is over: its last lines, or, when it died, a lost turn for each of its devices."""
        try:
            held_s = float(self.ray.get(ref))
        except Exception as exc:
            message = f"worker {i} (devices {', '.join(map(str, devices))}) failed mid-step: {reason(exc)}"
            self.lost.append(message)
            self.say(f"error: {message}")
            for device in devices:
                order = rotated(run.selected(), device)
                asked = tally.asked.get(device, 0)
                q, round_no = order[asked % len(order)], asked // len(order) + 1
                line = lost_turn(run, q, round_no, device, message, tracing, warmup=False)
                line_attrs = {names.DEVICE_INDEX: device, names.WARMUP: False}
                tally.count([line_attrs])
                sink(line)
            return 0.0
        self._take(handle, tracing, sink, tally)  # the last turns and the session's end
        return held_s


@contextlib.contextmanager
def on_ray(
    workers: int,
    address: str | None,
    target: Target,
    profile: LoadProfile,
    plan: RampPlan,
    env: Mapping[str, str],
    say: Say = print,
) -> Iterator[RayFleet]:
    """A ``RayFleet`` for a whole ramp: Ray is started (or joined) once, stopped after its last step."""
    if workers < 1:
        raise ValueError(f"--workers {workers}: at least 1")
    with ray_started(address) as ray:
        yield RayFleet(ray, workers, target, profile, plan, env, say)
