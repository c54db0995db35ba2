"""Frozen, validated run settings from TOML and command-line overrides; ``config_id`` (M11).

``config_id`` hashes every setting that can change a latency (stage choices and the chosen
implementations' settings, the LLM role's mode and limits, pacing, clock, time limit, condition
and the question set), with ``CONFIG_VERSION``. Settings that cannot (output folder, run id,
rounds) stay out, so two runs that differ only in those compare as the same configuration.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from pipeline.settings.stage_sections import STAGE_SECTIONS, StageSection, recorded
from pipeline.settings.stage_sections import AsrConfig as AsrConfig  # each section is found beside the others
from pipeline.settings.stage_sections import LlmConfig as LlmConfig
from pipeline.settings.stage_sections import TtsConfig as TtsConfig
from pipeline.settings.stage_sections import VadConfig as VadConfig
from stages.catalog import ClientOptions, registry
from stages.registry import ROLES, read_table
from stages.registry import ConfigError as ConfigError  # where every reader of the settings finds it

# What config_id and the traced settings are a version of. 2: each stage section records its chosen
# implementation's settings only, no longer every implementation's keys at their defaults (the LLM's too:
# llama's n_ctx is not a scripted run's), so every id changed once.
CONFIG_VERSION = 2
CONDITION_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9'_-]{0,31}$")


def public_url(url: str) -> str:
    """``url`` without user, password, query or fragment: a token there must not reach a trace or a row."""
    if not url:
        return url
    parsed = urlsplit(url)
    host = parsed.hostname or ""
    netloc = f"[{host}]" if ":" in host else host
    if parsed.port is not None:
        netloc += f":{parsed.port}"
    return urlunsplit((parsed.scheme, netloc, parsed.path, "", ""))


@dataclass(frozen=True, slots=True)
class CloudConfig(ClientOptions):
    """Where an OpenAI-compatible LLM is ([llm] impl = "openai"): a real endpoint or the emulated cloud; and
    how the client calls it (``ClientOptions``: timeouts, retries, sentence stops... declared and checked there)."""

    base_url: str = ""  # up to the version, e.g. https://dashscope.aliyuncs.com/compatible-mode/v1
    emulator: str = ""  # "" = the real endpoint at base_url; else a compute profile: fast-70b-api, busy, instant
    emulator_answers: bool = True  # the emulator answers fixture questions with the manifest's answer column


@dataclass(frozen=True, slots=True)
class NetworkConfig:
    """The emulated link between the pipeline and the LLM endpoint (METHOD M14)."""

    profile: str = "none"  # none, loopback, lan, multi-hop, internet


@dataclass(frozen=True, slots=True)
class SentenceConfig:
    """``[sentences]``: where the answer's text is cut into sentences for the TTS."""

    first_cut_at_comma: bool = True
    min_first_chars: int = 4
    max_chars: int = 80


@dataclass(frozen=True, slots=True)
class RunConfig:
    """``[run]``: the condition, how many rounds, and how time passes."""

    condition: str = "B"
    rounds: int = 2
    pacing: str = "realtime"  # "realtime" or "fast"
    clock: str = "real"  # "real" or "virtual" (scripted stages only)
    turn_timeout_s: float = 60.0
    limit: int = 0  # 0 = every question


@dataclass(frozen=True, slots=True)
class FleetConfig:
    """Several devices sharing one pipeline: how many, and when each starts (METHOD M2: the queue)."""

    devices: int = 1
    arrival: str = "together"  # together: all at once; staggered: gap_ms apart; poisson: rate_per_s on average
    gap_ms: float = 500.0  # staggered
    rate_per_s: float = 1.0  # poisson
    seed: int = 7  # poisson arrival times


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    """The local model as a shared service: how many calls it runs at once, and who goes first."""

    concurrency: int = 0  # calls the model runs at once; 0 = no scheduler in front of it
    when_full: str = "queue"  # queue: wait for a slot; reject: fail the call at once
    max_waiting: int = 0  # queue: calls allowed to wait (0 = no limit); one more is rejected
    priority: bool = True  # interactive voice turns before background work


@dataclass(frozen=True, slots=True)
class BackgroundConfig:
    """Work that competes with the voice turns for the same model."""

    job: str = "none"  # none, summarise (periodic batch summaries), vision (vision-analysis-like prompts)
    period_ms: float = 2000.0  # a new job this often while the run lasts
    max_tokens: int = 64


