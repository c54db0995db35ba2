"""What the emulated users do during a capacity ramp (the load profile), as data: a TOML ``[load]`` table,
overridden by the command line, checked before anything starts.

Every value enters each step's ``config_id`` (``identity``): two ramps whose users behave differently
never share an identity. The device count of each step enters it through ``[fleet] devices``.

Keys of ``[load]``:

- ``listen_mode``: ``realtime`` (the default: one ``listen start`` per connection and the microphone
  streams all the time, as the firmware does, so an idle device costs the server what a real one costs)
  or ``auto`` (the device streams only while it asks; the server's VAD ends each question).
- ``think_s``: seconds between a device hearing its answer and asking its next question; or
  ``questions_per_hour``: each device's rate, the think time then being what is left of each
  ``3600 / rate`` seconds after the turn (never negative). One of the two; ``think_s = 3`` when neither.
- ``session_s``: a device's connection is closed and opened again after this many seconds (between
  questions); 0: one connection for the whole step.
- ``arrival``: ``together``, ``staggered`` (evenly over ``ramp_s``) or ``poisson`` (``N / ramp_s`` per
  second on average, drawn with ``seed``); ``ramp_s``: how long the devices take to arrive.
- ``limit``: only the first N questions (0: all); ``ids``: only these question ids (in the set's order).
- ``seed``: the poisson arrivals' seed.
"""

from __future__ import annotations

import dataclasses
import json
import math
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

LISTEN_MODES = ("realtime", "auto")
ARRIVALS = ("together", "staggered", "poisson")
DEFAULT_THINK_S = 3.0


class ProfileError(ValueError):
    """A load profile that cannot be run: names the key, the value and what is expected."""


@dataclass(frozen=True, slots=True)
class LoadProfile:
    """How every emulated user of a capacity ramp behaves (see the module docstring for each key)."""

    listen_mode: str = "realtime"
    think_s: float | None = None
    questions_per_hour: float | None = None
    session_s: float = 0.0
    arrival: str = "staggered"
    ramp_s: float = 10.0
    limit: int = 0
    ids: tuple[str, ...] = ()
    seed: int = 7

    def __post_init__(self) -> None:
        for key in ("think_s", "questions_per_hour", "session_s", "ramp_s"):
            value = getattr(self, key)
            if isinstance(value, int) and not isinstance(value, bool):  # 3 and 3.0: one setting, one identity
                object.__setattr__(self, key, float(value))
        object.__setattr__(self, "ids", tuple(self.ids))
        check(self)

    def think_after(self, turn_s: float) -> float:
        """Seconds the user waits after a turn that took ``turn_s`` before asking again."""
        if self.questions_per_hour is not None:
            return max(0.0, 3600.0 / self.questions_per_hour - turn_s)
        return DEFAULT_THINK_S if self.think_s is None else self.think_s

    def as_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["ids"] = list(self.ids)
        return data

    def identity(self) -> str:
        """The profile as one canonical string: what enters ``config_id``."""
        return json.dumps(self.as_dict(), sort_keys=True, separators=(",", ":"))

    def arrival_settings(self, devices: int) -> dict[str, Any]:
        """The ``[fleet]`` section that starts ``devices`` devices over ``ramp_s`` as ``arrival`` says."""
        fleet: dict[str, Any] = {"devices": devices, "arrival": self.arrival, "seed": self.seed}
        if self.arrival == "staggered":
            fleet["gap_ms"] = self.ramp_s * 1000 / devices
        elif self.arrival == "poisson":
            fleet["rate_per_s"] = devices / self.ramp_s
        return fleet


def _number(key: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ProfileError(f"[load] {key} = {value!r}: a finite number is expected")
    return float(value)


def check(p: LoadProfile) -> None:
    """Refuse values no ramp can run, naming the key and the value."""
    if p.listen_mode not in LISTEN_MODES:
        raise ProfileError(f"[load] listen_mode = {p.listen_mode!r}: one of {', '.join(LISTEN_MODES)}")
    if p.arrival not in ARRIVALS:
        raise ProfileError(f"[load] arrival = {p.arrival!r}: one of {', '.join(ARRIVALS)}")
    if p.think_s is not None and p.questions_per_hour is not None:
        raise ProfileError(
            f"[load] think_s = {p.think_s!r} and questions_per_hour = {p.questions_per_hour!r}: give one of the two"
        )
    if p.think_s is not None and _number("think_s", p.think_s) < 0:
        raise ProfileError(f"[load] think_s = {p.think_s!r}: 0 or more seconds")
    if p.questions_per_hour is not None and _number("questions_per_hour", p.questions_per_hour) <= 0:
        raise ProfileError(f"[load] questions_per_hour = {p.questions_per_hour!r}: more than 0")
    if _number("session_s", p.session_s) < 0:
        raise ProfileError(f"[load] session_s = {p.session_s!r}: 0 (the whole step) or more seconds")
    if _number("ramp_s", p.ramp_s) < 0:
        raise ProfileError(f"[load] ramp_s = {p.ramp_s!r}: 0 or more seconds")
    if p.arrival == "poisson" and p.ramp_s == 0:
        raise ProfileError("[load] ramp_s = 0: poisson arrivals need a ramp time over which to arrive")
    if isinstance(p.limit, bool) or not isinstance(p.limit, int) or p.limit < 0:
        raise ProfileError(f"[load] limit = {p.limit!r}: 0 (all questions) or more")
    if isinstance(p.seed, bool) or not isinstance(p.seed, int):
        raise ProfileError(f"[load] seed = {p.seed!r}: an integer")
    if not all(isinstance(i, str) and i for i in p.ids):
        raise ProfileError(f"[load] ids = {list(p.ids)!r}: question ids (non-empty strings)")


FIELDS = tuple(f.name for f in dataclasses.fields(LoadProfile))


def load_profile(path: Path | None, overrides: Mapping[str, Any]) -> LoadProfile:
    """The ``[load]`` table of ``path`` (none: defaults), then ``overrides`` (the command line; None: not given)."""
    table: dict[str, Any] = {}
    if path is not None:
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise ProfileError(f"--profile {path}: cannot be read ({exc.strerror or exc})") from None
        except tomllib.TOMLDecodeError as exc:
            raise ProfileError(f"--profile {path}: not TOML ({exc})") from None
        unknown_tables = sorted(set(data) - {"load"})
        if unknown_tables:
            raise ProfileError(f"--profile {path}: unknown table(s) {', '.join(unknown_tables)}; only [load]")
        table = dict(data.get("load", {}))
    table.update({k: v for k, v in overrides.items() if v is not None})
    unknown = sorted(set(table) - set(FIELDS))
    if unknown:
        raise ProfileError(f"[load] {unknown[0]}: unknown key; the keys are {', '.join(FIELDS)}")
    if "ids" in table:
        ids = table["ids"]
        if isinstance(ids, str):
            ids = [i.strip() for i in ids.split(",") if i.strip()]
        if not isinstance(ids, Sequence):
            raise ProfileError(f"[load] ids = {ids!r}: a list of question ids")
        table["ids"] = tuple(ids)
    return LoadProfile(**table)
