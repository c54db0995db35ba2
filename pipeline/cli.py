"""What the entry points share: the replay's command line, run ids, the model cache and how they speak.

The entry points (``pipeline.replay``, ``pipeline.serve``, the sweep, the speech services...) are commands,
never libraries of one another: what two of them need lives here. Like them, this module may read the
command line and the environment; nothing below the entry points may.
"""

from __future__ import annotations

import argparse
import os
import secrets
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pipeline.settings.models import default_cache
from pipeline.transport.device.settings import BARGE_IN_WAYS
from pipeline.transport.wire.opus import PRESETS

REPLAY = "replay recorded questions through the voice pipeline"


def parse_replay_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """The replay's command line (the sweep parses each point's with it, exactly as the replay will)."""
    p = argparse.ArgumentParser(prog="python -m pipeline.replay", description=REPLAY)
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
    """The replay's settings given on its command line, as config sections."""
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


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(2)


def model_cache(args: argparse.Namespace, env: Mapping[str, str]) -> Path:
    return Path(args.model_cache) if args.model_cache else default_cache(env)


def quiet_native_telemetry(env: Mapping[str, str]) -> None:
    """onnxruntime looks up telemetry hosts ~9 s after import unless told not to (docs/reference/stack.md).

    A voice pipeline that claims to run offline must not phone home, so telemetry is
    off unless the user explicitly set the variable (ORT_DISABLE_TELEMETRY=0 turns it on).
    """
    os.environ["ORT_DISABLE_TELEMETRY"] = env.get("ORT_DISABLE_TELEMETRY", "1")


def say_nothing(_message: str) -> None:
    pass


def say_on_stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
