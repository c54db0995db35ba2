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

from pipeline.analysis.sink import RowSink
from pipeline.analysis.summary import summary_table
from pipeline.cli import (
    new_run_id,
    overrides,
    parse_replay_args,
    quiet_native_telemetry,
    say_nothing,
    say_on_stderr,
)
from pipeline.clock import run_on_clock
from pipeline.offline import guard
from pipeline.plan.notices import announcement, run_warnings
from pipeline.plan.prepare import Prepared, make_run, model_cache, prepare
from pipeline.plan.run_folder import RunExists
from pipeline.plan.run_plan import DeviceOptions, RunPlan
from pipeline.records.bench_csv import BenchCsvError
from pipeline.run.assembly import SetupError
from pipeline.run.gate import GateClosed
from pipeline.run.session import Run, run_session
from pipeline.run.workers import WorkerSpec, run_on_ray
from pipeline.settings.config import ConfigError
from pipeline.settings.fixtures import FixtureError
from pipeline.settings.models import ModelError
from pipeline.tracing.export import SERVICE, Tracing
from pipeline.transport.device.device import DeviceError


def plan_of(args: argparse.Namespace, run_id: str) -> RunPlan:
    """The command line as the run's plan; raises what the plan refuses (``ValueError``)."""
    device = DeviceOptions(
        server=args.server or "",
        token_env=args.token_env,
        mqtt_signature_key_env=args.mqtt_signature_key_env,
        protocol_version=args.protocol_version,
        listen_mode=args.listen_mode,
        jitter_frames=args.jitter_frames,
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
    args = parse_replay_args(argv)
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
