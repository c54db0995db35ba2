"""A plan made ready to run: its settings, questions and engines, all checked before its first turn
(``prepare``), and the run itself (``make_run``): its identity from the settings, the questions and the engines,
and its devices when they are devices of a server.

The environment is handed in by the entry point: the secrets the plan names (a token, an MQTT signature key)
and the OTEL_* variables are read from it here, when the run is prepared, never kept in the plan.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from pipeline.clock import Clock, RealClock, VirtualClock
from pipeline.endpoints.link.profiles import get_profile
from pipeline.plan.run_folder import refuse_existing_run
from pipeline.plan.run_plan import RunPlan
from pipeline.records.bench_csv import BenchCsv
from pipeline.run.assembly import Engines, check_languages, load_engines
from pipeline.run.gate import OPEN, StdioGate
from pipeline.run.session import Run
from pipeline.settings.config import Config
from pipeline.settings.fixtures import QuestionSet, load_questions
from pipeline.settings.models import default_cache
from pipeline.tracing.export import OtlpSettings, otlp_from_env
from pipeline.transport.device.device_recording import RecordTo
from pipeline.transport.device.device_settings import DeviceSettings, SoundOutputs
from pipeline.transport.device.devices import AnyDevice, device_for
from pipeline.transport.device.phone_device import is_phone
from stages.registry import ROLES

DEVICE_CHOICES = ("jitter_frames", "uplink_encoder", "listen_mode")  # entered in config_id when not the firmware's


def device_id(index: int) -> str:
    """Device ``index``'s MAC-like id (a server keys its sessions, and MQTT its topics, by it)."""
    return f"02:00:00:00:{(index + 1) >> 8 & 0xFF:02x}:{(index + 1) & 0xFF:02x}"


def make_clock(cfg: Config) -> Clock:
    return VirtualClock() if cfg.run.clock == "virtual" else RealClock()


def model_cache(plan: RunPlan, env: Mapping[str, str]) -> Path:
    """Where the run's packaged models are assembled: the plan's cache, else the default one."""
    return plan.model_cache if plan.model_cache is not None else default_cache(env)


def device_of(plan: RunPlan, cfg: Config, env: Mapping[str, str]) -> DeviceSettings | None:
    """With a server: this run's devices are devices of that server, over the xiaozhi protocol."""
    d = plan.device
    if not d.server:
        return None
    return DeviceSettings(
        url=d.server,
        token=env.get(d.token_env, ""),
        mqtt_signature_key=env.get(d.mqtt_signature_key_env, "") if d.mqtt_signature_key_env else "",
        protocol_version=d.protocol_version,
        listen_mode=d.listen_mode,
        turn_timeout_s=cfg.run.turn_timeout_s,
        barge_in_after_ms=d.barge_in_after_ms,
        barge_in_with=d.barge_in_with,
        jitter_frames=d.jitter_frames,
        settle_ms=d.settle_ms,
        encoder_preset=d.uplink_encoder,
        profile=get_profile(d.link_profile) if d.link_profile else None,
        sound=SoundOutputs(speaker=d.speaker, voice=d.voice),
    )


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


def prepare(plan: RunPlan, env: Mapping[str, str]) -> Prepared:
    """Settings, questions and engines for the plan's run; raises what the replay reports as a refusal."""
    refuse_existing_run(plan.out, plan.run_id, plan.append)
    cfg = plan.config()
    questions = load_questions(plan.fixtures, plan.language)
    otlp = otlp_from_env(env)
    clock = make_clock(cfg)
    remote = device_of(plan, cfg, env)
    if remote is None:
        check_languages(cfg, questions.questions[: cfg.run.limit or None])
    roles = ("vad",) if remote else ROLES  # a device needs only the VAD that finds where speech ends
    engines = load_engines(cfg, model_cache(plan, env), env, roles)
    try:
        if remote is not None:
            identify_device(engines, remote, clock)
        bench = BenchCsv(plan.out / "bench.csv")
    except BaseException:
        engines.close()  # a llama-server already started must not outlive a refused run
        raise
    return Prepared(cfg, questions, clock, remote, plan.device.record_audio, tuple(roles), engines, bench, otlp)


def identify_device(engines: Engines, remote: DeviceSettings, clock: Clock) -> None:
    """Enter how this device run differs into the run's identity (M11) and its rows' llm_endpoint."""
    engines.endpoint, engines.identity["server"] = device_for(remote, clock).label, remote.url
    if remote.profile is not None:  # the link changes every latency the device sees (M11)
        engines.identity["link_profile"] = json.dumps(remote.profile.as_dict(), sort_keys=True)
    if remote.settle_ms:  # each question waits for a quiet server: the turns no longer follow each other at once
        engines.identity["settle_ms"] = str(remote.settle_ms)
    if remote.barge_in_after_ms is not None:  # an interrupted answer is another experiment
        engines.identity["barge_in"] = f"{remote.barge_in_with} after {remote.barge_in_after_ms} ms"
    # the device's differences from the firmware, and its listening mode (DEVICE_CHOICES); a phone line has none
    choices = (
        ()
        if is_phone(remote.url)
        else (
            ("jitter_frames", remote.jitter_frames, 0),
            ("uplink_encoder", remote.encoder_preset, "firmware"),
            ("listen_mode", remote.listen_mode, "auto"),
        )
    )
    for key, value, usual in choices:
        if value != usual:
            engines.identity[key] = str(value)
    named = [
        f"{k.replace('_', ' ')} {engines.identity[k]}" for k in ("barge_in", *DEVICE_CHOICES) if k in engines.identity
    ]
    if named:  # the row's llm_endpoint, which the report shows, says how this device differs
        engines.endpoint += "; " + ", ".join(named)


def _device_factory(
    settings: DeviceSettings, clock: Clock, run_id: str, record: Path | None
) -> Callable[[int], AnyDevice]:
    def device(index: int) -> AnyDevice:
        to = RecordTo(record, str(index), run_id) if record is not None else None
        return device_for(dataclasses.replace(settings, device_id=device_id(index)), clock, to)

    return device


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
