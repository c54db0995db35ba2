"""Spans -> trace file -> analysis gives back exactly the numbers the scripted turn had."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.analysis.read import rows_from_spans
from pipeline.analysis.traces import ReadProblems, read_trace_file, spans_from_traces_data
from pipeline.tracing import names
from pipeline.tracing.export import Tracing
from pipeline.tracing.spans import Attributes
from stages.llm.scripted import ScriptedReply
from tests.scenario import run_virtual, stages

ATTRS: Attributes = {
    names.SCHEMA: names.SCHEMA_VERSION,
    names.RUN_ID: "rt",
    names.CONDITION: "B",
    names.CONFIG_ID: "cfg123",
    names.QUESTION_ID: "q1",
    names.ROUND: 2,
    names.WARMUP: False,
    names.LANGUAGE: "en",
}


def test_trace_file_round_trip_gives_the_scripted_numbers(tmp_path: Path) -> None:
    tl = run_virtual(stages(ScriptedReply("Hi. How are you today? Fine.")))
    tracing = Tracing(tmp_path / "t.jsonl", "test")
    line = tracing.emit_turn(tl, ATTRS)
    tracing.shutdown()
    problems = ReadProblems()
    from_file = rows_from_spans(read_trace_file(tmp_path / "t.jsonl", problems), problems)
    assert problems.messages == []
    assert from_file == rows_from_spans(spans_from_traces_data(line))
    [row] = from_file
    expected = {
        "run_id": "rt",
        "condition": "B",
        "config_id": "cfg123",
        "question_id": "q1",
        "round": 2,
        "warmup": 0,
        "ok": 1,
        "error": "",
        "whole_turn_ms": 3230.0,
        "first_audio_ms": 1300.0,
        "vad_endpoint_ms": 600.0,
        "asr_ms": 300.0,
        "first_token_ms": 200.0,
        "llm_first_chunk_ms": 200.0,
        "total_ms": 600.0,
        "tokens": 9,
        "llm_calls": 1,
        "llm_first_token_ms_per_call": "200",
        "sentences": 3,
        "sentence_first_token_min_ms": 0.0,
        "sentence_first_token_median_ms": 0.0,
        "sentence_first_token_max_ms": 200.0,
        "tts_first_frame_ms": 100.0,
        "scripted": "asr,llm,tts",
        "temp_c": None,
    }
    assert {k: getattr(row, k) for k in expected} == expected


def test_per_sentence_and_tool_rows(tmp_path: Path) -> None:
    tracing = Tracing(tmp_path / "t.jsonl", "test")
    per_sentence = run_virtual(stages(ScriptedReply("Hi. How are you today? Fine."), mode="per-sentence"))
    tool = run_virtual(stages(ScriptedReply("Okay, it is on.", tool_name="set_light"), tools=True))
    tracing.emit_turn(per_sentence, ATTRS)
    tracing.emit_turn(tool, {**ATTRS, names.QUESTION_ID: "q2"})
    tracing.shutdown()
    rows = rows_from_spans(read_trace_file(tmp_path / "t.jsonl", ReadProblems()))
    assert [(r.question_id, r.llm_calls, r.llm_first_token_ms_per_call, r.sentences) for r in rows] == [
        ("q1", 3, "200;200;200", 3),
        ("q2", 2, "200;200", 1),
    ]
    assert rows[0].sentence_first_token_median_ms == 200.0


def test_failed_turn_keeps_its_error_and_has_no_whole_turn_time(tmp_path: Path) -> None:
    tl = run_virtual(stages(ScriptedReply("Hi."), ttft_ms=5000), timeout_s=4.0)
    tracing = Tracing(tmp_path / "t.jsonl", "test")
    tracing.emit_turn(tl, ATTRS)
    tracing.shutdown()
    [row] = rows_from_spans(read_trace_file(tmp_path / "t.jsonl", ReadProblems()))
    assert (row.ok, row.error, row.whole_turn_ms, row.llm_calls) == (0, "timeout", None, 1)
    assert row.first_token_ms is None


def test_trace_lines_are_conformant_otlp_json(tmp_path: Path) -> None:
    tl = run_virtual(stages(ScriptedReply("Hi.")))
    tracing = Tracing(tmp_path / "t.jsonl", "test")
    tracing.start_session({names.RUN_ID: "rt"}, tl.start_ns - 1000)
    tracing.emit_turn(tl, ATTRS)
    tracing.end_session(tl.end_ns or 0)
    tracing.shutdown()
    lines = (tmp_path / "t.jsonl").read_text().splitlines()
    assert len(lines) == 2  # the turn, then the session when it ends
    spans = [
        s for line in lines for rs in json.loads(line)["resourceSpans"] for ss in rs["scopeSpans"] for s in ss["spans"]
    ]
    by_name = {s["name"]: s for s in spans}
    for span in spans:
        assert len(span["traceId"]) == 32 and int(span["traceId"], 16)
        assert len(span["spanId"]) == 16 and int(span["spanId"], 16)
        assert isinstance(span["kind"], int)
        assert isinstance(span["startTimeUnixNano"], str) and span["startTimeUnixNano"].isdigit()
    assert "parentSpanId" not in by_name["session"]
    assert by_name["turn"]["parentSpanId"] == by_name["session"]["spanId"]
    for name in ("vad", "asr", "llm.call", "sentence", "tts", "playback"):
        assert by_name[name]["parentSpanId"] == by_name["turn"]["spanId"], name
    call_attrs = {a["key"]: a["value"] for a in by_name["llm.call"]["attributes"]}
    assert call_attrs["gen_ai.operation.name"] == {"stringValue": "chat"}
    assert call_attrs["gen_ai.usage.output_tokens"] == {"intValue": "2"}
    assert call_attrs["gen_ai.response.finish_reasons"] == {"arrayValue": {"values": [{"stringValue": "stop"}]}}
    assert [e["name"] for e in by_name["llm.call"]["events"]] == ["first_chunk", "first_token"]


def test_analyze_command_recomputes_the_same_rows(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from pipeline.analyze import main as analyze
    from pipeline.records.bench_csv import read_bench_csv
    from pipeline.replay import main as replay
    from tests.fixture_files import make_fixtures

    fx = make_fixtures(tmp_path / "fx", ["a", "b"])
    assert (
        replay(
            [
                str(fx),
                "--config",
                "configs/simulator.toml",
                "--clock",
                "virtual",
                "--out",
                str(tmp_path / "o"),
                "--run-id",
                "r",
                "--quiet",
            ],
            env={},
        )
        == 0
    )
    assert analyze([str(tmp_path / "o" / "traces"), "--csv", str(tmp_path / "again.csv")]) == 0
    assert read_bench_csv(tmp_path / "again.csv") == read_bench_csv(tmp_path / "o" / "bench.csv")
    assert "4 turn(s) from 1 file(s)" in capsys.readouterr().out
