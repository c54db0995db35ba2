"""``python -m pipeline.replay DIR``: replay recorded questions through the voice pipeline.

Reads DIR's manifest and audio, runs rounds of turns (the first a warm-up),
writes ``<out>/traces/<run_id>.jsonl`` and appends rows to ``<out>/bench.csv``,
and ends with a summary table. Its command line and the environment it reads
(OTEL_EXPORTER_OTLP_* and OTEL_SERVICE_NAME for export over the wire) are parsed by
``pipeline.cli``, which the other entry points share.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from pipeline.analysis.bench_csv import BenchCsv, BenchCsvError
from pipeline.analysis.sink import RowSink
from pipeline.analysis.summary import summary_table
from pipeline.cli import (
    RunExists,
    model_cache,
    new_run_id,
    otlp_from_env,
    overrides,
    parse_replay_args,
    quiet_native_telemetry,
    refuse_existing_run,
    say_nothing,
    say_on_stderr,
)
from pipeline.clock import Clock, RealClock, VirtualClock, run_on_clock
from pipeline.endpoints.link.profiles import get_profile
from pipeline.fleet.arrivals import lockstep_warning
from pipeline.offline import guard
from pipeline.run.assembly import Engines, SetupError, check_languages, load_engines
from pipeline.run.gate import OPEN, GateClosed, StdioGate
from pipeline.run.session import Run, run_session
from pipeline.run.workers import WorkerSpec, run_on_ray
from pipeline.settings.config import Config, ConfigError, load_config
from pipeline.settings.fixtures import FixtureError, QuestionSet, load_questions
from pipeline.settings.models import ModelError
from pipeline.tracing.export import OtlpSettings, Tracing
from pipeline.transport.device.device import DeviceError, DeviceSettings, EmulatedDevice
from pipeline.transport.device.recording import RecordTo
from pipeline.transport.device.settings import SoundOutputs
from stages.registry import ROLES


def device_id(index: int) -> str:
    """Device ``index``'s MAC-like id (a server keys its sessions, and MQTT its topics, by it)."""
    return f"02:00:00:00:{(index + 1) >> 8 & 0xFF:02x}:{(index + 1) & 0xFF:02x}"


SERVICE = "voice-latency-lab"  # the OTLP service name unless OTEL_SERVICE_NAME says another
DEVICE_CHOICES = ("jitter_frames", "uplink_encoder", "listen_mode")  # entered in config_id when not the firmware's


def device_of(args: argparse.Namespace, cfg: Config, env: Mapping[str, str], clock: Clock) -> DeviceSettings | None:
    """With ``--server``: this run's devices are devices of that server, over the xiaozhi protocol."""
    if not args.server:
        if args.speaker or args.voice:
            raise ValueError("--speaker and --voice are a device's: they need --server")
        return None
    if not args.server.startswith(("ws://", "wss://", "mqtt://", "http://", "https://")):
        raise ValueError(f"--server {args.server!r}: a ws://, wss://, mqtt:// or http(s):// OTA URL is expected")
    if clock.kind != "real":
        raise ValueError("--server needs the real clock: the server runs in real time")
    if args.jitter_frames < 0:
        raise ValueError(f"--jitter-frames {args.jitter_frames}: 0 or more")
    settings = DeviceSettings(
        url=args.server,
        token=env.get(args.token_env, ""),
        mqtt_signature_key=env.get(args.mqtt_signature_key_env, "") if args.mqtt_signature_key_env else "",
        protocol_version=args.protocol_version,
        listen_mode=args.listen_mode,
        turn_timeout_s=cfg.run.turn_timeout_s,
        barge_in_after_ms=args.barge_in_after,
        barge_in_with=args.barge_in_with,
        jitter_frames=args.jitter_frames,
        encoder_preset=args.uplink_encoder,
        profile=get_profile(args.link_profile) if args.link_profile else None,
        sound=SoundOutputs(speaker=args.speaker, voice=args.voice),
    )
    return settings


def fleet_warnings(cfg: Config, questions: int, remote: bool) -> list[str]:
    """What a many-device run should know before it starts (said once, never fatal)."""
    out = []
    lockstep = lockstep_warning(cfg.fleet.devices, questions)
    if lockstep:
        out.append(lockstep)
    if remote and (cfg.scheduler.concurrency or cfg.background.job != "none"):
        out.append(
            "[scheduler] and [background] act where the model is: give them to pipeline.serve's --config; "
            "this device run ignores them"
        )
    if cfg.fleet.devices > 1 and not remote and cfg.scheduler.concurrency == 0:
        out.append(
            f"{cfg.fleet.devices} devices share the model with no scheduler in front of it: their waits for it "
            "are inside first token, not measured as queue; set [scheduler] concurrency (--concurrency 1)"
        )
    return out


