"""``python -m pipeline.capacity FIXTURES --server URL --steps 1,2,5,10 --hold 60s --out DIR``: how many devices
a xiaozhi server holds.

Ramps a fleet of emulated devices against the server (WebSocket ``ws://``, or MQTT + UDP through a gateway:
``mqtt://`` or an OTA URL, as ``pipeline.replay --server``), one step of N devices at a time, each held
``--hold`` after its devices arrived; prints one line per step and ``devices held: N`` at the end; writes
DIR/capacity.json, DIR/steps.csv and each step's run (traces/, bench.csv) in DIR/steps/<N>/. With
``--soak DURATION`` (and one step, ``--steps N``) the step is held that long and written window by window
(``--window``, default 5m) to DIR/soak.json and DIR/windows.csv, with a drift verdict (``capacity.soak``).
Before each step (and at each soak window's end) the machine's speed is timed on a fixed probe
(``capacity.machine_speed``).
Exit 0 when the ramp was measured (whether or not a step failed); 2 on bad input, an unreachable server,
or a step that could not start or served nothing (what was measured before is written).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pipeline.capacity.machine_speed import measure
from pipeline.capacity.probe import ProbeError, check_pid
from pipeline.capacity.profile import ProfileError, load_profile
from pipeline.capacity.ramp import Ramp, RampError, Target, reachable
from pipeline.capacity.ramp_plan import (
    DEFAULT_MARGIN_FLOOR_MS,
    DEFAULT_MARGIN_PCT,
    DEFAULT_MIN_TURNS,
    HOLD_TIMES_FOR_MAX,
    PlanError,
    RampPlan,
    parse_duration,
    parse_margin,
    parse_steps,
)
from pipeline.capacity.soak import Soaking
from pipeline.capacity.workers import on_ray
from pipeline.cli import quiet_native_telemetry

DESCRIPTION = (
    "Ramp emulated xiaozhi devices against a server, step by step, and say how many it holds: the last step "
    "whose P90 silence stayed within the margin of one device's, with no failed turn."
)
_HELP_MARGIN = (
    f"a step holds when its P90 silence is at most the first step's plus this share of it (default "
    f"{DEFAULT_MARGIN_PCT:g}%%) or --margin-floor-ms, whichever is more: a change a user can be told about, "
    "and not one the P90's own spread at --min-turns turns would make"
)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m pipeline.capacity", description=DESCRIPTION)
    p.add_argument("fixtures", type=Path, help="folder with manifest.csv and WAV files (the questions asked)")
    p.add_argument("--server", required=True, help="ws://HOST:PORT/xiaozhi/v1/, mqtt://HOST:PORT or an OTA URL")
    p.add_argument("--steps", default="1,2,5,10,20,50,100,200", help="devices per step, increasing")
    p.add_argument("--hold", default="60s", help="how long each step is held after its devices arrived")
    p.add_argument(
        "--max-hold", help=f"a step short of --min-turns is held up to this (default {HOLD_TIMES_FOR_MAX} x --hold)"
    )
    p.add_argument(
        "--soak",
        help="hold one step (--steps N) this long (e.g. 60m), written window by window to soak.json and windows.csv, "
        "and say whether its silence, RSS, descriptors or threads drifted",
    )
    p.add_argument("--window", default="5m", help="with --soak: each window's length (default 5m)")
    p.add_argument(
        "--no-machine-speed",
        action="store_true",
        help="do not time the machine's fixed probe (JSON, sockets, Opus, ONNX) before each step and each window",
    )
    p.add_argument("--out", type=Path, required=True, help="the capacity folder (capacity.json, steps.csv, steps/)")
    p.add_argument("--margin", default=f"{DEFAULT_MARGIN_PCT:g}%", help=_HELP_MARGIN)
    p.add_argument(
        "--margin-floor-ms", type=float, default=DEFAULT_MARGIN_FLOOR_MS, help="the margin's floor in ms (default 50)"
    )
    p.add_argument(
        "--min-turns",
        type=int,
        default=DEFAULT_MIN_TURNS,
        help=f"measured turns a step needs for its P90 (default {DEFAULT_MIN_TURNS})",
    )
    p.add_argument("--server-pid", type=int, help="the server's process id, when local: its CPU and RSS per step")
    p.add_argument(
        "--server-traces",
        type=Path,
        help="the lab's server's trace folder (pipeline.serve --out DIR/traces): each silence split on the wire, "
        "and which part grew first",
    )
    p.add_argument("--label", default="", help="the server's name in the report's curve (default: its URL)")
    p.add_argument("--config", type=Path, action="append", help="TOML settings for the devices' runs (as the replay's)")
    p.add_argument("--language", default="", help="language of questions that name none")
    p.add_argument("--timeout", type=float, help="a turn's time limit in seconds")
    p.add_argument("--token-env", default="XIAOZHI_TOKEN", help="environment variable with the bearer token")
    p.add_argument("--mqtt-signature-key-env", default="MQTT_SIGNATURE_KEY", help="as pipeline.replay's")
    p.add_argument("--protocol-version", type=int, choices=(1, 2, 3), default=1, help="binary audio framing")
    p.add_argument("--workers", type=int, help="spread each step's devices over this many Ray workers (pip: .[fleet])")
    p.add_argument("--ray-address", help="with --workers: auto or ray://HEAD:10001 (default: a local Ray for the ramp)")
    p.add_argument(
        "--run-id", default="", help="the ramp's id, each step's run id is it plus -<N>d (default: the time)"
    )
    load = p.add_argument_group("the users (the load profile; each overrides --profile's [load] table)")
    load.add_argument("--profile", type=Path, help="a TOML file with a [load] table")
    load.add_argument("--listen-mode", help="realtime (default: the microphone always on) or auto")
    load.add_argument("--think", help="between an answer and the next question (e.g. 3s; default 3s)")
    load.add_argument("--per-hour", type=float, help="or: questions per device per hour")
    load.add_argument("--session", help="reconnect after this long (default: one connection per step)")
    load.add_argument("--arrival", help="together, staggered (default) or poisson")
    load.add_argument("--ramp", help="the time over which the devices arrive (default 10s)")
    load.add_argument("--limit", type=int, help="only the first N questions (0 = all)")
    load.add_argument("--ids", help="only these question ids, comma-separated")
    load.add_argument("--seed", type=int, help="the poisson arrivals' seed (default 7)")
    return p.parse_args(argv)


def profile_overrides(args: argparse.Namespace) -> dict[str, Any]:
    def seconds(option: str, text: str | None) -> float | None:
        return None if text is None else parse_duration(option, text)

    return {
        "listen_mode": args.listen_mode,
        "think_s": seconds("--think", args.think),
        "questions_per_hour": args.per_hour,
        "session_s": seconds("--session", args.session),
        "arrival": args.arrival,
        "ramp_s": seconds("--ramp", args.ramp),
        "limit": args.limit,
        "ids": args.ids,
        "seed": args.seed,
    }


def plan_of(args: argparse.Namespace) -> RampPlan:
    if args.soak:
        return soak_plan(args)
    hold = parse_duration("--hold", args.hold)
    longest = parse_duration("--max-hold", args.max_hold) if args.max_hold else max(hold, HOLD_TIMES_FOR_MAX * hold)
    return RampPlan(
        parse_steps(args.steps), hold, longest, parse_margin(args.margin), args.margin_floor_ms, args.min_turns
    )


def soak_plan(args: argparse.Namespace) -> RampPlan:
    """One step held ``--soak``: the ramp's plan with a single step whose hold is the soak."""
    steps = parse_steps(args.steps)
    if len(steps) != 1:
        raise PlanError(f"--soak holds one step: --steps {args.steps!r} names {len(steps)}; give one, e.g. --steps 64")
    if args.workers is not None:
        raise PlanError("--soak runs its devices in this process: --workers is not supported with it")
    hold = parse_duration("--soak", args.soak)
    window = parse_duration("--window", args.window)
    if not 0 < window <= hold:
        raise PlanError(f"--window {args.window!r}: more than 0 and at most --soak {args.soak!r}")
    return RampPlan(steps, hold, hold, parse_margin(args.margin), args.margin_floor_ms, args.min_turns)


