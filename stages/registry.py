"""The contract every stage implementation is registered under: what one is, and how its settings are read.

An implementation is declared once, at the bottom of its own module, as an
``Implementation``: its settings type (a frozen dataclass, every field defaulted, that
validates itself in ``__post_init__``, raising ``ConfigError`` naming the key), how to
load its model once per run, how to build its stage for one turn, and which languages it
handles. Its settings are the keys of its ``[role]`` table other than ``impl`` and the
role's own (``[tts] impl = "espeak"`` beside ``words_per_minute = 160``; ``[llm] impl =
"llama"`` beside ``n_ctx = 2048``, next to the LLM role's ``max_tokens``), read here by
``settings_of``. The class's defaults are the only ones: nothing else writes them again.
The registration is one line in its role's package (``stages/<role>/__init__.py``);
``stages/catalog.py`` gathers them. This module imports no implementation, so every
implementation may import it without a circle.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Protocol

ROLES = ("vad", "asr", "llm", "tts")


class ConfigError(ValueError):
    """A setting is missing, unknown or out of range; the message names it."""


def require_positive(role: str, **values: float) -> None:
    """Refuses the first of ``values`` that is not positive, naming its key."""
    for name, value in values.items():
        if value <= 0:
            raise ConfigError(f"[{role}] {name} = {value}: must be positive")


@dataclass(frozen=True, slots=True)
class TurnInputs:
    """What a stage may know about the turn it is built for."""

    text: str  # the question's reference text (what an oracle ASR "hears")
    language: str
    answer: str = ""  # the manifest's answer (what a scripted LLM says), "" when none
    tool: str = ""  # the tool a scripted LLM calls, "" for none
    tool_arguments: str = "{}"
    salt: int = 0  # varies simulated jitter per turn, the same in every run


class Models(Protocol):
    """What loading may ask of the run: a model's file, and its identity for config_id."""

    def resolve(self, name: str) -> Path: ...

    def identity(self, name: str, path: Path) -> str: ...


@dataclass(frozen=True, slots=True)
class Loaded:
    """A model loaded once per run, shared by every turn."""

    engine: object
    identity: str  # what config_id records of it ("" when nothing identifies it)


@dataclass(frozen=True, slots=True)
class Served:
    """An OpenAI-compatible endpoint the run started or reaches for an implementation registered with an
    ``endpoint``: what that implementation's client is opened on.

    ``client`` holds the client's own settings from ``[cloud]`` (timeouts, retries, continuation...),
    by their names there; ``connect_to`` sends every connection to that ``(host, port)`` instead (the
    link emulator in front of the endpoint)."""

    base_url: str
    api_key: str | None
    client: Mapping[str, Any]
    connect_to: tuple[str, int] | None = None


Build = Callable[[Any, Any, TurnInputs], Any]
Load = Callable[[Any, Models], Loaded]
Open = Callable[[Any, Served], AbstractAsyncContextManager[Any]]


def load_file(models: Models, name: str, engine: Callable[[Path], object]) -> Loaded:
    """The model file ``name`` stands for, opened by ``engine``, with the identity config_id records of it."""
    path = models.resolve(name)
    return Loaded(engine(path), models.identity(name, path))


