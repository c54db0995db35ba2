"""``python -m pipeline.replay DIR``: replay recorded questions through the voice pipeline.

Reads DIR's manifest and audio, runs rounds of turns (the first a warm-up),
writes ``<out>/traces/<run_id>.jsonl`` and appends rows to ``<out>/bench.csv``,
and ends with a summary table. Only this module reads the command line and the
environment (OTEL_EXPORTER_OTLP_* and OTEL_SERVICE_NAME for export over the wire).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import secrets
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pipeline.analysis.bench_csv import BenchCsv, BenchCsvError, bench_run_ids
from pipeline.analysis.sink import RowSink
from pipeline.analysis.summary import summary_table
from pipeline.clock import Clock, RealClock, VirtualClock, run_on_clock
from pipeline.endpoints.link.profiles import get_profile
from pipeline.fleet.arrivals import lockstep_warning
from pipeline.offline import guard
from pipeline.run.assembly import Engines, SetupError, check_languages, load_engines
from pipeline.run.session import Run, run_session
from pipeline.run.workers import WorkerSpec, run_on_ray
from pipeline.settings.config import Config, ConfigError, load_config
from pipeline.settings.fixtures import FixtureError, load_questions
from pipeline.settings.models import ModelError, default_cache
from pipeline.tracing.export import OtlpSettings, Tracing
from pipeline.transport.codec import PRESETS
from pipeline.transport.emulator import BARGE_IN_WAYS, DeviceError, DeviceSettings, EmulatedDevice
from stages.registry import ROLES


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m pipeline.replay", description=__doc__.splitlines()[0])
    p.add_argument("fixtures", type=Path, help="folder with manifest.csv and WAV files")
    p.add_argument(
        "--config", type=Path, action="append", help="TOML settings (repeatable: later files override earlier ones)"
    )
    p.add_argument("--condition", help="condition label, e.g. A, B or B'")
    p.add_argument("--language", default="", help="language of questions that name none (default: the ASR detects it)")
    p.add_argument("--rounds", type=int, help="rounds over the question set (the first is a warm-up)")
    p.add_argument("--limit", type=int, help="use only the first N questions (0 = all)")
    p.add_argument("--mode", choices=("single", "per-sentence"), help="LLM call mode")
    p.add_argument("--fast", action="store_true", help="send audio as fast as possible instead of in real time")
    p.add_argument("--clock", choices=("real", "virtual"), help="virtual: simulate time (scripted stages only)")
    p.add_argument("--timeout", type=float, help="turn time limit in seconds")
    p.add_argument("--out", type=Path, default=Path("."), help="output folder (traces/ and bench.csv go here)")
    p.add_argument("--run-id", help="run identifier (default: time and random suffix)")
    p.add_argument("--append", action="store_true", help="add turns to a run id that --out already holds")
    p.add_argument("--quiet", action="store_true", help="no per-turn progress lines")
    p.add_argument("--net-audit", type=Path, help="record Python-level attempts to leave loopback here (JSON lines)")
    p.add_argument("--model-cache", type=Path, help="where packaged models are assembled (default: ~/.cache/...)")
    fleet = p.add_argument_group("many devices on one pipeline")
    fleet.add_argument("--devices", type=int, help="concurrent devices, each with its own session and question order")
    fleet.add_argument("--arrival", choices=("together", "staggered", "poisson"), help="when the devices start")
    fleet.add_argument("--gap-ms", type=float, help="staggered: ms between device starts")
    fleet.add_argument("--rate", type=float, help="poisson: device arrivals per second on average")
    fleet.add_argument("--concurrency", type=int, help="[scheduler] calls the shared model runs at once (0 = none)")
    fleet.add_argument("--workers", type=int, help="run the devices on this many Ray workers (a local Ray by default)")
    fleet.add_argument("--ray-address", help="join this Ray cluster instead: auto, or ray://HEAD:10001")
    fleet.add_argument(
        "--background", choices=("none", "summarise", "vision"), help="background jobs competing for the model"
    )
    p.add_argument(
        "--temp-command", metavar="CMD", help="shell command printing the temperature in °C (default: sysfs sensors)"
    )
    device = p.add_argument_group("as a device of a xiaozhi server (audio always at real-time pace)")
    device.add_argument(
        "--server",
        help="the server: ws://HOST:PORT/xiaozhi/v1/ (WebSocket); mqtt://HOST:PORT[/TOPIC][?group=GID] (MQTT + UDP "
        "as to the xiaozhi MQTT gateway: client id GID@@@MAC@@@UUID, password signed with the key in "
        "--mqtt-signature-key-env, publishes to TOPIC, default device-server); or an OTA URL "
        "http://HOST:PORT/xiaozhi/ota/, asked as a device asks at boot, whose answer's mqtt section says all that",
    )
    device.add_argument("--token-env", default="XIAOZHI_TOKEN", help="environment variable with the bearer token")
    device.add_argument(
        "--mqtt-signature-key-env",
        default="MQTT_SIGNATURE_KEY",
        help="environment variable with the MQTT gateway's signature key, for an mqtt:// --server (the gateway's "
        "own name by default; unset: an unsigned password, which a gateway without a key accepts)",
    )
    device.add_argument("--protocol-version", type=int, choices=(1, 2, 3), default=1, help="binary audio framing")
    device.add_argument(
        "--listen-mode",
        choices=("auto", "manual", "realtime"),
        default="auto",
        help="who ends the user's turn (realtime: one listen start, the microphone always on)",
    )
    device.add_argument(
        "--jitter-frames",
        type=int,
        default=0,
        metavar="N",
        help="frames the device holds before an answer starts playing (the firmware: 0)",
    )
    device.add_argument(
        "--uplink-encoder",
        choices=tuple(PRESETS),
        default="firmware",
        help="the device's Opus encoder preset (the firmware's: application audio, complexity 0, DTX)",
    )
    device.add_argument("--link-profile", help="a network profile between device and server (lan, internet, ...)")
    device.add_argument(
        "--barge-in-after", type=int, metavar="MS", help="interrupt each answer once it has sounded MS ms"
    )
    device.add_argument(
        "--barge-in-with",
        choices=BARGE_IN_WAYS,
        default="wake",
        help="wake: wake word (abort, the buffer plays out, then listen start); button: abort, buffer dropped, "
        "listen start at once; speech: the user starts the next question mid-answer",
    )
    return p.parse_args(argv)


def overrides(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    run: dict[str, Any] = {}
    for name, key in (
        ("condition", "condition"),
        ("rounds", "rounds"),
        ("limit", "limit"),
        ("clock", "clock"),
        ("timeout", "turn_timeout_s"),
    ):
        if getattr(args, name) is not None:
            run[key] = getattr(args, name)
    if args.fast:
        run["pacing"] = "fast"
    out: dict[str, dict[str, Any]] = {"run": run}
    if args.mode:
        out["llm"] = {"mode": args.mode}
    if args.temp_command is not None:
        out["probe"] = {"temp_command": args.temp_command}
    sections = {
        "fleet": (("devices", "devices"), ("arrival", "arrival"), ("gap_ms", "gap_ms"), ("rate", "rate_per_s")),
        "scheduler": (("concurrency", "concurrency"),),
        "background": (("background", "job"),),
    }
    for section, keys in sections.items():
        given = {key: getattr(args, name) for name, key in keys if getattr(args, name) is not None}
        if given:
            out[section] = given
    return out


def otlp_from_env(env: Mapping[str, str]) -> OtlpSettings | None:
    """OTLP settings from the standard OTEL_* variables, or None when none is set."""
    protocol = (
        env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get("OTEL_EXPORTER_OTLP_PROTOCOL") or "http/protobuf"
    )
    traces = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    base = env.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    if not traces and not base:
        return None
    if protocol not in ("http/protobuf", "grpc"):
        raise ValueError(f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol!r}: this tool exports http/protobuf or grpc")
    if traces:
        endpoint = traces
    elif protocol == "grpc":
        endpoint = base or ""
    else:
        endpoint = (base or "").rstrip("/") + "/v1/traces"
    timeout = float(env.get("OTEL_EXPORTER_OTLP_TIMEOUT", "2000")) / 1000
    return OtlpSettings(endpoint=endpoint, protocol=protocol, timeout_s=min(timeout, 10.0))


class RunExists(ValueError):
    """The output folder already holds this run id; appending would merge two runs silently."""


def refuse_existing_run(out: Path, run_id: str, append: bool) -> None:
    trace = out / "traces" / f"{run_id}.jsonl"
    found = trace.is_file() or run_id in bench_run_ids(out / "bench.csv")
    if found and not append:
        raise RunExists(
            f"{out} already holds run {run_id!r} ({trace if trace.is_file() else out / 'bench.csv'}): "
            "give another --run-id (or none for a fresh one), another --out, or --append to add turns to it"
        )


def device_id(index: int) -> str:
    """Device ``index``'s MAC-like id (a server keys its sessions, and MQTT its topics, by it)."""
    return f"02:00:00:00:{(index + 1) >> 8 & 0xFF:02x}:{(index + 1) & 0xFF:02x}"