def soaking(args: argparse.Namespace, ramp: Ramp, plan: RampPlan) -> Soaking:
    """The soak's watcher, with its record begun (written at each window's end)."""
    n, window = plan.steps[0], parse_duration("--window", args.window)
    speed = None if args.no_machine_speed else measure
    return Soaking.begin(args.out, n, plan.hold_s, window, ramp.ramp_id, ramp.found, args.server_traces, speed)


def main(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    args = parse_args(argv)
    env = os.environ if env is None else env
    ramp: Ramp | None = None
    try:
        plan = plan_of(args)
        profile = load_profile(args.profile, profile_overrides(args))
        check_pid(args.server_pid)
        target = Target(
            args.server,
            args.fixtures,
            tuple(args.config or ()),
            args.token_env,
            args.mqtt_signature_key_env,
            args.protocol_version,
            args.language,
            args.timeout,
            args.server_pid,
            args.server_traces,
        )
        ramp = Ramp(target, profile, plan, args.out, env, ramp_id=args.run_id)
        ramp.found.label = args.label
        ramp.speed = None if args.no_machine_speed else measure
        if args.soak:
            ramp.watch = soaking(args, ramp, plan)
        ramp.check()
        reachable(target, env)
        quiet_native_telemetry(env)  # before a step loads its VAD (and before Ray starts the workers that do)
        with contextlib.ExitStack() as stack:
            if args.workers is not None:
                ramp.spread = stack.enter_context(on_ray(args.workers, args.ray_address, target, profile, plan, env))
            found = ramp.run()
    except (PlanError, ProfileError, ProbeError, RampError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        if ramp is not None and isinstance(exc, RampError):
            ramp.stop(str(exc))
            print(f"steps measured: {len(ramp.found.steps)}, written to {args.out}", file=sys.stderr)
        return 2
    print(f"stopped: {found.stopped}")
    held = found.devices_held
    bound = " or more (no step failed)" if found.none_failed and held else ""
    print(f"devices held: {held if held is not None else 0}{bound}")
    if found.grew_first:
        print(f"grew first: {found.grew_first}")
    if found.drift:
        print(f"soak: {found.drift}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
