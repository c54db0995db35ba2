"""The ramp: step after step of N devices against one server, each step a run of its own, until one fails.

Each step is prepared exactly as ``pipeline.replay FIXTURES --server URL --devices N`` prepares its run:
the step's ``RunPlan`` (``step_plan``), prepared by ``pipeline.plan`` (settings, questions, the VAD that
marks each clip's end of speech, the run's identity), with the load profile entered into that identity,
and runs into DIR/steps/<N>/ (traces/ and bench.csv, as every run's). Its figures are then read back from
its trace file with the project's reader, judged (``verdict``) and appended to DIR/capacity.json and
DIR/steps.csv before the next step starts.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.analysis.read import read_traces
from pipeline.analysis.row_sink import RowSink
from pipeline.analysis.traces import trace_files
from pipeline.capacity import step_verdict
from pipeline.capacity.probe import ServerProbe
from pipeline.capacity.profile import LoadProfile, ProfileError
from pipeline.capacity.ramp_plan import RampPlan
from pipeline.capacity.users import Users
from pipeline.clock import run_on_clock
from pipeline.plan.prepare import Prepared, make_run, prepare
from pipeline.plan.run_plan import DeviceOptions, RunPlan
from pipeline.records import ramp_result as result
from pipeline.records.ramp_result import Capacity, MachineSpeed, Step
from pipeline.records.turn_row import TurnRow
from pipeline.records.whole_lines import RecordWriteError
from pipeline.run.session import Run, TraceSink
from pipeline.settings.audio import BadAudio, load_audio
from pipeline.settings.config import public_url
from pipeline.settings.fixtures import FixtureError, QuestionSet, load_questions
from pipeline.tracing.export import SERVICE, Tracing
from pipeline.transport.device.link import DeviceError
from pipeline.transport.device.pacer import SendLateness, send_lateness

Say = Callable[[str], None]
# a step's devices run elsewhere (``capacity.workers.RayFleet``): (run, tracing, sink, probe, arrival offsets in ms)
# -> (the hold in s, the fleet's send lateness in ms)
Spread = Callable[[Run, Tracing, TraceSink, ServerProbe, list[float]], tuple[float, np.ndarray]]
# what watches a step while it holds, from the last device's arrival (a soak's windows): (its rows so far, the
# server's probe, the generator's lateness record) -> the lateness it took from that record, in ms
Watch = Callable[[RowSink, ServerProbe, SendLateness], Coroutine[Any, Any, list[np.ndarray]]]


def _say_nothing(_message: str) -> None:
    """A step's rows are counted by the ramp, not said one by one."""


class RampError(RuntimeError):
    """What stops a ramp before its verdict: an unreachable server, a step that could not start or served nothing."""


@dataclass(frozen=True, slots=True)
class Target:
    """The server and how a device reaches it, as ``pipeline.replay --server`` is given it."""

    url: str
    fixtures: Path
    configs: tuple[Path, ...] = ()
    token_env: str = "XIAOZHI_TOKEN"
    mqtt_signature_key_env: str = "MQTT_SIGNATURE_KEY"
    protocol_version: int = 1
    language: str = ""
    turn_timeout_s: float | None = None
    server_pid: int | None = None
    server_traces: Path | None = None  # the lab's server's trace folder: each device turn's silence split (wire)

    @property
    def transport(self) -> str:
        for wire in ("twilio", "pipecat"):  # a call to a voice bot, on that bot's wire
            if self.url.startswith((f"{wire}+ws://", f"{wire}+wss://")):
                return wire
        return "websocket" if self.url.startswith(("ws://", "wss://")) else "mqtt+udp"


def step_plan(target: Target, profile: LoadProfile, devices: int, folder: Path, run_id: str) -> RunPlan:
    """The step's run as the plan ``pipeline.replay FIXTURES --server URL --devices N`` makes: the profile's
    arrivals, listening mode and questions, the target's settings and device options, into ``folder``."""
    fleet = profile.arrival_settings(devices)
    arrivals: dict[str, Any] = {"devices": devices, "arrival": fleet["arrival"]}
    arrivals.update({key: float(fleet[key]) for key in ("gap_ms", "rate_per_s") if key in fleet})
    run: dict[str, Any] = {"limit": profile.limit}
    if target.turn_timeout_s is not None:
        run["turn_timeout_s"] = float(target.turn_timeout_s)
    device = DeviceOptions(
        server=target.url,
        token_env=target.token_env,
        mqtt_signature_key_env=target.mqtt_signature_key_env,
        protocol_version=target.protocol_version,
        listen_mode=profile.listen_mode,
    )
    sections = {"run": run, "fleet": arrivals}
    return RunPlan(
        target.fixtures, run_id, target.configs, sections, target.language, folder, device=device, quiet=True
    )


def prepare_step(
    target: Target, profile: LoadProfile, devices: int, folder: Path, run_id: str, env: Mapping[str, str]
) -> Prepared:
    """The step's run, prepared as the replay prepares one; its question set narrowed to the profile's ids,
    the profile and the poisson seed entered in its identity."""
    p = prepare(step_plan(target, profile, devices, folder, run_id), env)
    cfg = dataclasses.replace(p.cfg, fleet=dataclasses.replace(p.cfg.fleet, seed=profile.seed))
    questions = select(p.questions, profile)
    p.engines.identity["load_profile"] = profile.identity()
    return dataclasses.replace(p, cfg=cfg, questions=questions)