DEVICE_CHOICES = ("jitter_frames", "uplink_encoder", "listen_mode")  # entered in config_id when not the firmware's


def device_of(args: argparse.Namespace, cfg: Config, env: Mapping[str, str], clock: Clock) -> DeviceSettings | None:
    """With ``--server``: this run's devices are devices of that server, over the xiaozhi protocol."""
    if not args.server:
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


def _device_factory(settings: DeviceSettings, clock: Clock) -> Callable[[int], EmulatedDevice]:
    def device(index: int) -> EmulatedDevice:
        return EmulatedDevice(dataclasses.replace(settings, device_id=device_id(index)), clock)

    return device


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(2)


def model_cache(args: argparse.Namespace, env: Mapping[str, str]) -> Path:
    return Path(args.model_cache) if args.model_cache else default_cache(env)


def quiet_native_telemetry(env: Mapping[str, str]) -> None:
    """onnxruntime looks up telemetry hosts ~9 s after import unless told not to (STACK.md).

    A voice pipeline that claims to run offline must not phone home, so telemetry is
    off unless the user explicitly set the variable (ORT_DISABLE_TELEMETRY=0 turns it on).
    """
    os.environ["ORT_DISABLE_TELEMETRY"] = env.get("ORT_DISABLE_TELEMETRY", "1")


