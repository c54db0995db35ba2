"""``python -m pipeline.serve [DIR]``: a xiaozhi WebSocket server with the lab's instrumented pipeline behind it.

Devices (real firmware, or ``python -m pipeline.replay DIR --server ws://...``) connect to
``ws://HOST:PORT/xiaozhi/v1/``; every turn runs the configured stages and is written as the
server's own trace and bench.csv rows under ``--out``. DIR, when given, is a fixtures folder:
a turn whose ``listen`` names one of its questions (our emulator's extra field) gets that
question's reference text, which scripted stages and scoring need. Binds 127.0.0.1 unless told
otherwise; the bearer token, when wanted, comes from an environment variable, never the command line.
With ``--ota-port`` it also serves the OTA endpoint (``http://HOST:PORT/xiaozhi/ota/``) a stock
firmware asks at boot which server to use; the address it and the MQTT hello tell devices is
``--public-host``, which a wildcard ``--host`` (0.0.0.0, ::) cannot stand for. With ``--mqtt-port``
it also is an MQTT server on ``--host`` for MQTT + UDP devices, as the xiaozhi MQTT gateway is
(``pipeline.transport.server.mqtt_front``); their passwords are checked against the signature key in
the environment variable ``--mqtt-signature-key-env`` names, and the OTA answer then offers MQTT.

It serves devices as xiaozhi-esp32-server does unless told otherwise: its end-pointing (the
``xiaozhi-server`` VAD profile, 200 ms of silence, under any ``--config`` that names no other), its
pacing and Opus, its wake-word replies, idle goodbyes and continuous listening
(``transport.server.settings``), and an ASR told its users' language (``--language``, Chinese
unless given; ``auto`` has the ASR detect it). Every such setting enters config_id.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.analysis.row_sink import RowSink
from pipeline.cli import model_cache, quiet_native_telemetry, say_nothing, say_on_stderr
from pipeline.clock import RealClock, run_on_clock
from pipeline.plan.run_folder import RunExists, refuse_existing_run
from pipeline.plan.run_plan import new_run_id
from pipeline.records.bench_csv import BenchCsv, BenchCsvError
from pipeline.records.whole_lines import RecordWriteError
from pipeline.run.assembly import SetupError, load_engines
from pipeline.run.server_run import (
    RecordsUnwritten,
    ServedTurns,
    heard_language,
    refuse_oracle_without_texts,
)
from pipeline.run.session import Run, TraceSink, attach_scheduler, session_attributes
from pipeline.settings.config import ConfigError, load_config
from pipeline.settings.fixtures import AUTO, FixtureError, QuestionSet, load_questions
from pipeline.settings.models import ModelError
from pipeline.tracing import names
from pipeline.tracing.export import Tracing, otlp_from_env
from pipeline.transport.server.front_doors import serve_until_stopped as serve_until_stopped
from pipeline.transport.server.mqtt_front import MqttFrontSettings, refuse_tls_port
from pipeline.transport.server.ota_endpoint import OtaError
from pipeline.transport.server.pacing import PACINGS
from pipeline.transport.server.processes import ORPHAN_CHECK_S, ProcessesShare, parse_process, refusal
from pipeline.transport.server.restart_budget import RestartLimit
from pipeline.transport.server.server_settings import (
    AUTO_LISTENING,
    DUPLICATE_CONNECT,
    DoorSettings,
    FloodSettings,
    SessionSettings,
    describe,
)
from pipeline.transport.server.supervisor import supervise
from pipeline.transport.server.told_address import OtaFront as OtaFront  # as: tests reach both as serve.X
from pipeline.transport.server.told_address import public_host as public_host
from pipeline.transport.server.websocket import WebSocketSettings
from pipeline.transport.wire.opus import PRESETS

# What a server of xiaozhi devices runs under any --config: the real server's end-pointing (a later file
# that names another [vad] impl, or profile = "lab", says otherwise)
SERVE_BASE: dict[str, dict[str, Any]] = {"vad": {"impl": "silero", "profile": "xiaozhi-server"}}
FLOOD, DOOR, SESSION, RESTART = FloodSettings(), DoorSettings(), SessionSettings(), RestartLimit()  # help shows them
DEFAULT_LANGUAGE = "zh"  # xiaozhi devices' users; a deployment names its own (the real server's config does)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m pipeline.serve", description=__doc__.splitlines()[0])
    p.add_argument("fixtures", type=Path, nargs="?", help="fixtures folder whose questions devices may name")
    p.add_argument("--config", type=Path, action="append", help="TOML settings (repeatable)")
    p.add_argument(
        "--language",
        default=DEFAULT_LANGUAGE,
        help="the language the ASR hears turns in that name no known question, as a deployment configures its "
        f"ASR (default: {DEFAULT_LANGUAGE}); auto: the ASR detects it",
    )
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument(
        "--token-env", default="", help="environment variable whose value devices must send as a bearer token"
    )
    p.add_argument(
        "--max-backlog-s",
        type=float,
        default=FLOOD.max_backlog_s,
        help="audio a connection may send ahead of real time, a backlog after a stall (0: not metered; the real "
        "server meters nothing)",
    )
    p.add_argument(
        "--max-control-per-s",
        type=float,
        default=FLOOD.max_control_per_s,
        help="control messages a second a connection may send on average (0: not metered)",
    )
    p.add_argument("--max-connections", type=int, default=DOOR.max_connections, help="open connections at once")
    for flag, value, says in (
        ("device", "MAC", "only these Device-Ids get OTA credentials and in at the doors (default: any, as the real)"),
        ("host", "NAME", "a DNS name devices reach the OTA by"),
        ("origin", "ORIGIN", "a web page that may call the doors"),
    ):
        p.add_argument(f"--allowed-{flag}", action="append", default=[], metavar=value, help=f"{says} (repeatable)")
    p.add_argument(
        "--duplicate-connect",
        choices=DUPLICATE_CONNECT,
        default=DOOR.duplicate_connect,
        help="MQTT, a CONNECT with a connected device's client id: refuse it (the default) or drop the connected one "
        "(the real gateway's rule, which lets whoever has a device's credentials take its session)",
    )
    p.add_argument(
        "--auto-listening",
        choices=AUTO_LISTENING,
        default=SESSION.auto_listening,
        help="continuous: the VAD hears every frame in auto mode, as the real server; per-listen: one utterance per "
        "listen start (the lab before)",
    )
    p.add_argument(
        "--no-wake-reply-cache",
        action="store_true",
        help="answer a wake word with an LLM turn (the real server's enable_wakeup_words_response_cache: false)",
    )
    p.add_argument(
        "--idle-goodbye-s",
        type=float,
        default=SESSION.idle_goodbye_s,
        help="no voice this long and the LLM says goodbye, then the connection closes (0: never)",
    )
    p.add_argument(
        "--pacing",
        choices=tuple(PACINGS),
        default="xiaozhi-server",
        help="downlink pacing: the real server's rate controller (default) or the lab's before (lab-v1)",
    )
    p.add_argument(
        "--downlink-codec",
        choices=tuple(PRESETS),
        default="xiaozhi-server",
        help="the downlink's Opus encoder preset (default: the real server's, 24 kHz)",
    )
    p.add_argument(
        "--mqtt-port",
        type=int,
        help="also serve MQTT + UDP devices: an MQTT server on this port of --host, as the xiaozhi MQTT gateway "
        "(the gateway uses 1883; 0: any free one)",
    )
    p.add_argument("--udp-port", type=int, default=0, help="the UDP audio port for MQTT devices (0: any free one)")
    p.add_argument(
        "--mqtt-signature-key-env",
        default="",
        help="environment variable holding the key MQTT passwords are signed with (the gateway's MQTT_SIGNATURE_KEY); "
        "unset: any password is accepted",
    )
    p.add_argument(
        "--ota-port",
        type=int,
        help="also serve the OTA endpoint /xiaozhi/ota/ on this port of --host (the real server uses 8003; 0: any)",
    )
    p.add_argument(
        "--ota-cors-origin",
        default="",
        help="the one web origin allowed to read OTA answers (they hold device credentials); default: none",
    )
    p.add_argument(
        "--public-host",
        "--udp-public-host",
        default="",
        help="the address devices reach this machine at, told in the OTA answer and the MQTT hello (default: --host)",
    )
    p.add_argument(
        "--processes",
        type=int,
        default=1,
        help="server processes sharing the WebSocket port, each its own run under OUT/processes/K (one per core: "
        "a process does its Python work on one thread)",
    )
    p.add_argument(
        "--max-restarts",
        type=int,
        default=RESTART.restarts,
        help="with --processes above 1, a process that dies is restarted, at most this many times (all processes "
        "together) in --restart-window-s; one more and every process is stopped (0: one ending stops all)",
    )
    p.add_argument(
        "--restart-window-s",
        type=float,
        default=RESTART.window_s,
        help="the window --max-restarts counts restarts in (seconds)",
    )
    p.add_argument("--process", type=parse_process, help=argparse.SUPPRESS)  # K/N: given by --processes' parent
    p.add_argument("--out", type=Path, default=Path("."), help="output folder (traces/ and bench.csv go here)")
    p.add_argument("--run-id", help="run identifier (default: time and random suffix)")
    p.add_argument("--model-cache", type=Path, help="where packaged models are assembled")
    p.add_argument("--quiet", action="store_true", help="no per-turn lines")
    return p.parse_args(argv)


def mqtt_key(args: argparse.Namespace, env: Mapping[str, str]) -> str:
    """The MQTT signature key, from the environment, never the command line; "" when none is named."""
    if not args.mqtt_signature_key_env:
        return ""
    if args.mqtt_port is None:
        raise ValueError("--mqtt-signature-key-env needs --mqtt-port: no MQTT is served")
    key = env.get(args.mqtt_signature_key_env, "")
    if not key:
        raise ValueError(f"--mqtt-signature-key-env {args.mqtt_signature_key_env}: the variable is not set")
    return key


@dataclass(frozen=True, slots=True)
class ServePrepared:
    """What serving needs, all checked before the first device connects."""

    run: Run
    bench: BenchCsv
    told: str  # the address devices are told (OTA answer, MQTT hello)
    token: str = field(repr=False)
    mqtt_key: str = field(repr=False)
    session: SessionSettings = field(default_factory=SessionSettings)
    door: DoorSettings = field(default_factory=DoorSettings)
    language: str = AUTO
    processes: int = 1  # this is one of that many processes on the port


def prepare(args: argparse.Namespace, env: Mapping[str, str], run_id: str) -> ServePrepared:
    """The run behind the server, its models loaded; raises what ``main`` reports as a refusal."""
    token = env.get(args.token_env, "") if args.token_env else ""
    if args.token_env and not token:
        raise ValueError(f"--token-env {args.token_env}: the variable is not set")
    told = public_host(args.host, args.public_host, args.mqtt_port is not None or args.ota_port is not None)
    if args.mqtt_port is not None:
        refuse_tls_port(args.mqtt_port)
    key = mqtt_key(args, env)
    refuse_existing_run(args.out, run_id, append=False)
    cfg = load_config(args.config, {}, base=SERVE_BASE)
    session, door = server_settings(args, cfg.run.turn_timeout_s)
    language = heard_language(args.language)
    questions = load_questions(args.fixtures, language) if args.fixtures else QuestionSet(Path("."), ())
    refuse_oracle_without_texts(cfg.asr.impl, questions)
    quiet_native_telemetry(env)
    engines = load_engines(cfg, model_cache(args, env), env)
    try:
        bench = BenchCsv(args.out / "bench.csv")
    except BaseException:
        engines.close()  # a llama-server already started must not outlive a refused start
        raise
    # how the server listens, paces, encodes and answers changes what every device hears (M11)
    processes = args.process[1] if args.process else 1  # one of N: the devices meet a server sharing its machine
    engines.identity["xiaozhi_server"] = describe(session, door, processes)
    engines.identity["language"] = language or "auto"
    api_key = env.get(cfg.cloud.api_key_env) if cfg.cloud.api_key_env else None
    config_id = cfg.config_id(questions.digest(), engines.identity)
    run = Run(run_id, cfg, config_id, questions, RealClock(), engines, api_key)
    return ServePrepared(run, bench, told, token, key, session, door, language, processes)


def server_settings(args: argparse.Namespace, turn_timeout_s: float) -> tuple[SessionSettings, DoorSettings]:
    """How the server treats devices, from the command line (a ValueError names a setting out of range)."""
    flood = FloodSettings(max_backlog_s=args.max_backlog_s, max_control_per_s=args.max_control_per_s)
    session = SessionSettings(
        turn_timeout_s=turn_timeout_s,
        pacing=args.pacing,
        downlink_codec=args.downlink_codec,
        auto_listening=args.auto_listening,
        wake_reply_cache=not args.no_wake_reply_cache,
        idle_goodbye_s=args.idle_goodbye_s,
        flood=flood,
    )
    door = DoorSettings(
        max_connections=args.max_connections,
        allowed_devices=tuple(args.allowed_device),
        allowed_hosts=tuple(args.allowed_host),
        allowed_origins=tuple(args.allowed_origin),
        duplicate_connect=args.duplicate_connect,
    )
    return session, door


def exposure_warnings(args: argparse.Namespace, p: ServePrepared) -> list[str]:
    """What a server reachable beyond this machine lets in (said once, never fatal)."""
    if args.host in ("127.0.0.1", "localhost", "::1"):
        return []
    out = []
    if not p.token:
        out.append(f"listening on {args.host} without a token: anyone who reaches it can use it")
    if args.mqtt_port is not None and not p.mqtt_key:
        out.append(f"MQTT on {args.host} without --mqtt-signature-key-env: any device is let in")
    return out


def serve(args: argparse.Namespace, p: ServePrepared, tracing: Tracing, sink: TraceSink) -> None:
    """Serve every front door asked for until SIGINT or SIGTERM; raises what cannot be served."""
    one_of_many = args.process is not None
    settings = WebSocketSettings(
        args.host, args.port, token=p.token, session=p.session, door=p.door, reuse_port=one_of_many
    )
    mqtt = None
    if args.mqtt_port is not None:
        mqtt = MqttFrontSettings(
            args.host, args.mqtt_port, args.udp_port, p.told, p.mqtt_key, session=p.session, door=p.door
        )
    note = say_nothing if args.quiet else say_on_stderr
    ota = None
    if args.ota_port is not None:
        ota = OtaFront(p.told, args.ota_port, p.token, note, cors_origin=args.ota_cors_origin)
    server_note = f"downlink pacing {p.session.pacing}, opus {p.session.downlink_codec}, asr language {args.language}"
    turns = ServedTurns(p.run, tracing, sink, p.language, server_note)
    stopping = serve_until_stopped(p.run, turns, settings, mqtt, ota, ORPHAN_CHECK_S if one_of_many else None)
    run_on_clock(stopping, p.run.clock)
    if turns.unwritten is not None:
        lost = "; ".join(turns.unrecorded[:5]) + (" ..." if len(turns.unrecorded) > 5 else "")
        raise RecordsUnwritten(
            f"{turns.unwritten}; the server stopped rather than serve turns it cannot record; "
            f"served but not recorded: {lost}"
        )


def main(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    args = parse_args(argv)
    env = os.environ if env is None else env
    if why := refusal(args.processes, args.port, args.mqtt_port is not None or args.ota_port is not None):
        print(f"error: {why}", file=sys.stderr)
        return 2
    run_id = args.run_id or new_run_id()
    if args.processes > 1 and args.process is None:
        try:
            limit = RestartLimit(args.max_restarts, args.restart_window_s)
        except ValueError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        shared = ProcessesShare(args.processes, args.host, args.port, args.out, run_id, limit)
        return supervise(shared, sys.argv[1:] if argv is None else argv, env)
    try:
        p = prepare(args, env, run_id)
    except (ConfigError, FixtureError, BenchCsvError, ModelError, SetupError, RunExists, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for warning in exposure_warnings(args, p):
        print(f"warning: {warning}", file=sys.stderr)
    run, clock = p.run, p.run.clock
    attach_scheduler(run)  # every connection's turns share the one model
    trace_path = args.out / "traces" / f"{run.run_id}.jsonl"
    tracing = Tracing(trace_path, env.get("OTEL_SERVICE_NAME", "xiaozhi-lab-server"), otlp_from_env(env))
    sink = RowSink(p.bench, 0, say_nothing if args.quiet else say_on_stderr, keep=False)  # counted, not held
    served = {**session_attributes(run), names.SERVER_SETTINGS: describe(p.session, p.door, p.processes)}
    tracing.start_session(served, clock.now_ns())
    try:
        serve(args, p, tracing, sink)
    except OSError as exc:  # the address is taken, or not ours
        print(f"error: cannot listen on {args.host}:{args.port}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    except (ValueError, OtaError, RecordsUnwritten) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        try:
            tracing.end_session(clock.now_ns())
        except RecordWriteError as exc:  # the turns before it stand; only the session's closing span is missing
            print(f"warning: the session's end was not traced: {exc}", file=sys.stderr)
        tracing.shutdown()
        run.engines.close()
    print(f"{sink.count} turn(s); traces: {trace_path}; rows: {p.bench.path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