def select(questions: QuestionSet, profile: LoadProfile) -> QuestionSet:
    """The profile's questions: only ``ids`` when it names some (each must exist)."""
    if not profile.ids:
        return questions
    known = {q.id for q in questions.questions}
    missing = [i for i in profile.ids if i not in known]
    if missing:
        raise ProfileError(f"[load] ids: {', '.join(missing)} not in {questions.folder}")
    chosen = tuple(q for q in questions.questions if q.id in set(profile.ids))
    return dataclasses.replace(questions, questions=chosen)


@dataclass
class Ramp:
    """A whole ramp; ``run`` measures step after step into ``out`` and returns what it found."""

    target: Target
    profile: LoadProfile
    plan: RampPlan
    out: Path
    env: Mapping[str, str]
    say: Say = print
    ramp_id: str = ""
    spread: Spread | None = None  # None: every step's devices in this process
    watch: Watch | None = None  # a soak's windows (in this process only)
    speed: Callable[[], MachineSpeed | None] | None = None  # the machine's speed before each step (None: not measured)

    def __post_init__(self) -> None:
        self.base_rows: list[TurnRow] = []  # the first step's, for the segments (with the server's traces)
        self.ramp_id = self.ramp_id or time.strftime("%Y%m%d-%H%M%S")
        self.found = Capacity(
            server=public_url(self.target.url),
            transport=self.target.transport,
            fixtures=str(self.target.fixtures),
            profile=self.profile.as_dict(),
            steps_planned=list(self.plan.steps),
            hold_s=self.plan.hold_s,
            max_hold_s=self.plan.max_hold_s,
            margin_pct=self.plan.margin_pct,
            margin_floor_ms=self.plan.margin_floor_ms,
            min_turns=self.plan.min_turns,
        )

    def check(self) -> None:
        """What can be refused before any device starts: the fixtures, the profile's ids, a hold shorter than a turn."""
        try:
            questions = select(load_questions(self.target.fixtures, self.target.language), self.profile)
        except FixtureError as exc:
            raise RampError(str(exc)) from None
        chosen = questions.questions[: self.profile.limit or None]
        if not chosen:
            raise RampError(f"{self.target.fixtures}: no question to ask")
        lengths = []
        for q in chosen:
            with contextlib.suppress(BadAudio):  # a clip that cannot be read is a failed turn of the run, as always
                lengths.append(load_audio(q.audio).duration_ms / 1000)
        if lengths:
            self.plan.check_turn_fits(max(lengths))

    def stop(self, why: str) -> None:
        """The ramp ends early: why, with every step measured so far, written."""
        self.found.stopped = why
        self.conclude()
        result.write(self.out, self.found)

    def run(self) -> Capacity:
        """Every step until one fails (or is void); raises ``RampError`` after writing what was measured."""
        result.write(self.out, self.found)
        for n in self.plan.steps:
            step = self.step(n)
            self.found.steps.append(step)
            self.conclude()
            result.write(self.out, self.found)
            self.say(step_line(step))
            if len(self.found.steps) == 1 and step.turns and sum(step.failures.values()) == step.turns:
                self.stop(f"the first step answered no turn: {step.reason}")
                raise RampError(f"{step.devices} device(s): no turn was answered ({step.reason})")
            stop = step_verdict.ends_ramp(step, first=len(self.found.steps) == 1)
            if stop:
                self.found.stopped = stop
                break
        else:
            self.found.stopped = "every planned step was measured"
        self.stop(self.found.stopped)
        return self.found

    def conclude(self) -> None:
        self.found.knee, self.found.none_failed = step_verdict.knee(self.found.steps)
        self.found.devices_held = self.found.knee

    def step(self, n: int) -> Step:
        folder = self.out / "steps" / str(n)
        run_id = f"{self.ramp_id}-{n}d"
        try:
            p = prepare_step(self.target, self.profile, n, folder, run_id, self.env)
        except ProfileError:
            raise
        except Exception as exc:
            raise RampError(f"step of {n} device(s) could not start: {exc}") from None
        run = make_run(run_id, p, self.env)
        trace_path = folder / "traces" / f"{run_id}.jsonl"
        tracing = Tracing(trace_path, self.env.get("OTEL_SERVICE_NAME", SERVICE), p.otlp)
        sink = RowSink(p.bench, 0, _say_nothing)
        users = Users(run, self.profile, tracing, sink, self.plan.hold_s, self.plan.max_hold_s, self.plan.min_turns)
        probe = ServerProbe(self.target.server_pid)
        machine = None if self.speed is None else self.speed()  # before its devices start: the machine unloaded
        try:
            if self.spread is not None:
                held_s, late = self.spread(run, tracing, sink, probe, users.offsets_ms())
            else:
                held_s, late = run_on_clock(self._hold(users, probe, sink), run.clock)
        except RecordWriteError as exc:  # the trace folder's disk is full: what was written stands
            raise RampError(f"step of {n} device(s) stopped: {exc}") from None
        except OSError as exc:  # too many open files, no port left: the fleet itself could not start
            raise RampError(f"step of {n} device(s) could not start its devices: {exc}") from None
        finally:
            tracing.shutdown()
            p.engines.close()
        rows = self.rows(trace_path, run_id)
        fig = step_verdict.figures(rows, name=f"{self.ramp_id}|{n}")
        self.segments(n, rows)
        p50, p99 = step_verdict.lateness(late)
        kind, reason = step_verdict.judge(fig, p99, step_verdict.baseline_p90(self.found.steps), self.plan)
        return Step(
            devices=n,
            run_id=run_id,
            config_id=run.config_id,
            folder=str(folder.relative_to(self.out)),
            turns=fig.turns,
            failures=fig.failures,
            silence_ms=fig.silence_ms,
            whole_turn_p50_ms=fig.whole_turn_p50_ms,
            whole_turn_p90_ms=fig.whole_turn_p90_ms,
            held_s=round(held_s, 3),
            lateness_p50_ms=p50,
            lateness_p99_ms=p99,
            lateness_sends=len(late),
            server_cpu_pct=probe.cpu_pct,
            server_rss_mb=probe.rss_max_mb,
            verdict=kind,
            reason=reason,
            machine=machine,
        )

    def rows(self, trace_path: Path, run_id: str) -> list[TurnRow]:
        """The step's rows from its traces; with the server's traces beside them, each silence split on the wire."""
        files = [trace_path]
        if self.target.server_traces is not None:
            files += trace_files(self.target.server_traces)
        return [r for r in read_traces(files, workers=1).rows if r.run_id == run_id]

    def segments(self, n: int, rows: list[TurnRow]) -> None:
        """Which segment of the silence grew first against the first step (only with the server's traces)."""
        if self.target.server_traces is None or self.found.grew_first:
            return
        if not self.base_rows:
            self.base_rows = rows
            return
        grew = step_verdict.grown(self.base_rows, rows, f"{self.ramp_id}|{n}")
        if grew:
            self.found.grew_first = f"{grew[0]} at {n} device(s)"

    async def _hold(self, users: Users, probe: ServerProbe, sink: RowSink) -> tuple[float, np.ndarray]:
        record = send_lateness()
        record.take()  # what an earlier step's loop left is not this step's
        watching: list[asyncio.Task[list[np.ndarray]]] = []

        def arrived() -> None:
            probe.start()
            if self.watch is not None:
                watching.append(asyncio.create_task(self.watch(sink, probe, record)))

        try:
            window = await users.run_step(arrived=arrived)
        finally:
            taken = await _stopped(watching)
            await probe.stop()
        return window.held_s, np.concatenate([*taken, record.take()])


