"""The ramp's plan: its steps (devices per step), how long each is held, and what "holds" means (the margin).

Parsed and checked before anything starts: a value no ramp can run is refused with its name and value.

The margin: a step holds when its P90 silence is at most the first (1-device) step's P90 plus
``max(margin_pct % of it, margin_floor_ms)``. 10 % is the default because it is a change a user
can be told about without it being lost in the P90's own spread at ``min_turns`` turns; the floor
(50 ms by default) keeps a fast server, whose 10 % is a few ms, from failing a step on a shift the
size of one scheduler tick or one network hiccup. Both are choices, stated in capacity.json; neither
is a measured threshold of perception.

``min_turns`` (default 20): a step's P90 of fewer turns rests on one or two values; with 20 it is
the mean of the 18th and 19th values, and a bootstrap interval has something to resample. A step
short of it is held longer (up to ``max_hold_s``), then marked ``too_few``.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass

DEFAULT_STEPS = (1, 2, 5, 10, 20, 50, 100, 200)
DEFAULT_MARGIN_PCT = 10.0
DEFAULT_MARGIN_FLOOR_MS = 50.0
DEFAULT_MIN_TURNS = 20
HOLD_TIMES_FOR_MAX = 5  # the default longest hold: this many holds (the 1-device step needs it most)


class PlanError(ValueError):
    """A ramp plan that cannot be run: names the option, the value and what is expected."""


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|min|h)?\s*$")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, None: 1.0}


def parse_duration(option: str, text: str) -> float:
    """``60s``, ``2m``, ``500ms``, ``1h`` or a plain number of seconds, in seconds."""
    found = _DURATION.match(text)
    if found is None:
        raise PlanError(f"{option} {text!r}: a duration such as 60s, 2m or 500ms")
    return float(found.group(1)) * _UNIT_S[found.group(2)]


def parse_steps(text: str) -> tuple[int, ...]:
    """``1,2,5,10``: the devices of each step, strictly increasing, each at least 1."""
    steps = []
    for part in text.split(","):
        try:
            steps.append(int(part.strip()))
        except ValueError:
            raise PlanError(f"--steps {text!r}: {part.strip()!r} is not a whole number of devices") from None
    return tuple(steps)


def parse_margin(text: str) -> float:
    """``10%`` or ``10``: the margin in percent of the first step's P90 silence."""
    value = text.strip().removesuffix("%")
    try:
        return float(value)
    except ValueError:
        raise PlanError(f"--margin {text!r}: a percentage such as 10%") from None


@dataclass(frozen=True, slots=True)
class RampPlan:
    """The ramp: devices per step, hold per step, and the margin a step must stay within."""

    steps: tuple[int, ...] = DEFAULT_STEPS
    hold_s: float = 60.0
    max_hold_s: float = 300.0  # a step short of min_turns is held until it has them, up to this
    margin_pct: float = DEFAULT_MARGIN_PCT
    margin_floor_ms: float = DEFAULT_MARGIN_FLOOR_MS
    min_turns: int = DEFAULT_MIN_TURNS

    def __post_init__(self) -> None:
        check_steps(self.steps)
        if self.hold_s <= 0:
            raise PlanError(f"--hold {self.hold_s:g}s: more than 0 seconds")
        if self.max_hold_s < self.hold_s:
            raise PlanError(f"--max-hold {self.max_hold_s:g}s: at least the hold ({self.hold_s:g}s)")
        if self.margin_pct < 0:
            raise PlanError(f"--margin {self.margin_pct:g}%: 0 or more")
        if self.margin_floor_ms < 0:
            raise PlanError(f"--margin-floor-ms {self.margin_floor_ms:g}: 0 or more")
        if self.min_turns < 1:
            raise PlanError(f"--min-turns {self.min_turns}: at least 1")

    def allowed_ms(self, baseline_p90_ms: float) -> float:
        """The highest P90 silence that still holds, given the first step's."""
        return baseline_p90_ms + max(baseline_p90_ms * self.margin_pct / 100, self.margin_floor_ms)

    def check_turn_fits(self, longest_question_s: float) -> None:
        """A hold shorter than the longest question cannot hold a single turn of it."""
        if self.hold_s < longest_question_s:
            raise PlanError(
                f"--hold {self.hold_s:g}s: shorter than a turn (the longest question selected is "
                f"{longest_question_s:.1f} s of audio before any answer)"
            )


def check_steps(steps: Sequence[int]) -> None:
    if not steps:
        raise PlanError("--steps: at least one step")
    for n in steps:
        if n < 1:
            raise PlanError(f"--steps: {n} devices: every step needs at least 1 device")
    for a, b in itertools.pairwise(steps):
        if b <= a:
            raise PlanError(f"--steps: {b} after {a}: the steps must increase")
