"""``python -m pipeline.replay DIR``: replay recorded questions through the voice pipeline.

Reads DIR's manifest and audio, runs rounds of turns (the first a warm-up),
writes ``<out>/traces/<run_id>.jsonl`` and appends rows to ``<out>/bench.csv``,
and ends with a summary table. The command line becomes a ``RunPlan`` (``pipeline.plan``),
which is prepared and run; the environment it reads (the token and keys a plan names,
OTEL_EXPORTER_OTLP_* and OTEL_SERVICE_NAME for export over the wire) is handed to the
plan's preparation.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pipeline.analysis.row_sink import RowSink
from pipeline.analysis.summary import summary_table
from pipeline.cli import quiet_native_telemetry, say_nothing, say_on_stderr
from pipeline.clock import run_on_clock
from pipeline.offline import guard
from pipeline.plan.command_line import overrides_from
from pipeline.plan.notices import announcement, run_warnings
from pipeline.plan.prepare import Prepared, make_run, model_cache, prepare
from pipeline.plan.run_folder import RunExists
from pipeline.plan.run_plan import DeviceOptions, RunPlan, new_run_id
from pipeline.records.bench_csv import BenchCsvError
from pipeline.records.whole_lines import RecordWriteError
from pipeline.run.assembly import SetupError
from pipeline.run.gate import GateClosed
from pipeline.run.ray_workers import WorkerSpec, run_on_ray
from pipeline.run.session import STOPPED, Run, run_session
from pipeline.run.stopping import Stopped, until_stopped
from pipeline.settings.config import ConfigError, choices
from pipeline.settings.fixtures import FixtureError
from pipeline.settings.models import ModelError
from pipeline.tracing.export import SERVICE, Tracing
from pipeline.transport.device.device import DeviceError
from pipeline.transport.device.device_settings import BARGE_IN_WAYS
from pipeline.transport.wire.messages import LISTEN_MODES
from pipeline.transport.wire.opus import PRESETS

REPLAY = "replay recorded questions through the voice pipeline"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """The replay's command line; the choices offered are those of the settings and the transport that own them."""
    settings = choices()
    p = argparse.ArgumentParser(prog="python -m pipeline.replay", description=REPLAY)
    p.add_argument("fixtures", type=Path, help="folder with manifest.csv and WAV files")
    p.add_argument(
        "--config", type=Path, action="append", help="TOML settings (repeatable: later files override earlier ones)"
    )
    p.add_argument("--condition", help="condition label, e.g. A, B or B'")
    p.add_argument("--language", default="", help="language of questions that name none (default: the ASR detects it)")
    p.add_argument("--rounds", type=int, help="rounds over the question set (the first is a warm-up)")
    p.add_argument("--limit", type=int, help="use only the first N questions (0 = all)")
    p.add_argument("--mode", choices=settings["llm", "mode"], help="LLM call mode")
    p.add_argument("--fast", action="store_true", help="send audio as fast as possible instead of in real time")
    p.add_argument("--clock", choices=settings["run", "clock"], help="virtual: simulate time (scripted stages only)")
    p.add_argument("--timeout", type=float, help="turn time limit in seconds")
    p.add_argument("--out", type=Path, default=Path("."), help="output folder (traces/ and bench.csv go here)")
    p.add_argument("--run-id", help="run identifier (default: time and random suffix)")
    p.add_argument("--append", action="store_true", help="add turns to a run id that --out already holds")
    p.add_argument("--quiet", action="store_true", help="no per-turn progress lines")
    p.add_argument(
        "--turn-gate",
        action="store_true",
        help="take turns when told: 'gate: ready N' once loaded, then before each turn wait for a 'go' line on "
        "standard input and print 'gate: done POS' after it (pipeline.experiment's interleaved conditions)",
    )
    p.add_argument("--net-audit", type=Path, help="record Python-level attempts to leave loopback here (JSON lines)")
    p.add_argument("--model-cache", type=Path, help="where packaged models are assembled (default: ~/.cache/...)")
    fleet = p.add_argument_group("many devices on one pipeline")
    fleet.add_argument("--devices", type=int, help="concurrent devices, each with its own session and question order")
    fleet.add_argument("--arrival", choices=settings["fleet", "arrival"], help="when the devices start")
    fleet.add_argument("--gap-ms", type=float, help="staggered: ms between device starts")
    fleet.add_argument("--rate", type=float, help="poisson: device arrivals per second on average")
    fleet.add_argument("--concurrency", type=int, help="[scheduler] calls the shared model runs at once (0 = none)")
    fleet.add_argument("--workers", type=int, help="run the devices on this many Ray workers (a local Ray by default)")
    fleet.add_argument("--ray-address", help="join this Ray cluster instead: auto, or ray://HEAD:10001")
    fleet.add_argument(
        "--background", choices=settings["background", "job"], help="background jobs competing for the model"
    )
    p.add_argument(
        "--temp-command", metavar="CMD", help="shell command printing the temperature in °C (default: sysfs sensors)"
    )
    device = p.add_argument_group("as a device of a xiaozhi server or a telephony bot (audio always at real-time pace)")
    device.add_argument(
        "--server",
        help="the server: ws://HOST:PORT/xiaozhi/v1/ (WebSocket); mqtt://HOST:PORT[/TOPIC][?group=GID] (MQTT + UDP "
        "as to the xiaozhi MQTT gateway: client id GID@@@MAC@@@UUID, password signed with the key in "
        "--mqtt-signature-key-env, publishes to TOPIC, default device-server); or an OTA URL "
        "http://HOST:PORT/xiaozhi/ota/, asked as a device asks at boot, whose answer's mqtt section says all that; "
        "or twilio+ws://HOST:PORT/PATH (a bot that speaks Twilio Media Streams, called as a phone calls it: mu-law "
        "8 kHz, the answer's edges inferred from its sound); or pipecat+ws://HOST:PORT/PATH (a Pipecat bot on its "
        "own protobuf wire: 16 kHz PCM, its RTVI messages kept as its own marks)",
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
        choices=LISTEN_MODES,
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
        "--settle-ms",
        type=int,
        default=0,
        metavar="MS",
        help="before each question, wait until the server has sent nothing for MS ms (what it sent is dropped, "
        "counted): a server still answering an earlier question, e.g. the second half of one it cut off, "
        "would otherwise answer into this one (default 0: ask at once)",
    )
    device.add_argument(
        "--uplink-encoder",
        choices=tuple(PRESETS),
        default="firmware",
        help="the device's Opus encoder preset (the firmware's: application audio, complexity 0, DTX)",
    )
    device.add_argument("--link-profile", help="a network profile between device and server (lan, internet, ...)")
    device.add_argument(
        "--record-audio",
        type=Path,
        metavar="DIR",
        help="record each device: DIR/<index>.wav (stereo 16 kHz: left what its microphone sent, right what its "
        "speaker played, on the traces' clock) and DIR/<index>.json (where sample 0 lies on that clock)",
    )
    device.add_argument(
        "--barge-in-after", type=int, metavar="MS", help="interrupt each answer once it has sounded MS ms"
    )
    device.add_argument(
        "--speaker",
        default="",
        metavar="OUTPUT",
        help="play each answer into this sound output as the device plays it (a PortAudio device: index or part "
        "of its name; a PulseAudio sink: `pulse` with PULSE_SINK=NAME)",
    )
    device.add_argument(
        "--voice",
        default="",
        metavar="OUTPUT",
        help="play each question into this sound output as its user says it (with --speaker on the same output, "
        "a microphone beside it hears the whole turn)",
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
    """The settings given on the command line, as config sections."""
    return overrides_from(vars(args))


def plan_of(args: argparse.Namespace, run_id: str) -> RunPlan:
    """The command line as the run's plan; raises what the plan refuses (``ValueError``)."""
    device = DeviceOptions(
        server=args.server or "",
        token_env=args.token_env,
        mqtt_signature_key_env=args.mqtt_signature_key_env,
        protocol_version=args.protocol_version,
        listen_mode=args.listen_mode,
        jitter_frames=args.jitter_frames,
        settle_ms=args.settle_ms,
        uplink_encoder=args.uplink_encoder,
        link_profile=args.link_profile,
        record_audio=args.record_audio,
        barge_in_after_ms=args.barge_in_after,
        barge_in_with=args.barge_in_with,
        speaker=args.speaker,
        voice=args.voice,
    )
    return RunPlan(
        fixtures=args.fixtures,
        run_id=run_id,
        configs=tuple(args.config or ()),
        overrides=overrides(args),
        language=args.language,
        out=args.out,
        append=args.append,
        model_cache=args.model_cache,
        device=device,
        workers=args.workers,
        ray_address=args.ray_address,
        turn_gate=args.turn_gate,
        net_audit=args.net_audit,
        quiet=args.quiet,
    )


def run_on_workers(
    run: Run, p: Prepared, plan: RunPlan, workers: int, env: Mapping[str, str], tracing: Tracing, sink: RowSink
) -> None:
    p.engines.close()  # each worker loads its own; the driver needed them for the run's identity only
    spec = WorkerSpec(
        run.run_id,
        run.config,
        run.config_id,
        run.questions,
        model_cache(plan, env),
        (),
        p.engines.endpoint,
        dict(p.engines.identity),
        env.get("OTEL_SERVICE_NAME", SERVICE),
        p.otlp,
        run.remote,
        p.roles,
        run.api_key,
    )
    run_on_ray(spec, workers, tracing, sink, say_on_stderr, plan.ray_address)


def print_outcome(sink: RowSink, trace_path: Path, tracing: Tracing) -> None:
    print(summary_table(sink.rows))
    print(f"traces: {trace_path}")
    print(f"rows:   {sink.bench.path}")
    if tracing.otlp is not None:
        print(f"otlp:   {tracing.otlp.sent} span(s) sent to {tracing.otlp_endpoint}, {tracing.otlp.failed} failed")


def main(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    args = parse_args(argv)
    env = os.environ if env is None else env
    if args.net_audit:
        guard.install(args.net_audit)  # first, so attempts made while loading models are seen too
    say = say_nothing if args.quiet else say_on_stderr
    try:
        plan = plan_of(args, args.run_id or new_run_id())
        quiet_native_telemetry(env)
        p = prepare(plan, env)
    except (ConfigError, FixtureError, BenchCsvError, ModelError, SetupError, RunExists, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    run_id = plan.run_id
    run = make_run(run_id, p, env, plan.turn_gate)
    for warning in run_warnings(p, run.api_key):
        print(f"warning: {warning}", file=sys.stderr)
    trace_path = plan.out / "traces" / f"{run_id}.jsonl"
    tracing = Tracing(trace_path, env.get("OTEL_SERVICE_NAME", SERVICE), p.otlp)
    say(announcement(run))
    cfg = run.config
    sink = RowSink(p.bench, cfg.run.rounds * len(run.selected()) * cfg.fleet.devices, say)
    try:
        if plan.workers:
            run_on_workers(run, p, plan, plan.workers, env, tracing, sink)
        else:
            run_on_clock(until_stopped(run_session(run, tracing, sink, say)), run.clock)
    except (DeviceError, GateClosed, RecordWriteError) as exc:  # the turns finished before it stay written
        print(f"error: {exc}", file=sys.stderr)
        written = f"{len(sink.rows)} turn(s) finished before it are written ({p.bench.path}, {trace_path})"
        print(written, file=sys.stderr)
        return 2
    except Stopped as stop:  # each turn in flight is a failed row (stopped), written before the run unwound
        cut = sum(1 for r in sink.rows if r.error == STOPPED)
        print(f"{stop}: {len(sink.rows)} turn(s) written, {cut} of them cut mid-turn ({p.bench.path})", file=sys.stderr)
        return stop.exit_code
    finally:
        tracing.shutdown()
        p.engines.close()
    print_outcome(sink, trace_path, tracing)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