def _device_factory(
    settings: DeviceSettings, clock: Clock, run_id: str, record: Path | None
) -> Callable[[int], EmulatedDevice]:
    def device(index: int) -> EmulatedDevice:
        to = RecordTo(record, str(index), run_id) if record is not None else None
        return EmulatedDevice(dataclasses.replace(settings, device_id=device_id(index)), clock, to)

    return device


def make_clock(cfg: Config) -> Clock:
    return VirtualClock() if cfg.run.clock == "virtual" else RealClock()


@dataclass(frozen=True, slots=True)
class Prepared:
    """What a run needs, all checked before its first turn."""

    cfg: Config
    questions: QuestionSet
    clock: Clock
    remote: DeviceSettings | None
    record: Path | None  # --record-audio: the devices' recordings go here
    roles: tuple[str, ...]
    engines: Engines
    bench: BenchCsv
    otlp: OtlpSettings | None


def prepare(args: argparse.Namespace, env: Mapping[str, str], run_id: str) -> Prepared:
    """Settings, questions and engines for the run; raises what ``main`` reports as a refusal."""
    refuse_existing_run(args.out, run_id, args.append)
    cfg = load_config(args.config, overrides(args))
    questions = load_questions(args.fixtures, args.language)
    otlp = otlp_from_env(env)
    clock = make_clock(cfg)
    remote = device_of(args, cfg, env, clock)
    if args.record_audio is not None and remote is None:
        raise ValueError("--record-audio records emulated devices: it needs --server")
    if remote is None:
        check_languages(cfg, questions.questions[: cfg.run.limit or None])
    check_workers(args.workers, cfg, clock)
    if args.turn_gate and (args.workers or cfg.fleet.devices > 1):
        raise ValueError("--turn-gate takes one turn at a time: it needs one device in this process (no --workers)")
    quiet_native_telemetry(env)
    roles = ("vad",) if remote else ROLES  # a device needs only the VAD that finds where speech ends
    engines = load_engines(cfg, model_cache(args, env), env, roles)
    try:
        if remote is not None:
            identify_device(engines, remote, clock)
        bench = BenchCsv(args.out / "bench.csv")
    except BaseException:
        engines.close()  # a llama-server already started must not outlive a refused run
        raise
    return Prepared(cfg, questions, clock, remote, args.record_audio, tuple(roles), engines, bench, otlp)


def check_workers(workers: int | None, cfg: Config, clock: Clock) -> None:
    if workers is not None and not 1 <= workers <= cfg.fleet.devices:
        raise ValueError(f"--workers {workers}: between 1 and the number of devices ({cfg.fleet.devices})")
    if workers and clock.kind != "real":
        raise ValueError("--workers needs the real clock: each worker runs in real time")


def identify_device(engines: Engines, remote: DeviceSettings, clock: Clock) -> None:
    """Enter how this device run differs into the run's identity (M11) and its rows' llm_endpoint."""
    engines.endpoint, engines.identity["server"] = EmulatedDevice(remote, clock).label, remote.url
    if remote.profile is not None:  # the link changes every latency the device sees (M11)
        engines.identity["link_profile"] = json.dumps(remote.profile.as_dict(), sort_keys=True)
    if remote.barge_in_after_ms is not None:  # an interrupted answer is another experiment
        engines.identity["barge_in"] = f"{remote.barge_in_with} after {remote.barge_in_after_ms} ms"
    # the device's differences from the firmware, and its listening mode (DEVICE_CHOICES)
    for key, value, usual in (
        ("jitter_frames", remote.jitter_frames, 0),
        ("uplink_encoder", remote.encoder_preset, "firmware"),
        ("listen_mode", remote.listen_mode, "auto"),
    ):
        if value != usual:
            engines.identity[key] = str(value)
    named = [
        f"{k.replace('_', ' ')} {engines.identity[k]}" for k in ("barge_in", *DEVICE_CHOICES) if k in engines.identity
    ]
    if named:  # the row's llm_endpoint, which the report shows, says how this device differs
        engines.endpoint += "; " + ", ".join(named)