def make_clock(cfg: Config) -> Clock:
    return VirtualClock() if cfg.run.clock == "virtual" else RealClock()


def _quiet(_message: str) -> None:
    pass


def _to_stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def main(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    args = parse_args(argv)
    env = os.environ if env is None else env
    if args.net_audit:
        guard.install(args.net_audit)  # first, so attempts made while loading models are seen too
    say = _quiet if args.quiet else _to_stderr
    engines: Engines | None = None
    run_id = args.run_id or new_run_id()
    try:
        refuse_existing_run(args.out, run_id, args.append)
        cfg = load_config(args.config, overrides(args))
        questions = load_questions(args.fixtures, args.language)
        otlp = otlp_from_env(env)
        clock = make_clock(cfg)
        remote = device_of(args, cfg, env, clock)
        if remote is None:
            check_languages(cfg, questions.questions[: cfg.run.limit or None])
        quiet_native_telemetry(env)
        roles = ("vad",) if remote else ROLES  # a device needs only the VAD that finds where speech ends
        engines = load_engines(cfg, model_cache(args, env), env, roles)
        if remote is not None:
            engines.endpoint, engines.identity["server"] = EmulatedDevice(remote, clock).label, remote.url
            if remote.profile is not None:  # the link changes every latency the device sees (M11)
                engines.identity["link_profile"] = json.dumps(remote.profile.as_dict(), sort_keys=True)
            if remote.barge_in_after_ms is not None:  # an interrupted answer is another experiment
                engines.identity["barge_in"] = f"{remote.barge_in_with} after {remote.barge_in_after_ms} ms"
            for (
                key,
                value,
                usual,
            ) in (  # the device's differences from the firmware, and its listening mode (DEVICE_CHOICES)
                ("jitter_frames", remote.jitter_frames, 0),
                ("uplink_encoder", remote.encoder_preset, "firmware"),
                ("listen_mode", remote.listen_mode, "auto"),
            ):
                if value != usual:
                    engines.identity[key] = str(value)
            named = [
                f"{k.replace('_', ' ')} {engines.identity[k]}"
                for k in ("barge_in", *DEVICE_CHOICES)
                if k in engines.identity
            ]
            if named:  # the row's llm_endpoint, which the report shows, says how this device differs
                engines.endpoint += "; " + ", ".join(named)
        bench = BenchCsv(args.out / "bench.csv")
    except (ConfigError, FixtureError, BenchCsvError, ModelError, SetupError, RunExists, ValueError) as exc:
        if engines is not None:
            engines.close()  # a llama-server already started must not outlive a refused run
        print(f"error: {exc}", file=sys.stderr)
        return 2
    selected = len(questions.questions[: cfg.run.limit or None])
    if args.workers is not None and not 1 <= args.workers <= cfg.fleet.devices:
        print(
            f"error: --workers {args.workers}: between 1 and the number of devices ({cfg.fleet.devices})",
            file=sys.stderr,
        )
        engines.close()
        return 2
    if args.workers and clock.kind != "real":
        print("error: --workers needs the real clock: each worker runs in real time", file=sys.stderr)
        engines.close()
        return 2
    for warning in [*questions.warnings, *fleet_warnings(cfg, selected, remote is not None)]:
        print(f"warning: {warning}", file=sys.stderr)
    config_id = cfg.config_id(questions.digest(), engines.identity)
    api_key = env.get(cfg.cloud.api_key_env) if cfg.cloud.api_key_env else None
    if cfg.llm.impl == "openai" and cfg.cloud.api_key_env and not api_key:
        print(
            f"warning: {cfg.cloud.api_key_env} is not set: every turn will be ok=0, error=LlmMissingApiKey",
            file=sys.stderr,
        )
    devices = None if remote is None else _device_factory(remote, clock)
    run = Run(run_id, cfg, config_id, questions, clock, engines, api_key, devices)
    trace_path = args.out / "traces" / f"{run_id}.jsonl"
    tracing = Tracing(trace_path, env.get("OTEL_SERVICE_NAME", "voice-latency-lab"), otlp)
    say(
        f"run {run_id}: condition {cfg.run.condition}, config {run.config_id}, {len(run.selected())} question(s) x "
        f"{cfg.run.rounds} round(s) x {cfg.fleet.devices} device(s), LLM mode {cfg.llm.mode}, "
        f"pacing {cfg.run.pacing}, clock {clock.kind}"
    )
    sink = RowSink(bench, cfg.run.rounds * len(run.selected()) * cfg.fleet.devices, say)
    try:
        if args.workers:
            engines.close()  # each worker loads its own; the driver needed them for the run's identity only
            spec = WorkerSpec(
                run_id,
                cfg,
                config_id,
                questions,
                model_cache(args, env),
                (),
                engines.endpoint,
                dict(engines.identity),
                env.get("OTEL_SERVICE_NAME", "voice-latency-lab"),
                otlp,
                devices,
                roles,
                api_key,
            )
            run_on_ray(spec, args.workers, tracing, sink, _to_stderr, args.ray_address)
        else:
            run_on_clock(run_session(run, tracing, sink, say), clock)
    except DeviceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        tracing.shutdown()
        engines.close()
    print(summary_table(sink.rows))
    print(f"traces: {trace_path}")
    print(f"rows:   {bench.path}")
    if tracing.otlp is not None:
        print(f"otlp:   {tracing.otlp.sent} span(s) sent to {tracing.otlp_endpoint}, {tracing.otlp.failed} failed")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
