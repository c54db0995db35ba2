"""The per-turn line a run prints: what is known, never a Python ``None``."""

from __future__ import annotations

from pipeline.analysis.row_sink import progress_line
from pipeline.records.turn_row import TurnRow


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
