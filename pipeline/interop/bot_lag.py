"""A voice bot's event-loop lag at each step of a ramp, from the bot's own log.

A bot that serves every call on one event loop (a Pipecat bot behind FastAPI) falls behind as calls are added: its
loop wakes later than it asked, and every call's audio waits. ``scripts/interop/pipecat_app.py`` logs, once a
second, the worst lag of the second (``{"event": "loop_lag", "lag_ms": ...}``, wall-clock ns). Each step of the
ramp takes the seconds that fall in it: from its first turn's start to its last turn's end, as its rows say
(``steps/<N>/bench.csv``, the same clock), and gives their median, P99 and worst.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pipeline.analysis.numbers import quantile
from pipeline.records.bench_csv import BenchCsvError, read_bench_csv
from pipeline.records.ramp_result import CapacityFileError, read

LAG = "loop_lag"


@dataclass(frozen=True, slots=True)
class StepLag:
    """One step's loop lag: over how many one-second windows, their median, P99 and worst (ms; None: none)."""

    devices: int
    windows: int
    p50_ms: float | None
    p99_ms: float | None
    max_ms: float | None


def read_lags(path: Path, problems: list[str]) -> list[tuple[int, float]]:
    """Each logged second's worst lag: (when it ended, ns; ms); a line that does not read is named, and skipped."""
    found = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        try:
            item = json.loads(line)
            if item.get("event") == LAG:
                found.append((int(item["t_ns"]), float(item["lag_ms"])))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            problems.append(f"{path}:{number}: not a log line ({type(exc).__name__}: {exc})")
    return sorted(found)


def step_lags(folder: Path, lags: Sequence[tuple[int, float]], problems: list[str]) -> list[StepLag]:
    """The ramp in ``folder``, step by step, with the lag of the seconds inside each."""
    try:
        ramp = read(folder / "capacity.json")
    except CapacityFileError as exc:
        problems.append(str(exc))
        return []
    out = []
    for step in ramp.steps:
        try:
            rows = read_bench_csv(folder / step.folder / "bench.csv")
        except (BenchCsvError, OSError) as exc:
            problems.append(f"step {step.devices}: {exc}")
            continue
        starts = [r.turn_start_ns for r in rows]
        ends = [r.turn_start_ns + round((r.whole_turn_ms or 0) * 1e6) for r in rows]
        inside = np.asarray([v for t, v in lags if starts and min(starts) <= t <= max(ends)], dtype=np.float64)
        if not inside.size:
            out.append(StepLag(step.devices, 0, None, None, None))
            continue
        p50, p99 = (quantile(inside, q) for q in (0.5, 0.99))
        out.append(StepLag(step.devices, int(inside.size), p50, p99, float(inside.max())))
    return out


def lag_markdown(label: str, steps: Sequence[StepLag]) -> str:
    """The steps' lag as a table."""
    lines = [
        f"### {label}: its event loop's lag per step",
        "",
        "Each second's worst lag (a 50 ms sleep woke this much late), over the seconds of the step's turns.",
        "",
        "| calls | seconds | lag P50 ms | lag P99 ms | worst ms |",
        "|---|---|---|---|---|",
    ]
    for s in steps:
        cells = ["-" if v is None else f"{v:.1f}" for v in (s.p50_ms, s.p99_ms, s.max_ms)]
        lines.append(f"| {s.devices} | {s.windows} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
