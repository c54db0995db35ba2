"""The variables a sweep may vary, and the settings each value overrides (METHOD M15, M18, M19).

A variable names the settings its points may differ in (``settings``, dotted, ``fnmatch``
patterns): ``sweep.json`` records them, and the report refuses a sweep whose runs differ in
anything else (M11). Everything not named here is held: it comes from the same ``--config``
files for every point.

- ``devices``: ``[fleet] devices``, emulated devices asking at once. Their turns queue only
  where a scheduler stands in front of the model (``[scheduler] concurrency`` > 0), so the
  sweep warns when none does.
- ``model``: ``[llm] model``; ``small``, ``default`` and ``large`` are the packaged
  ``smollm2-135m``, ``qwen2.5-coder-0.5b`` and ``qwen2.5-coder-1.5b``; any other registry name or GGUF
  path is taken as given.
- ``history_rounds``, ``max_tokens``: the LLM role's ``[llm]`` setting of that name; ``threads``,
  ``prompt_cache``: llama.cpp's (``[llm] impl`` llama or server), refused by another backend.
- ``network``: ``[network] profile``. A profile applies to an OpenAI-compatible endpoint only,
  so where the base settings run the LLM elsewhere every point gets the emulated cloud
  (``fast-70b-api``) and condition A, the same for all points.
- ``condition``: ``A`` (the emulated cloud behind the ``internet`` profile, as
  ``pipeline.experiment`` runs it), ``B`` (the base settings) or ``B'`` (B offline, through
  ``pipeline.offline``).
- ``endpoint``: the end-of-turn detector and how long it waits, ``IMPL[:PROFILE][@MS]``: ``silero@400``
  (``[vad] impl = "silero"``, ``silence_ms = 400``), ``silero:xiaozhi-server`` (the real server's rule and
  its shipped 200 ms; ``@MS`` sets its ``[vad.xiaozhi_server] silence_ms``), ``ten@300``, ``fsmn@500``,
  ``smart-turn@200`` (Smart Turn stacked on its inner VAD, which hears a pause of 200 ms). The whole
  ``[vad]`` section is the point's own: the base's other VAD keys do not carry over. ``endpoint=frontier``
  is the preset ``FRONTIER``: read on questions with a truth (``audio_fixtures/paused/``), the report's
  section "What the silence costs" draws their frontier.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any

from pipeline.settings.config import Config
from pipeline.settings.stage_sections import implementation_keys

Overrides = dict[str, dict[str, Any]]

MODEL_SIZES = {"small": "smollm2-135m", "default": "qwen2.5-coder-0.5b", "large": "qwen2.5-coder-1.5b"}
EMULATED_CLOUD: Overrides = {
    "llm": {"impl": "openai", "model": "emulated-cloud"},
    "cloud": {"emulator": "fast-70b-api"},
}
CONDITIONS = ("A", "B", "B'")
# the end-of-turn settings a frontier is drawn over: Silero waiting from 200 ms (the real server's wait) to 900 ms,
# the real server's own rule, TEN VAD short and long, and Smart Turn on Silero's 200 ms pause
FRONTIER = (
    "silero@200",
    "silero@400",
    "silero@600",
    "silero@900",
    "silero:xiaozhi-server",
    "ten@300",
    "ten@600",
    "smart-turn@200",
)
PRESETS = {"endpoint": {"frontier": FRONTIER}}  # a variable's named value lists: ``--vary endpoint=frontier``
ENDPOINT_RE = re.compile(r"^(?P<impl>[a-z][a-z0-9-]*)(?::(?P<profile>[a-z][a-z0-9-]*))?(?:@(?P<ms>[0-9]+))?$")


class SweepError(ValueError):
    """A sweep that cannot be planned (an unknown variable, a value of the wrong kind); the message says why."""


@dataclass(frozen=True, slots=True)
class Variable:
    """A setting a sweep may vary: where it lives, what values it takes, what the points may differ in."""

    name: str
    section: str  # where the setting lives ([section] key)
    key: str
    kind: str  # "int", "choice" (one of ``choices``), "name" (any text) or "endpoint" (``IMPL[:PROFILE][@MS]``)
    settings: tuple[str, ...]  # what the points may differ in (the M11 check)
    choices: tuple[str, ...] = ()


def _condition_settings() -> tuple[str, ...]:
    """What a condition point may differ in: where the LLM runs, every LLM backend's own keys (the one
    each point's backend has), the cloud and the network; never the LLM role's own (``max_tokens``...)."""
    backends = tuple(p for key in implementation_keys("llm") for p in (f"llm.{key}", f"llm.{key}.*"))
    return ("run.condition", "llm.impl", *backends, "cloud.*", "network.*")


def _llm(name: str, kind: str, choices: tuple[str, ...] = ()) -> Variable:
    return Variable(name, "llm", name, kind, (f"llm.{name}",), choices)


VARIABLES: dict[str, Variable] = {
    v.name: v
    for v in (
        Variable("devices", "fleet", "devices", "int", ("fleet.devices",)),
        Variable("model", "llm", "model", "name", ("llm.model",)),
        _llm("history_rounds", "int"),
        _llm("max_tokens", "int"),
        _llm("threads", "int"),
        _llm("parallel", "int"),
        _llm("prompt_cache", "choice", choices=("off", "prefix", "carry")),
        Variable("network", "network", "profile", "name", ("network.profile",)),
        Variable("condition", "run", "condition", "choice", _condition_settings(), choices=CONDITIONS),
        Variable("endpoint", "vad", "impl", "endpoint", ("vad.*",)),
    )
}


def get_variable(name: str) -> Variable:
    try:
        return VARIABLES[name]
    except KeyError:
        raise SweepError(f"unknown variable {name!r}; choose one of {', '.join(VARIABLES)}") from None


def parse_value(variable: Variable, text: str) -> str:
    """``text`` checked against the variable's kind; the value as the sweep names it.

    Ranges are the settings' own to check (``pipeline.settings.config``): a value they refuse
    makes a failed point, recorded, while the others run.
    """
    value = text.strip()
    if not value:
        raise SweepError(f"{variable.name}: an empty value")
    if variable.kind == "int":
        try:
            return str(int(value))
        except ValueError:
            raise SweepError(f"{variable.name}={value}: a whole number is expected") from None
    if variable.kind == "choice" and value not in variable.choices:
        raise SweepError(f"{variable.name}={value}: choose from {', '.join(variable.choices)}")
    if variable.kind == "endpoint":
        endpoint_section(value)  # refuses a value that names no detector
    return value


def endpoint_section(value: str) -> dict[str, Any]:
    """The ``[vad]`` section an ``endpoint`` value names: the implementation, its profile, how long it waits."""
    found = ENDPOINT_RE.match(value)
    if found is None:
        raise SweepError(f"endpoint={value}: write IMPL[:PROFILE][@MS], e.g. silero@400, silero:xiaozhi-server")
    impl, profile, wait = found["impl"], found["profile"], found["ms"]
    section: dict[str, Any] = {"impl": impl}
    if profile:
        section["profile"] = profile
    if wait is not None:
        if profile == "xiaozhi-server":  # the server's rule keeps its own settings (stages/vad/silero.py)
            section["xiaozhi_server"] = {"silence_ms": int(wait)}
        else:
            section["inner_silence_ms" if impl == "smart-turn" else "silence_ms"] = int(wait)
    return section


def setting_value(variable: Variable, value: str) -> int | str:
    """What the setting is set to: the number, the packaged model behind a size, or the text."""
    if variable.kind == "int":
        return int(value)
    if variable.name == "model":
        return MODEL_SIZES.get(value, value)
    return value


def overrides(variable: Variable, value: str, base: Config) -> Overrides:
    """The settings this point overrides on top of the base ``--config`` files."""
    if variable.name == "condition":
        return {"run": {"condition": value}, **(_cloud("internet") if value == "A" else {})}
    if variable.name == "endpoint":
        return {"vad": endpoint_section(value)}
    own: Overrides = {variable.section: {variable.key: setting_value(variable, value)}}
    if variable.name == "network" and base.llm.impl != "openai":
        # held the same for every point: only the profile differs between them
        return {**_cloud(str(own["network"]["profile"])), "run": {"condition": "A"}}
    return own


def _cloud(profile: str) -> Overrides:
    return {**{k: dict(v) for k, v in EMULATED_CLOUD.items()}, "network": {"profile": profile}}


def warnings(variable: Variable, base: Config) -> list[str]:
    """What makes this sweep show less than it seems to: said before it runs, with the fix."""
    out = []
    if variable.name == "devices" and base.scheduler.concurrency == 0:
        out.append(
            "no scheduler in front of the model ([scheduler] concurrency = 0): the turns' queue wait is not "
            "recorded (queue_wait_ms stays empty); set [scheduler] concurrency = 1 to see the queue (M19)"
        )
    own = {f.name for f in dataclasses.fields(base.llm.settings)} | set(base.llm.role_settings())
    if variable.section == "llm" and variable.key not in own:
        out.append(
            f"[llm] impl = {base.llm.impl!r} has no {variable.key} (another backend's setting): every point will "
            "be refused; sweep it on settings whose [llm] impl has it (llama, server)"
        )
    if variable.name == "model" and base.llm.impl == "scripted":
        out.append(
            "[llm] impl = 'scripted': model changes only a label and config_id, not the scripted "
            "latencies; use real models to read this sweep"
        )
    return out
