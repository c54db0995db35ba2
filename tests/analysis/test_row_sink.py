"""The per-turn line a run prints: what is known, never a Python ``None``."""

from __future__ import annotations

import json
from pathlib import Path

from pipeline.analysis.row_sink import RowSink, progress_line
from pipeline.records.bench_csv import BenchCsv, read_bench_csv
from pipeline.records.turn_row import TurnRow
from tests.paths import REPO_ROOT

TRACES = REPO_ROOT / "tests" / "data" / "report" / "experiment" / "traces" / "a1.jsonl"


def test_a_device_turn_says_where_its_whole_turn_is_measured() -> None:
    """A server sees no playback on the device: its line says so instead of printing ``None``."""
    row = TurnRow(question_id="q1", round=1, ok=1, whole_turn_ms=None, first_audio_ms=None, llm_calls=1, sentences=2)
    line = progress_line(1, 0, [row])
    assert "None" not in line
    assert "whole turn: measured on the device" in line and "first audio: measured on the device" in line
    assert line.startswith("[1] round 1 q1: ok")


def test_an_in_process_turn_prints_its_measured_times() -> None:
    row = TurnRow(question_id="q1", round=2, ok=1, whole_turn_ms=812.5, first_audio_ms=301.25, llm_calls=1, sentences=2)
    line = progress_line(3, 6, [row])
    assert line == ("[3/6] round 2 q1: ok, whole turn 812.5 ms, first audio 301.25 ms, 1 LLM call(s), 2 sentence(s)")


def test_a_sink_that_keeps_no_rows_writes_and_counts_every_one(tmp_path: Path) -> None:
    """A server's sink (``pipeline.serve``): up for days, it held every row it wrote (the soak's RSS drift)."""
    lines = [json.loads(line) for line in TRACES.read_text(encoding="utf-8").splitlines()]
    said: list[str] = []
    kept, counted = (
        RowSink(BenchCsv(tmp_path / "a.csv"), 0, said.append),
        RowSink(BenchCsv(tmp_path / "b.csv"), 0, said.append, keep=False),
    )
    for line in lines:
        kept(line)
        counted(line)
    turns = len(kept.rows)
    assert turns >= 9 and kept.count == counted.count == turns and counted.rows == []
    assert read_bench_csv(tmp_path / "b.csv") == kept.rows  # the same rows written, none held
    assert said[-1].startswith(f"[{turns}] ")  # the progress line counts them all the same