@dataclass(frozen=True, slots=True)
class ProbeConfig:
    """What is sampled beside the run (never changes a latency, so not part of config_id)."""

    temp_command: str = ""  # prints a temperature in degrees C; "" = sysfs thermal zones and hwmon
    temp_interval_ms: float = 1000.0


@dataclass(frozen=True, slots=True)
class Config:
    """Every section of a run's settings, validated as a whole when built."""

    run: RunConfig = field(default_factory=RunConfig)
    vad: VadConfig = field(default_factory=VadConfig)
    asr: AsrConfig = field(default_factory=AsrConfig)
    llm: LlmConfig = field(default_factory=LlmConfig)
    cloud: CloudConfig = field(default_factory=CloudConfig)
    network: NetworkConfig = field(default_factory=NetworkConfig)
    sentences: SentenceConfig = field(default_factory=SentenceConfig)
    tts: TtsConfig = field(default_factory=TtsConfig)
    fleet: FleetConfig = field(default_factory=FleetConfig)
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    background: BackgroundConfig = field(default_factory=BackgroundConfig)
    probe: ProbeConfig = field(default_factory=ProbeConfig)

    def __post_init__(self) -> None:
        validate(self)

    def config_id(self, questions_digest: str, models: dict[str, str] | None = None) -> str:
        """A stable 12-hex-digit hash of everything that can change a latency.

        ``models`` identifies the model files actually loaded (name, quantisation, size),
        so a different file under the same path changes the id too.
        """
        identity = self.as_dict()
        for key in ("rounds", "limit"):
            identity["run"].pop(key)
        identity.pop("probe")
        identity["questions"] = questions_digest
        identity["models"] = models or {}
        canonical = json.dumps(identity, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()[:12]

    def as_dict(self) -> dict[str, Any]:
        """Every setting, with credentials taken out of URLs: what traces and reports may record."""
        data = {"config_version": CONFIG_VERSION, **dataclasses.asdict(self)}
        for role in STAGE_SECTIONS:
            data[role] = recorded(data[role])
        data["cloud"]["base_url"] = public_url(self.cloud.base_url)
        if self.probe.temp_command:  # a command may hold a host, a user or a password: never traced
            data["probe"]["temp_command"] = "(a command; not recorded)"
        return data


_CHOICES = {
    ("run", "pacing"): ("realtime", "fast"),
    ("run", "clock"): ("real", "virtual"),
    ("cloud", "continuation"): ("plain", "partial", "prefix", "vllm"),
    ("llm", "mode"): ("single", "per-sentence"),
    ("fleet", "arrival"): ("together", "staggered", "poisson"),
    ("scheduler", "when_full"): ("queue", "reject"),
    ("background", "job"): ("none", "summarise", "vision"),
}


def choices() -> dict[tuple[str, str], tuple[str, ...]]:
    """Every setting with a fixed set of values; each role's ``impl`` names come from the stage catalogue."""
    found = registry()
    return {**{(role, "impl"): found.names(role) for role in ROLES}, **_CHOICES}


def validate(cfg: Config) -> None:
    for (section, key), allowed in choices().items():
        value = getattr(getattr(cfg, section), key)
        if value not in allowed:
            raise ConfigError(f"[{section}] {key} = {value!r}: choose one of {', '.join(allowed)}")
    if not CONDITION_RE.match(cfg.run.condition):
        raise ConfigError(f"[run] condition = {cfg.run.condition!r}: use letters, digits, ' _ - (e.g. A, B, B')")
    positive = {
        "[run] rounds": cfg.run.rounds,
        "[run] turn_timeout_s": cfg.run.turn_timeout_s,
        "[llm] max_tokens": cfg.llm.max_tokens,
        "[llm] max_calls": cfg.llm.max_calls,
        "[fleet] devices": cfg.fleet.devices,
        "[fleet] rate_per_s": cfg.fleet.rate_per_s,
        "[background] period_ms": cfg.background.period_ms,
        "[background] max_tokens": cfg.background.max_tokens,
        "[probe] temp_interval_ms": cfg.probe.temp_interval_ms,
    }
    for name, value in positive.items():
        if value <= 0:
            raise ConfigError(f"{name} = {value}: must be positive")
    _validate_cloud(cfg)
    if cfg.scheduler.concurrency < 0 or cfg.scheduler.max_waiting < 0 or cfg.fleet.gap_ms < 0:
        raise ConfigError("[scheduler] concurrency, max_waiting and [fleet] gap_ms must be >= 0")
    if cfg.background.job != "none" and cfg.scheduler.concurrency == 0:
        raise ConfigError("[background] job needs [scheduler] concurrency > 0: the scheduler is what shares the model")
    if cfg.llm.history_rounds < 0:
        raise ConfigError(f"[llm] history_rounds = {cfg.llm.history_rounds}: must be >= 0")
    if cfg.run.limit < 0:
        raise ConfigError(f"[run] limit = {cfg.run.limit}: must be 0 (all) or positive")
    if cfg.sentences.max_chars < 8:
        raise ConfigError(f"[sentences] max_chars = {cfg.sentences.max_chars}: must be at least 8")
    if cfg.run.clock == "virtual" and cfg.run.pacing != "realtime":
        raise ConfigError("[run] clock = 'virtual' simulates real time: use pacing = 'realtime'")
    found = registry()
    real = [
        f"[{s}] impl = {getattr(cfg, s).impl!r}"
        for s in ("asr", "llm", "tts")
        if not found.get(s, getattr(cfg, s).impl).scripted
    ]
    if cfg.run.clock == "virtual" and real:
        raise ConfigError(f"[run] clock = 'virtual' needs simulated stages; real ones set: {', '.join(real)}")


def _validate_cloud(cfg: Config) -> None:
    cloud = cfg.cloud
    if cfg.llm.impl == "openai" and not cloud.emulator and not cloud.base_url.startswith(("http://", "https://")):
        raise ConfigError("[llm] impl = 'openai' needs [cloud] base_url (http:// or https://) or [cloud] emulator")
    if cfg.network.profile != "none" and cfg.llm.impl != "openai":
        raise ConfigError(f"[network] profile = {cfg.network.profile!r} applies to [llm] impl = 'openai' only")


def _build(cls: type[Any], data: dict[str, Any], where: str) -> Any:
    if issubclass(cls, StageSection):
        return cls.from_table(data, where)  # the implementation's own settings class reads the rest
    return read_table(cls, data, where)


def config_from_dict(data: dict[str, Any]) -> Config:
    sections = {f.name: f for f in dataclasses.fields(Config)}
    unknown = sorted(set(data) - set(sections))
    if unknown:
        raise ConfigError(f"unknown section(s): {', '.join(unknown)}; known: {', '.join(sections)}")
    defaults = Config()
    kwargs = {name: _build(type(getattr(defaults, name)), value, name) for name, value in data.items()}
    return Config(**kwargs)


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in extra.items():
        out[key] = _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def _layer(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """``extra`` laid over ``base``. A stage section whose later layer names another ``impl`` starts
    afresh but for the role's own settings: the earlier layer's other keys belong to the implementation it
    replaces (``simulator.toml``'s the oracle's ``[asr] latency`` means nothing to whisper; llama's ``n_ctx``
    nothing to a cloud), so carrying them over would refuse a sound config. The role's own (``[llm]
    max_tokens``) stay: condition A laid over B's settings asks the same of its LLM (M11)."""
    out = _merge(base, extra)
    for role, section in STAGE_SECTIONS.items():
        before, after = base.get(role), extra.get(role)
        if not (isinstance(before, dict) and isinstance(after, dict) and "impl" in after):
            continue
        if after["impl"] != before.get("impl", section.DEFAULT):
            kept = {k: v for k, v in before.items() if k in section.role_settings()}
            out[role] = {**kept, **after}
    return out


def load_config(
    paths: Path | list[Path] | None,
    overrides: dict[str, dict[str, Any]] | None = None,
    base: dict[str, dict[str, Any]] | None = None,
) -> Config:
    """Settings from ``base`` (an entry point's own defaults), then TOML files (later ones override earlier
    ones), then command-line overrides."""
    files = [paths] if isinstance(paths, Path) else list(paths or [])
    data: dict[str, Any] = _layer({}, base or {})
    for path in files:
        try:
            data = _layer(data, tomllib.loads(path.read_text(encoding="utf-8")))
        except FileNotFoundError:
            raise ConfigError(f"{path}: config file not found") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path}: not valid TOML ({exc})") from None
    data = _layer(data, overrides or {})
    try:
        return config_from_dict(data)
    except ConfigError as exc:
        names = ", ".join(str(p) for p in files)
        raise ConfigError(f"{names}: {exc}" if files else str(exc)) from None
