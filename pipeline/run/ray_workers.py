"""A run's devices spread over Ray workers, when one machine cannot emulate enough of them.

Each worker is a Ray async actor that runs a share of the devices (device ``i`` goes to
worker ``i mod W``) with the same settings, question set, arrival times and question orders
as a one-process run would give them, and its own tracer. Its finished turns' trace lines
are drained by the driver every half second, so what a worker finished is kept even if the
worker dies later; the driver writes them into the run's one trace file and bench.csv,
exactly as a one-process run's sink does, so analysis and report cannot tell the
difference. With OTLP configured, every worker also exports its spans to that collector
(or Jaeger) itself: all spans reach one place.

A worker that dies mid-run is reported once, by name and devices; every turn its devices
had not finished is recorded as a failed turn (``worker_lost``), never left out (METHOD M7);
the other workers go on.

Ray: ``address=None`` starts a local Ray for this command and stops it afterwards;
``address="auto"`` or ``"ray://HEAD:10001"`` joins an existing cluster (then every node
needs this checkout and its packages at the same path: a Ray runtime_env working_dir).
With in-process stages each worker runs its own pipeline (its own model); for devices of one
shared server, give the run ``--server``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from pipeline.clock import RealClock, run_on_clock
from pipeline.fleet.arrivals import rotated
from pipeline.run.assembly import load_engines
from pipeline.run.session import RemoteTurns, Run, TraceSink, run_session, turn_attributes
from pipeline.settings.config import Config
from pipeline.settings.fixtures import Question, QuestionSet
from pipeline.tracing import names
from pipeline.tracing.export import OtlpSettings, Tracing
from pipeline.tracing.timeline import TurnTimeline
from stages.registry import ROLES

DRAIN_S = 0.5
T = TypeVar("T")
WORKER_LOST = "worker_lost"


@dataclass(frozen=True)
class WorkerSpec:
    """Everything a worker needs to run its devices; no engines (each worker loads its own)."""

    run_id: str
    config: Config
    config_id: str
    questions: QuestionSet
    model_cache: Path
    devices: tuple[int, ...]
    endpoint: str
    identity: dict[str, str]
    service_name: str
    otlp: OtlpSettings | None = None
    remote: Callable[[int], RemoteTurns] | None = None
    roles: tuple[str, ...] = ROLES
    api_key: str | None = field(default=None, repr=False)


def run_share(spec: WorkerSpec, trace_path: Path, lines: TraceSink) -> None:
    """One worker's devices, start to end, on this thread (its own event loop and clock); every trace
    line it writes (turns, background jobs, its session's span at the end) also goes to ``lines``."""
    clock = RealClock()
    engines = load_engines(spec.config, spec.model_cache, {}, spec.roles)
    engines.endpoint, engines.identity = spec.endpoint, dict(spec.identity)
    run = Run(
        spec.run_id,
        spec.config,
        spec.config_id,
        spec.questions,
        clock,
        engines,
        spec.api_key,
        spec.remote,
        spec.devices,
    )
    tracing = Tracing(trace_path, spec.service_name, spec.otlp, tee=lines)
    try:
        run_on_clock(run_session(run, tracing, _no_rows, lambda _m: None), clock)
    finally:
        tracing.shutdown()
        engines.close()


def _no_rows(_line: dict[str, Any]) -> None:
    """A worker makes no rows: its driver does, from the lines it is handed."""


class DeviceWorker:
    """The Ray actor's body: runs its share in a thread and hands finished trace lines over."""

    def __init__(self, spec: WorkerSpec) -> None:
        self.spec = spec
        self.lines: list[dict[str, Any]] = []
        self.folder = tempfile.mkdtemp(prefix="lab-worker-")

    async def run(self) -> int:
        path = Path(self.folder) / f"{self.spec.run_id}.jsonl"
        await asyncio.to_thread(run_share, self.spec, path, self.lines.append)
        return len(self.spec.devices)

    async def drain(self) -> list[dict[str, Any]]:
        return take_all(self.lines)


def take_all(items: list[T]) -> list[T]:
    """What ``items`` holds, taken out of it while another thread may append: each step is one atomic list
    operation, and an append lands after the ones taken."""
    n = len(items)
    taken = items[:n]
    del items[:n]
    return taken


def shares(devices: int, workers: int) -> list[tuple[int, ...]]:
    """Device ``i`` to worker ``i mod workers``; a worker with no device is not started."""
    return [s for s in (tuple(range(w, devices, workers)) for w in range(workers)) if s]


@dataclass
class RayOutcome:
    """What a Ray run brought back: how many trace lines the workers handed over, and which workers were lost."""

    lines: int = 0
    lost: list[str] = field(default_factory=list)  # one message per worker that died


def run_on_ray(
    spec: WorkerSpec,
    workers: int,
    tracing: Tracing,
    sink: TraceSink,
    say: Callable[[str], None],
    address: str | None = None,
) -> RayOutcome:
    """Run ``spec``'s devices on ``workers`` Ray actors; every line reaches ``tracing``'s file and ``sink``."""
    with ray_started(address) as ray:
        actor = ray.remote(num_cpus=0)(DeviceWorker)
        plan = shares(spec.config.fleet.devices, workers)
        handles = [actor.remote(_with_devices(spec, share)) for share in plan]
        return _drive(ray, handles, plan, spec, tracing, sink, say)


@contextlib.contextmanager
def ray_started(address: str | None) -> Iterator[Any]:
    """The ``ray`` module, with Ray running: a local one started (and stopped after) when none is, or the
    cluster at ``address`` joined; an already initialised Ray is used as it is."""
    import ray

    started_here = not ray.is_initialized()
    if started_here:
        ray.init(address=address, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        yield ray
    finally:
        if started_here:
            ray.shutdown()


def _with_devices(spec: WorkerSpec, devices: tuple[int, ...]) -> WorkerSpec:
    return dataclasses.replace(spec, devices=devices)


def _drive(
    ray: Any,
    handles: list[Any],
    plan: list[tuple[int, ...]],
    spec: WorkerSpec,
    tracing: Tracing,
    sink: TraceSink,
    say: Callable[[str], None],
) -> RayOutcome:
    outcome = RayOutcome()
    done: dict[tuple[int, int, str], bool] = {}
    running = {i: h.run.remote() for i, h in enumerate(handles)}
    while running:
        ready, _ = ray.wait(list(running.values()), timeout=DRAIN_S, num_returns=1)
        for i in running:  # finished turns come back while the run goes on
            _take(ray, handles[i], tracing, sink, done, outcome)
        for i, ref in list(running.items()):
            if ref not in ready:
                continue
            del running[i]
            try:
                ray.get(ref)
                _take(ray, handles[i], tracing, sink, done, outcome)  # the last turns and the session's end
            except Exception as exc:  # the actor died, or its run raised: its devices' turns are lost
                message = f"worker {i} (devices {', '.join(map(str, plan[i]))}) failed mid-run: {reason(exc)}"
                outcome.lost.append(message)
                say(f"error: {message}")
                _record_lost(spec, plan[i], done, tracing, sink, message)
    return outcome


def _take(
    ray: Any,
    handle: Any,
    tracing: Tracing,
    sink: TraceSink,
    done: dict[tuple[int, int, str], bool],
    outcome: RayOutcome,
) -> None:
    try:
        lines = ray.get(handle.drain.remote())
    except Exception:  # a dead actor answers nothing more; its run's result says why
        return
    outcome.lines += len(lines)
    for attrs in hand_over(lines, tracing, sink):
        device = int(attrs.get(names.DEVICE_INDEX) or 0)
        done[(device, int(attrs.get(names.ROUND) or 0), str(attrs.get(names.QUESTION_ID)))] = True


def hand_over(lines: Sequence[dict[str, Any]], tracing: Tracing, sink: TraceSink) -> list[dict[str, Any]]:
    """A worker's drained lines into the run's one trace file, its turns' lines to ``sink``; the attributes of
    every turn span among them."""
    turns = []
    for line in lines:
        tracing.add_line(line)
        spans = turn_spans(line)
        if spans:  # a turn's line makes rows; a session's or a background job's does not
            sink(line)
        turns += spans
    return turns


def turn_spans(line: dict[str, Any]) -> list[dict[str, Any]]:
    """The attributes of each turn span in a trace line."""
    found = []
    for resource in line.get("resourceSpans", []):
        for scope in resource.get("scopeSpans", []):
            for span in scope.get("spans", []):
                if span.get("name") == names.TURN:
                    attrs = span.get("attributes", [])
                    found.append({a["key"]: next(iter(a.get("value", {}).values()), None) for a in attrs})
    return found


def _record_lost(
    spec: WorkerSpec,
    devices: Sequence[int],
    done: dict[tuple[int, int, str], bool],
    tracing: Tracing,
    sink: TraceSink,
    message: str,
) -> None:
    """Every turn the dead worker's devices had not finished, as a failed turn (M7)."""
    cfg = spec.config
    questions = spec.questions.questions[: cfg.run.limit or None]
    run = Run(spec.run_id, cfg, spec.config_id, spec.questions, RealClock(), _NoEngines(spec.endpoint))  # type: ignore[arg-type]
    for device in devices:
        for round_no in range(1, cfg.run.rounds + 1):
            for q in rotated(questions, device):
                if not done.get((device, round_no, q.id)):
                    sink(lost_turn(run, q, round_no, device, message, tracing))


def lost_turn(
    run: Run, q: Question, round_no: int, device: int, message: str, tracing: Tracing, warmup: bool | None = None
) -> dict[str, Any]:
    """A turn a lost worker's device did not finish, traced as a failed turn (``worker_lost``); its line."""
    now = time.time_ns()
    timeline = TurnTimeline(start_ns=now, end_ns=now, error_type=WORKER_LOST, error_message=message)
    attrs = turn_attributes(run, q, round_no, message, None)
    if run.config.fleet.devices > 1:
        attrs[names.DEVICE_INDEX], attrs[names.DEVICE_COUNT] = device, run.config.fleet.devices
    if warmup is not None:
        attrs[names.WARMUP] = warmup
    return tracing.emit_turn(timeline, attrs)


@dataclass
class _NoEngines:
    """What ``turn_attributes`` reads of a run's engines, for turns no engine ran."""

    endpoint: str


def reason(exc: BaseException) -> str:
    """An exception in one line: its type and its message's first line."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")
