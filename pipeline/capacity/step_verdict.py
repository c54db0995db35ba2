"""A capacity step's figures from its rows, its verdict, and the ramp's knee: pure functions, no I/O.

A step **holds** when its P90 silence (``first_audible_ms``: end of speech -> first audible) is within
the plan's margin of the first step's (``RampPlan.allowed_ms``) and none of its turns failed. It is
**void** when the load generator itself fell behind (its paced sends' lateness P99 above
``VOID_LATENESS_MS``): the figures then measure the generator, so a void step is neither held nor
failed, and the ramp stops (a larger step would be later still). It **fails** otherwise; a step with
fewer than ``min_turns`` measured turns is **too_few**, neither held nor failed.

The knee is the last step that held before the first that failed; ``devices held`` is its device
count. Warm-up turns (each device's first question on a fresh connection to the server: M6) are
left out of every figure, as everywhere in the lab.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from pipeline.analysis.bootstrap import difference_interval, quantile_interval
from pipeline.analysis.numbers import quantile
from pipeline.capacity.ramp_plan import RampPlan
from pipeline.records.ramp_result import FAILURE_KINDS, Quantiles, Step
from pipeline.records.turn_row import TurnRow

VOID_LATENESS_MS = 5.0  # the uplink lateness goal (issue #32): a generator later than this measures itself
REFUSED = "refused"  # a device that could not open its session (written by the ramp's devices)
NO_ANSWER = frozenset({"empty_transcript", "no_audio_out", "timeout", "tts_no_audio"})
CUT = frozenset({"disconnected"})


def failure_kind(error: str) -> str:
    """The kind of a failed turn's ``error``: no_answer, cut_connection, refused or other."""
    if error in NO_ANSWER:
        return "no_answer"
    if error in CUT:
        return "cut_connection"
    if error == REFUSED:
        return "refused"
    return "other"


@dataclass(frozen=True, slots=True)
class Figures:
    """What a step's rows say: measured turns, failures by kind, silence and whole turn."""

    turns: int
    failures: dict[str, int]
    silence_ms: Quantiles
    whole_turn_p50_ms: float | None
    whole_turn_p90_ms: float | None

    @property
    def failed(self) -> int:
        return sum(self.failures.values())


def quantiles(values: Sequence[float], name: str) -> Quantiles:
    """P50/P90/P99 and their bootstrap intervals (``pipeline.analysis.bootstrap``, seeded by ``name``)."""
    if not values:
        return Quantiles()
    ordered = np.sort(np.asarray(values, dtype=np.float64))

    def ci(q: float) -> tuple[float, float] | None:
        found = quantile_interval(ordered, q, name)
        return None if found is None else (found.low, found.high)

    return Quantiles(
        quantile(ordered, 0.5),
        quantile(ordered, 0.9),
        quantile(ordered, 0.99),
        ci(0.5),
        ci(0.9),
        ci(0.99),
    )


def figures(rows: Iterable[TurnRow], name: str = "capacity") -> Figures:
    """A step's figures from its rows (warm-up rows left out); ``name`` seeds the bootstrap."""
    measured = [r for r in rows if not r.warmup]
    kinds = Counter(failure_kind(r.error) for r in measured if not r.ok)
    silence = [r.first_audible_ms for r in measured if r.ok and r.first_audible_ms is not None]
    whole = [r.whole_turn_ms for r in measured if r.ok and r.whole_turn_ms is not None]
    return Figures(
        len(measured),
        {k: kinds.get(k, 0) for k in FAILURE_KINDS},
        quantiles(silence, f"{name}|first_audible_ms"),
        quantile(whole, 0.5) if whole else None,
        quantile(whole, 0.9) if whole else None,
    )


def lateness(values_ms: np.ndarray) -> tuple[float | None, float | None]:
    """The generator's send lateness P50 and P99 (ms); (None, None) when nothing was recorded: not measured."""
    if len(values_ms) == 0:
        return None, None
    return quantile(values_ms, 0.5), quantile(values_ms, 0.99)


