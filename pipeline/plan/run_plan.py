"""``RunPlan``: everything a replay run is made from, typed, frozen and checked when it is built.

A plan holds the settings files and the overrides given beside them (as config sections), the questions, where
the run writes, its id, the model cache, and, when the run's devices are devices of a server, how they reach it
and behave (``DeviceOptions``). It never holds a secret: the token and the MQTT signature key are named by the
environment variables that hold them, and read when the run is prepared.

What the plan alone can refuse, it refuses when it is built; what needs its settings (the clock, the number of
devices) is refused when they are read (``RunPlan.config``). The messages name the replay's options, which is
how a person gives them.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from pipeline.settings.config import Config, load_config

Sections = Mapping[str, Mapping[str, Any]]  # config sections: {"run": {"rounds": 3}, "fleet": {...}}
SERVER_SCHEMES = (
    "ws://",
    "wss://",
    "mqtt://",
    "http://",
    "https://",
    "twilio+ws://",
    "twilio+wss://",
    "pipecat+ws://",
    "pipecat+wss://",
)


def new_run_id() -> str:
    """A run's id when none is given: when it started, to the second, and four hex digits so two runs started in
    the same second never share a folder."""
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(2)


def _frozen(sections: Sections) -> Sections:
    """A read-only copy; an empty section (the same settings as none) left out, so equal plans compare equal."""
    return MappingProxyType({name: MappingProxyType(dict(v)) for name, v in sections.items() if v})


@dataclass(frozen=True, slots=True)
class DeviceOptions:
    """The run's devices as devices of a server (``server`` ""; none: the pipeline runs in this process)."""

    server: str = ""  # ws://, wss://, mqtt://, an http(s):// OTA URL; twilio+ws(s):// or pipecat+ws(s):// (a bot)
    token_env: str = "XIAOZHI_TOKEN"  # the environment variable holding the bearer token
    mqtt_signature_key_env: str = "MQTT_SIGNATURE_KEY"  # ... holding an MQTT gateway's signature key ("": none)
    protocol_version: int = 1
    listen_mode: str = "auto"
    jitter_frames: int = 0
    settle_ms: int = 0  # before each question: the server quiet this long
    uplink_encoder: str = "firmware"  # the Opus encoder preset
    link_profile: str | None = None  # a network profile between device and server
    record_audio: Path | None = None  # each device's recording goes here
    barge_in_after_ms: int | None = None
    barge_in_with: str = "wake"
    speaker: str = ""  # a sound output the answers play into
    voice: str = ""  # a sound output the questions are said into

    def __post_init__(self) -> None:
        if not self.server:
            if self.speaker or self.voice:
                raise ValueError("--speaker and --voice are a device's: they need --server")
        else:
            if not self.server.startswith(SERVER_SCHEMES):
                raise ValueError(
                    f"--server {self.server!r}: a ws://, wss://, mqtt://, http(s):// OTA, twilio+ws(s):// or "
                    "pipecat+ws(s):// URL is expected"
                )
            if self.jitter_frames < 0:
                raise ValueError(f"--jitter-frames {self.jitter_frames}: 0 or more")
            if self.settle_ms < 0:
                raise ValueError(f"--settle-ms {self.settle_ms}: 0 or more")
        if self.record_audio is not None and not self.server:
            raise ValueError("--record-audio records emulated devices: it needs --server")


@dataclass(frozen=True, slots=True)
class RunPlan:
    """One replay run, as given: ``config()`` reads its settings; ``plan.prepare.prepare`` makes it ready."""

    fixtures: Path  # the questions: manifest.csv and their audio
    run_id: str
    configs: tuple[Path, ...] = ()  # settings files, later ones over earlier ones
    overrides: Sections = field(default_factory=dict)  # sections over the files (devices, arrival... among them)
    language: str = ""  # of questions that name none ("": the ASR detects it)
    out: Path = Path(".")  # traces/ and bench.csv go here
    append: bool = False  # add turns to a run id ``out`` already holds
    model_cache: Path | None = None  # where packaged models are assembled (None: the default cache)
    device: DeviceOptions = field(default_factory=DeviceOptions)
    workers: int | None = None  # Ray workers the devices are spread over
    ray_address: str | None = None  # a Ray cluster to join instead of a local one
    turn_gate: bool = False  # take turns when told (the experiment's interleaved conditions)
    net_audit: Path | None = None  # where attempts to leave loopback are recorded
    quiet: bool = False  # no per-turn progress lines

    def __post_init__(self) -> None:
        if not self.run_id:
            raise ValueError("a run's plan needs its run id")
        object.__setattr__(self, "configs", tuple(self.configs))
        object.__setattr__(self, "overrides", _frozen(self.overrides))

    @property
    def remote(self) -> bool:
        """Whether the run's devices are devices of a server."""
        return bool(self.device.server)

    def sections(self) -> dict[str, dict[str, Any]]:
        """The overrides as plain config sections (a copy)."""
        return {name: dict(values) for name, values in self.overrides.items()}

    def config(self) -> Config:
        """The run's settings: the files, then the overrides; refused where the plan asks what they cannot give."""
        cfg = load_config(list(self.configs), self.sections())
        self.check(cfg)
        return cfg

    def check(self, cfg: Config) -> None:
        """What the plan asks of its settings: a server's devices and Ray workers run in real time; a turn gate
        takes one device's turns in this process."""
        real = cfg.run.clock != "virtual"
        if self.remote and not real:
            raise ValueError("--server needs the real clock: the server runs in real time")
        if self.workers is not None and not 1 <= self.workers <= cfg.fleet.devices:
            raise ValueError(f"--workers {self.workers}: between 1 and the number of devices ({cfg.fleet.devices})")
        if self.workers and not real:
            raise ValueError("--workers needs the real clock: each worker runs in real time")
        if self.turn_gate and (self.workers or cfg.fleet.devices > 1):
            raise ValueError("--turn-gate takes one turn at a time: it needs one device in this process (no --workers)")
