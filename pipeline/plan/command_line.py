"""The replay's command line as far as a plan is concerned: its settings options read into config sections
(``overrides_from``), and a plan written back as the command line that makes it (``replay_argv``).

``python -m pipeline.replay`` defines its options (with their help); this module is the one place that knows
which option sets which setting, so the sweep and the experiment, which start replays as child processes,
never write the replay's options themselves.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pipeline.plan.run_plan import DeviceOptions, RunPlan, Sections

# (option, its parsed name, section, key): the replay's options that set one setting each
SETTING_OPTIONS: tuple[tuple[str, str, str, str], ...] = (
    ("--condition", "condition", "run", "condition"),
    ("--rounds", "rounds", "run", "rounds"),
    ("--limit", "limit", "run", "limit"),
    ("--clock", "clock", "run", "clock"),
    ("--timeout", "timeout", "run", "turn_timeout_s"),
    ("--mode", "mode", "llm", "mode"),
    ("--temp-command", "temp_command", "probe", "temp_command"),
    ("--devices", "devices", "fleet", "devices"),
    ("--arrival", "arrival", "fleet", "arrival"),
    ("--gap-ms", "gap_ms", "fleet", "gap_ms"),
    ("--rate", "rate", "fleet", "rate_per_s"),
    ("--concurrency", "concurrency", "scheduler", "concurrency"),
    ("--background", "background", "background", "job"),
)
FAST = "--fast"  # [run] pacing = "fast": audio sent as fast as possible


def overrides_from(values: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The settings given as options (``values``: each option's parsed value by name, None when not given),
    as config sections; ``run`` always among them."""
    out: dict[str, dict[str, Any]] = {"run": {}}
    for _option, name, section, key in SETTING_OPTIONS:
        if values.get(name) is not None:
            out.setdefault(section, {})[key] = values[name]
    if values.get("fast"):
        out["run"]["pacing"] = "fast"
    return out


def _text(value: object) -> str:
    return repr(value) if isinstance(value, float) else str(value)


def setting_argv(sections: Sections) -> list[str]:
    """Config sections as the replay's options; a setting no option sets is refused (give it in a file)."""
    by_key = {(section, key): option for option, _name, section, key in SETTING_OPTIONS}
    argv: list[str] = []
    for section, values in sections.items():
        for key, value in values.items():
            if (section, key) == ("run", "pacing") and value == "fast":
                argv.append(FAST)
            elif (section, key) in by_key and value is not None:
                argv += [by_key[section, key], _text(value)]
            else:
                raise ValueError(f"[{section}] {key} = {value!r}: no replay option sets it; give it in a settings file")
    return argv


def device_argv(device: DeviceOptions) -> list[str]:
    """The device options that differ from the replay's defaults."""
    usual = DeviceOptions(server=device.server)
    argv = ["--server", device.server] if device.server else []
    for option, value, default in (
        ("--token-env", device.token_env, usual.token_env),
        ("--mqtt-signature-key-env", device.mqtt_signature_key_env, usual.mqtt_signature_key_env),
        ("--protocol-version", device.protocol_version, usual.protocol_version),
        ("--listen-mode", device.listen_mode, usual.listen_mode),
        ("--jitter-frames", device.jitter_frames, usual.jitter_frames),
        ("--settle-ms", device.settle_ms, usual.settle_ms),
        ("--uplink-encoder", device.uplink_encoder, usual.uplink_encoder),
        ("--link-profile", device.link_profile, usual.link_profile),
        ("--record-audio", device.record_audio, usual.record_audio),
        ("--barge-in-after", device.barge_in_after_ms, usual.barge_in_after_ms),
        ("--barge-in-with", device.barge_in_with, usual.barge_in_with),
        ("--speaker", device.speaker, usual.speaker),
        ("--voice", device.voice, usual.voice),
    ):
        if value != default:
            argv += [option, _text(value)]
    return argv


def replay_argv(plan: RunPlan) -> list[str]:
    """The plan as ``python -m pipeline.replay``'s arguments (the interpreter and module left to the caller):
    parsed by the replay, they give this plan back."""
    argv = [str(plan.fixtures), *(item for path in plan.configs for item in ("--config", str(path)))]
    argv += setting_argv(plan.overrides)
    argv += ["--language", plan.language] if plan.language else []
    argv += ["--out", str(plan.out), "--run-id", plan.run_id]
    for option, given in (("--append", plan.append), ("--quiet", plan.quiet), ("--turn-gate", plan.turn_gate)):
        argv += [option] if given else []
    for option, value in (
        ("--model-cache", plan.model_cache),
        ("--net-audit", plan.net_audit),
        ("--workers", plan.workers),
        ("--ray-address", plan.ray_address),
    ):
        argv += [option, str(value)] if value is not None else []
    return argv + device_argv(plan.device)