@dataclass(frozen=True, slots=True)
class Implementation:
    """One implementation of a role.

    ``build(settings, engine, turn)`` returns the turn's stage; for the LLM role it returns the
    chat backend that the LLM stage drives. ``engine`` is what ``load`` returned (``None`` when
    it has no ``load``), or for an implementation with an ``endpoint`` the chat backend that
    ``open`` opened, once per run, on the endpoint the run started for it.
    """

    role: str
    name: str
    settings: type[Any]
    build: Build
    load: Load | None = None
    languages: tuple[str, ...] | None = None  # None: any language
    detects_language: bool = False  # an ASR that can tell a question's language when none is given
    scripted: bool = False  # its latencies are data, not measurements
    endpoint: str = ""  # an LLM behind an endpoint the run starts and opens: "llama-server", "cloud"
    label: str = ""  # what rows say the LLM endpoint is ("in-process llama.cpp"); endpoints name themselves
    open: Open | None = None  # with an ``endpoint``: its client on the run's ``Served`` endpoint, for the run

    def settings_of(self, table: Mapping[str, Any], role_keys: Sequence[str] = ()) -> Any:
        """Its settings from the keys of its ``[role]`` table other than ``impl`` and ``role_keys`` (the
        role's own, read by the role's section); validated by its class. An unknown key is refused with
        every key the table may hold."""
        known = [f.name for f in fields(self.settings)]
        unknown = sorted(set(table) - set(known))
        if unknown:
            keys = ", ".join(["impl", *role_keys, *known])
            raise ConfigError(
                f"[{self.role}] unknown setting(s) for impl = {self.name!r}: {', '.join(unknown)}; known: {keys}"
            )
        return read_table(self.settings, table, self.role)

    def settings_from(self, section: object) -> Any:
        """Its settings, as its role's section (``[role]``, read into ``settings``) holds them."""
        own = getattr(section, "settings", None)
        if not isinstance(own, self.settings):
            raise ValueError(f"[{self.role}] holds {type(own).__name__}, not {self.name}'s settings")
        return own


class Registry:
    """Every implementation by role and ``impl`` name; a name registered twice for a role is refused."""

    def __init__(self, implementations: tuple[Implementation, ...]) -> None:
        self._by_key: dict[tuple[str, str], Implementation] = {}
        for impl in implementations:
            key = (impl.role, impl.name)
            if impl.role not in ROLES:
                raise ValueError(f"{impl.name}: unknown role {impl.role!r}")
            if key in self._by_key:
                raise ValueError(f"[{impl.role}] impl = {impl.name!r} is registered twice")
            self._by_key[key] = impl

    def names(self, role: str) -> tuple[str, ...]:
        return tuple(name for r, name in self._by_key if r == role)

    def get(self, role: str, name: str) -> Implementation:
        try:
            return self._by_key[(role, name)]
        except KeyError:
            raise KeyError(f"[{role}] impl = {name!r}: choose one of {', '.join(self.names(role))}") from None

    def all(self) -> tuple[Implementation, ...]:
        return tuple(self._by_key.values())


def read_table(cls: type[Any], data: Mapping[str, Any], where: str) -> Any:
    """A settings dataclass from a TOML table: unknown keys refused, each value checked against its default's
    type (ints widen to floats), nested tables built the same way; the class validates the rest itself, and
    a ``ValueError`` it raises names the table (``[llm.latency] latency first_ms must be >= 0...``)."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"[{where}] must be a table")
    names = [f.name for f in dataclasses.fields(cls)]
    unknown = sorted(set(data) - set(names))
    if unknown:
        raise ConfigError(f"[{where}] unknown setting(s): {', '.join(unknown)}; known: {', '.join(names)}")
    defaults = cls()
    kwargs = read_values({name: getattr(defaults, name) for name in data}, data, where)
    try:
        return cls(**kwargs)
    except ConfigError:
        raise
    except ValueError as exc:  # a shared value type's own check (LatencyProfile), which knows no table
        raise ConfigError(f"[{where}] {exc}") from None


def read_values(defaults: Mapping[str, Any], data: Mapping[str, Any], where: str) -> dict[str, Any]:
    """``data``'s values checked against the type of each one's default in ``defaults``; a table whose
    default is a settings dataclass is read into one (``read_table``)."""
    out: dict[str, Any] = {}
    for name, value in data.items():
        current = defaults[name]
        if isinstance(value, type(current)) and dataclasses.is_dataclass(current):
            out[name] = value  # already built (settings written in Python rather than TOML)
        elif dataclasses.is_dataclass(current):
            out[name] = read_table(type(current), value, f"{where}.{name}")
        else:
            out[name] = _coerce(value, current, f"{where}] {name}")
    return out


def _coerce(value: Any, default: Any, where: str) -> Any:
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise ConfigError(f"[{where} = {value!r}: expected true or false")
        return value
    if isinstance(default, int) and not isinstance(value, bool) and isinstance(value, int):
        return value
    if isinstance(default, float) and not isinstance(value, bool) and isinstance(value, (int, float)):
        return float(value)
    if isinstance(default, str) and isinstance(value, str):
        return value
    raise ConfigError(f"[{where} = {value!r}: expected {type(default).__name__}")