def judge(
    fig: Figures, lateness_p99_ms: float | None, baseline_p90_ms: float | None, plan: RampPlan
) -> tuple[str, str]:
    """The step's verdict and why; ``baseline_p90_ms`` None: this is the first step, the baseline itself."""
    if lateness_p99_ms is not None and lateness_p99_ms > VOID_LATENESS_MS:
        return "void", (
            f"the load generator fell behind: its send lateness P99 {lateness_p99_ms:.2f} ms > {VOID_LATENESS_MS:g} ms"
        )
    if fig.failed:
        kinds = ", ".join(f"{n} {k.replace('_', ' ')}" for k, n in fig.failures.items() if n)
        return "fails", f"{fig.failed} of {fig.turns} turn(s) failed ({kinds})"
    p90 = fig.silence_ms.p90
    if fig.turns < plan.min_turns or p90 is None:
        return "too_few", f"{fig.turns} measured turn(s), fewer than the {plan.min_turns} a P90 needs"
    if baseline_p90_ms is None:
        return "holds", f"the baseline: P90 silence {p90:.1f} ms; later steps hold up to {plan.allowed_ms(p90):.1f} ms"
    allowed = plan.allowed_ms(baseline_p90_ms)
    if p90 <= allowed:
        return "holds", f"P90 silence {p90:.1f} ms <= {allowed:.1f} ms (baseline {baseline_p90_ms:.1f} ms + margin)"
    return "fails", f"P90 silence {p90:.1f} ms > {allowed:.1f} ms (baseline {baseline_p90_ms:.1f} ms + margin)"


def ends_ramp(step: Step, first: bool) -> str:
    """Why the ramp stops after ``step`` ("" when it goes on)."""
    if step.verdict == "fails":
        return f"{step.devices} device(s) failed: {step.reason}"
    if step.verdict == "void":
        return f"{step.devices} device(s) void: {step.reason}; a larger step would be later still"
    if first and step.verdict != "holds":
        return f"the first step ({step.devices} device(s)) gave no baseline: {step.reason}"
    return ""


def baseline_p90(steps: Sequence[Step]) -> float | None:
    """The first step's P90 silence, when it held (the baseline every later step is judged against)."""
    if steps and steps[0].verdict == "holds":
        return steps[0].silence_ms.p90
    return None


def knee(steps: Sequence[Step]) -> tuple[int | None, bool]:
    """(the last step that held before the first that failed, whether no step failed at all)."""
    held: int | None = None
    for step in steps:
        if step.verdict == "fails":
            return held, False
        if step.verdict == "holds":
            held = step.devices
    return held, True


# The consecutive parts of a device's silence that our server's traces, read beside the device's, split it into
SEGMENTS = ("uplink_ms", "server_first_audio_ms", "downlink_ms", "device_buffer_ms")


def grown(base: Sequence[TurnRow], step: Sequence[TurnRow], name: str) -> list[str]:
    """The segments whose median or P90 grew beyond its interval against the baseline step's (the 95 % interval of
    the difference lies above zero), largest growth first, each as "segment P90 +X ms [low, high]"."""
    found: list[tuple[float, str]] = []
    for segment in SEGMENTS:
        x = np.sort(np.array([v for r in step if not r.warmup and (v := getattr(r, segment)) is not None]))
        b = np.sort(np.array([v for r in base if not r.warmup and (v := getattr(r, segment)) is not None]))
        for q, label in ((0.5, "median"), (0.9, "P90")):
            ci = difference_interval(x, f"{name}|{segment}", b, f"base|{segment}", q)
            if ci is not None and ci.low > 0:
                grew = quantile(x, q) - quantile(b, q)
                found.append((grew, f"{segment} {label} +{grew:.1f} ms [{ci.low:.1f}, {ci.high:.1f}]"))
                break
    return [text for _grew, text in sorted(found, key=lambda f: -f[0])]
