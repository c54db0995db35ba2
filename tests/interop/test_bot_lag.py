"""A bot's event-loop lag per step of a ramp (``interop.bot_lag``): each step takes the logged seconds inside its
turns, exactly; a line of the log that does not read is named, the rest kept."""

from __future__ import annotations

import json
from pathlib import Path

from pipeline.interop.bot_lag import StepLag, lag_markdown, read_lags, step_lags
from pipeline.records.bench_csv import BenchCsv
from pipeline.records.ramp_result import Capacity, write
from pipeline.records.turn_row import TurnRow
from tests.report.sections.test_capacity import ramp

S = 1_000_000_000


def test_each_step_takes_the_seconds_inside_its_turns(tmp_path: Path) -> None:
    ramp(tmp_path, "bot", "fails")  # two steps, their rows written by fake devices
    windows = {}
    for n in (1, 2):  # each step's rows, rewritten on known times: step 1 at 10-20 s, step 2 at 30-40 s
        bench = tmp_path / "steps" / str(n) / "bench.csv"
        bench.unlink()
        start = (10 + 20 * (n - 1)) * S
        BenchCsv(bench).append([TurnRow(turn_start_ns=start, whole_turn_ms=10_000.0, ok=1)])
        windows[n] = (start, start + 10 * S)
    lags = [(11 * S, 1.0), (15 * S, 3.0), (19 * S, 2.0), (25 * S, 99.0), (31 * S, 40.0), (39 * S, 60.0)]
    problems: list[str] = []
    steps = step_lags(tmp_path, lags, problems)
    assert not problems
    assert steps == [StepLag(1, 3, 2.0, 2.98, 3.0), StepLag(2, 2, 50.0, 59.8, 60.0)]  # 99 ms fell between the steps
    text = lag_markdown("bot", steps)
    assert "| 1 | 3 | 2.0 | 3.0 | 3.0 |" in text and "| 2 | 2 | 50.0 | 59.8 | 60.0 |" in text


def test_the_log_s_lag_lines_are_read_and_a_bad_line_named(tmp_path: Path) -> None:
    log = tmp_path / "bot-events.jsonl"
    lines = [
        json.dumps({"t_ns": 2, "stream": "", "event": "loop_lag", "lag_ms": 4.5}),
        json.dumps({"t_ns": 1, "stream": "MZ", "event": "bot_started_speaking"}),
        "{broken",
        json.dumps({"t_ns": 1, "stream": "", "event": "loop_lag", "lag_ms": 0.5}),
    ]
    log.write_text("\n".join(lines) + "\n", encoding="utf-8")
    problems: list[str] = []
    assert read_lags(log, problems) == [(1, 0.5), (2, 4.5)]
    assert [p.split(": ")[0] for p in problems] == [f"{log}:3"]


def test_a_folder_without_a_ramp_is_named(tmp_path: Path) -> None:
    problems: list[str] = []
    assert step_lags(tmp_path, [], problems) == [] and len(problems) == 1
    write(tmp_path / "empty", Capacity("x", "twilio", "f", {}, [], 1, 1, 1, 1, 1))
    assert step_lags(tmp_path / "empty", [], problems) == []