async def _stopped(watching: list[asyncio.Task[list[np.ndarray]]]) -> list[np.ndarray]:
    """What the step's watcher took of the lateness record, once it is stopped (it ends the step's last window)."""
    if not watching:
        return []
    watching[0].cancel()
    with contextlib.suppress(asyncio.CancelledError):
        return await watching[0]
    return []


def reachable(target: Target, env: Mapping[str, str]) -> None:
    """One device says hello and leaves: an unreachable or refusing server is said before any step starts.

    It waits for the server's MCP exchange as every device does (``mcp_wait_s``): an MQTT device that left
    in the middle of it was seen never to finish closing, so the whole check also has a time limit."""
    from pipeline.clock import RealClock
    from pipeline.transport.device.device_settings import DeviceSettings
    from pipeline.transport.device.devices import device_for

    settings = DeviceSettings(
        url=target.url,
        token=env.get(target.token_env, ""),
        mqtt_signature_key=env.get(target.mqtt_signature_key_env, ""),
        protocol_version=target.protocol_version,
    )
    limit_s = settings.connect_timeout_s + settings.mcp_wait_s + 5

    async def hello() -> None:
        async with asyncio.timeout(limit_s), device_for(settings, RealClock()):
            pass

    try:
        run_on_clock(hello(), RealClock())
    except (DeviceError, ValueError) as exc:
        raise RampError(f"server {public_url(target.url)} unreachable: {exc}") from None
    except TimeoutError:
        raise RampError(
            f"server {public_url(target.url)}: a device's hello and goodbye took over {limit_s:g} s"
        ) from None


def step_line(s: Step) -> str:
    q = s.silence_ms
    ms = "/".join("-" if v is None else f"{v:.0f}" for v in (q.p50, q.p90, q.p99))
    failed = sum(s.failures.values())
    late = "not measured" if s.lateness_p99_ms is None else f"{s.lateness_p99_ms:.1f} ms"
    cpu = "" if s.server_cpu_pct is None else f", server CPU {s.server_cpu_pct:.0f} %"
    return (
        f"{s.devices:>5} device(s): {s.verdict:<7} silence P50/P90/P99 {ms} ms, {s.turns} turn(s), "
        f"{failed} failed, generator lateness P99 {late}{cpu}; {s.reason}"
    )