def run_warnings(p: Prepared, api_key: str | None) -> list[str]:
    """What the user should know before the run starts (said once, never fatal)."""
    selected = len(p.questions.questions[: p.cfg.run.limit or None])
    out = [*p.questions.warnings, *fleet_warnings(p.cfg, selected, p.remote is not None)]
    if p.cfg.llm.impl == "openai" and p.cfg.cloud.api_key_env and not api_key:
        out.append(f"{p.cfg.cloud.api_key_env} is not set: every turn will be ok=0, error=LlmMissingApiKey")
    return out


def run_on_workers(
    run: Run, p: Prepared, args: argparse.Namespace, env: Mapping[str, str], tracing: Tracing, sink: RowSink
) -> None:
    p.engines.close()  # each worker loads its own; the driver needed them for the run's identity only
    spec = WorkerSpec(
        run.run_id,
        run.config,
        run.config_id,
        run.questions,
        model_cache(args, env),
        (),
        p.engines.endpoint,
        dict(p.engines.identity),
        env.get("OTEL_SERVICE_NAME", SERVICE),
        p.otlp,
        run.remote,
        p.roles,
        run.api_key,
    )
    run_on_ray(spec, args.workers, tracing, sink, say_on_stderr, args.ray_address)


def make_run(run_id: str, p: Prepared, env: Mapping[str, str], gated: bool = False) -> Run:
    """The run: its identity from the settings, the questions and the engines; its devices when remote;
    ``gated``: its turns wait to be told (``--turn-gate``)."""
    cfg = p.cfg
    api_key = env.get(cfg.cloud.api_key_env) if cfg.cloud.api_key_env else None
    devices = None if p.remote is None else _device_factory(p.remote, p.clock, run_id, p.record)
    config_id = cfg.config_id(p.questions.digest(), p.engines.identity)
    turns = cfg.run.rounds * len(p.questions.questions[: cfg.run.limit or None])
    gate = StdioGate(turns) if gated else OPEN
    return Run(run_id, cfg, config_id, p.questions, p.clock, p.engines, api_key, devices, gate=gate)


def announcement(run: Run) -> str:
    """The run's first line: what it is and how big."""
    cfg = run.config
    return (
        f"run {run.run_id}: condition {cfg.run.condition}, config {run.config_id}, {len(run.selected())} question(s) "
        f"x {cfg.run.rounds} round(s) x {cfg.fleet.devices} device(s), LLM mode {cfg.llm.mode}, "
        f"pacing {cfg.run.pacing}, clock {run.clock.kind}"
    )


def print_outcome(sink: RowSink, trace_path: Path, tracing: Tracing) -> None:
    print(summary_table(sink.rows))
    print(f"traces: {trace_path}")
    print(f"rows:   {sink.bench.path}")
    if tracing.otlp is not None:
        print(f"otlp:   {tracing.otlp.sent} span(s) sent to {tracing.otlp_endpoint}, {tracing.otlp.failed} failed")


def main(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    args = parse_replay_args(argv)
    env = os.environ if env is None else env
    if args.net_audit:
        guard.install(args.net_audit)  # first, so attempts made while loading models are seen too
    say = say_nothing if args.quiet else say_on_stderr
    run_id = args.run_id or new_run_id()
    try:
        p = prepare(args, env, run_id)
    except (ConfigError, FixtureError, BenchCsvError, ModelError, SetupError, RunExists, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    run = make_run(run_id, p, env, args.turn_gate)
    for warning in run_warnings(p, run.api_key):
        print(f"warning: {warning}", file=sys.stderr)
    trace_path = args.out / "traces" / f"{run_id}.jsonl"
    tracing = Tracing(trace_path, env.get("OTEL_SERVICE_NAME", SERVICE), p.otlp)
    say(announcement(run))
    cfg = run.config
    sink = RowSink(p.bench, cfg.run.rounds * len(run.selected()) * cfg.fleet.devices, say)
    try:
        if args.workers:
            run_on_workers(run, p, args, env, tracing, sink)
        else:
            run_on_clock(run_session(run, tracing, sink, say), run.clock)
    except (DeviceError, GateClosed) as exc:  # the turns finished before it stay written
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        tracing.shutdown()
        p.engines.close()
    print_outcome(sink, trace_path, tracing)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
