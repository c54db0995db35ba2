"""Every stage implementation, registered under its ``[role] impl`` name.

An implementation is declared once, at the bottom of its own module, as an
``Implementation``: its settings type (a frozen dataclass whose fields are read by
name from the ``[role]`` section of the settings), how to load its model once per
run, how to build its stage for one turn, and which languages it handles. The
registration is one line in its role's package (``stages/<role>/__init__.py``).

The settings take the valid ``impl`` names from here; the run's assembly looks the
implementation up here. Nothing else names an implementation, so adding one touches
its own module and that one line.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Protocol

ROLES = ("vad", "asr", "llm", "tts")


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


Build = Callable[[Any, Any, TurnInputs], Any]
Load = Callable[[Any, Models], Loaded]


@dataclass(frozen=True, slots=True)
class Implementation:
    """One implementation of a role.

    ``build(settings, engine, turn)`` returns the turn's stage; for the LLM role it returns the
    chat backend that the LLM stage drives. ``engine`` is what ``load`` returned (``None`` when
    it has no ``load``), or for an implementation with an ``endpoint`` the chat backend the run
    opened on that endpoint.
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

    def settings_from(self, section: object) -> Any:
        """This implementation's settings, read by field name from its role's settings section."""
        return self.settings(**{f.name: getattr(section, f.name) for f in fields(self.settings)})


class Registry:
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


@functools.cache
def registry() -> Registry:
    """Every registered implementation (each role's package lists its own)."""
    from stages import asr, llm, tts, vad

    return Registry((*vad.IMPLEMENTATIONS, *asr.IMPLEMENTATIONS, *llm.IMPLEMENTATIONS, *tts.IMPLEMENTATIONS))
