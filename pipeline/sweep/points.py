"""A sweep's plan: exactly one variable, its values in the order given, one run id per point.

The order of the values is the sweep's direction: the report reads "grows with the variable"
from the first value listed to the last, so list them from small to large (``devices=1,2,4``,
``model=small,default,large``). Run ids are ``<sweep_id>-<variable>-<value>``, the value made
safe for a file name (``B'`` -> ``Bp``; a model path -> its file stem).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import PurePath

from pipeline.settings.config import Config
from pipeline.sweep.variables import PRESETS, Overrides, SweepError, Variable, get_variable, overrides, parse_value

REPLAY = "pipeline.replay"
OFFLINE = "pipeline.offline"  # condition B': the replay inside a network namespace, with a verdict
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


@dataclass(frozen=True, slots=True)
class Point:
    """One point of a sweep: its value, its run id, and the settings it overrides."""

    value: str
    run_id: str
    overrides: Overrides
    module: str = REPLAY


@dataclass(frozen=True, slots=True)
class SweepPlan:
    """A sweep's points, in order, over one variable (M15)."""

    sweep_id: str
    variable: Variable
    points: tuple[Point, ...]


def parse_vary(texts: Sequence[str]) -> tuple[Variable, list[str]]:
    """``["max_tokens=32,64,128"]`` -> the variable and its values. Exactly one variable (M15)."""
    if len(texts) != 1:
        named = ", ".join(t.split("=", 1)[0] for t in texts) or "none"
        raise SweepError(
            f"a sweep varies exactly one variable (M15), got {len(texts)} ({named}): "
            "run one sweep per variable, each holding the others"
        )
    name, sep, listed = texts[0].partition("=")
    if not sep:
        raise SweepError(f"--vary {texts[0]!r}: write NAME=V1,V2,... (e.g. max_tokens=32,64,128)")
    variable = get_variable(name.strip())
    preset = PRESETS.get(variable.name, {}).get(listed.strip())
    values = [parse_value(variable, v) for v in (preset or listed.split(","))]
    if len(values) < 2:
        raise SweepError(f"{variable.name}: a sweep needs at least two values, got {', '.join(values)}")
    repeated = sorted({v for v in values if values.count(v) > 1})
    if repeated:
        raise SweepError(f"{variable.name}: value(s) listed twice: {', '.join(repeated)}")
    return variable, values


def slug(value: str) -> str:
    """A value as part of a run id: a path by its file stem, anything else with unsafe characters replaced."""
    text = PurePath(value).stem if "/" in value else value
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text.replace("'", "p")).strip("_") or "value"


def make_plan(sweep_id: str, variable: Variable, values: Sequence[str], base: Config) -> SweepPlan:
    if not NAME_RE.match(sweep_id):
        raise SweepError(f"--name {sweep_id!r}: use letters, digits, '.', '_' or '-' (at most 64)")
    run_ids: list[str] = []
    points = []
    for value in values:
        run_id = f"{sweep_id}-{variable.name}-{slug(value)}"
        if run_id in run_ids:  # two values with the same slug (two paths with one stem)
            run_id = f"{run_id}-{len(run_ids) + 1}"
        run_ids.append(run_id)
        module = OFFLINE if variable.name == "condition" and value == "B'" else REPLAY
        points.append(Point(value, run_id, overrides(variable, value, base), module))
    return SweepPlan(sweep_id, variable, tuple(points))


def toml_text(data: Overrides) -> str:
    """Overrides as a TOML file: one table per section; values are numbers, booleans or strings
    (a JSON string is a valid TOML basic string)."""
    lines = []
    for section, values in data.items():
        lines.append(f"[{section}]")
        lines.extend(f"{key} = {json.dumps(value)}" for key, value in values.items())
    return "\n".join(lines) + "\n"
