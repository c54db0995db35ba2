"""``--jaeger``: traces from Jaeger's /api/v3/traces, against a local fake serving recorded answers."""

from __future__ import annotations

import socket
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest

from pipeline.report.__main__ import main
from pipeline.report.build import build
from pipeline.report.jaeger import JaegerQuery, load_jaeger, normal_id
from pipeline.report.load import load_paths
from tests.paths import TEST_DATA
from tests.report_fixtures import jaeger_answer
from tests.report_jaeger_fake import serve

DATA = TEST_DATA / "report"
RECORDED = (DATA / "jaeger" / "api_v3_traces.json").read_text(encoding="utf-8")
EPOCH = datetime(2026, 1, 1, tzinfo=UTC)  # the virtual clock's start
LATER = datetime(2026, 1, 1, 1, tzinfo=UTC)


def test_ids_in_hex_or_base64_come_out_as_hex() -> None:
    assert normal_id("AAECAwQFBgcICQoLDA0ODw==", "traceId") == "000102030405060708090a0b0c0d0e0f"
    assert normal_id("000102030405060708090A0B0C0D0E0F", "traceId") == "000102030405060708090a0b0c0d0e0f"
    assert normal_id("AQIDBAUGBwg=", "spanId") == "0102030405060708"
    assert normal_id("", "parentSpanId") == ""
    with pytest.raises(ValueError, match="decodes to 3 bytes"):
        normal_id("AQID", "spanId")


def test_a_recorded_answer_with_base64_ids_and_enum_names_gives_rows() -> None:
    assert '"STATUS_CODE_UNSET"' in RECORDED and RECORDED.count('{"result":') == 2
    with serve([RECORDED]) as (url, store):
        data = load_jaeger(JaegerQuery(url, "voice-latency-lab", EPOCH, LATER))
    query = parse_qs(urlparse(store.requests[0]).query)
    assert query == {
        "query.serviceName": ["voice-latency-lab"],
        "query.startTimeMin": ["2026-01-01T00:00:00Z"],
        "query.startTimeMax": ["2026-01-01T01:00:00Z"],
        "query.searchDepth": ["1000"],
    }
    assert data.problems == []
    assert [(r.run_id, r.question_id, r.round, r.ok) for r in data.rows] == [
        ("j1", "zh01", 1, 1),
        ("j1", "zh01", 2, 1),
    ]
    assert all(len(str(r.trace_id)) == 32 for r in data.rows)
    assert [r.llm_calls for r in data.rows] == [2, 2]  # children found through the decoded parent ids
    assert data.rows[1].whole_turn_ms is not None
    assert data.runs["j1"].config_json is not None


def test_jaeger_gives_the_same_report_as_the_trace_files() -> None:
    traces = DATA / "experiment" / "traces"
    answers = [jaeger_answer(traces / f"{name}.jsonl", documents=3) for name in ("a1", "b1", "bp1")]
    with serve(answers) as (url, _store):
        from_jaeger = build(load_jaeger(JaegerQuery(url, "voice-latency-lab", EPOCH, LATER)), draw=False)
    from_files = build(load_paths([traces]), draw=False)
    for key in from_files.table_keys():
        assert from_jaeger.table(key) == from_files.table(key), key


def test_no_trace_in_the_window_or_service_is_said_not_crashed(tmp_path: Path) -> None:
    with serve([RECORDED]) as (url, _store):
        early = load_jaeger(
            JaegerQuery(url, "voice-latency-lab", EPOCH.replace(year=2025), EPOCH.replace(year=2025, month=6))
        )
        other = load_jaeger(JaegerQuery(url, "someone-else", EPOCH, LATER))
    for data in (early, other):
        assert data.rows == []
        assert data.problems == ["Jaeger answered: 404 No traces found"]
    doc = build(early, draw=True)
    assert "Jaeger answered: 404 No traces found" in doc.text()
    assert "No turns were found" in doc.text()


def test_the_command_line_reads_jaeger(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with serve([RECORDED]) as (url, _store):
        code = main(
            [
                "--jaeger",
                url,
                "--start",
                "2026-01-01T00:00:00Z",
                "--end",
                "2026-01-01T01:00:00Z",
                "--out",
                str(tmp_path),
            ]
        )
    assert code == 0, capsys.readouterr().err
    assert "2 turn(s), 1 run(s)" in capsys.readouterr().out
    report = (tmp_path / "report.md").read_text(encoding="utf-8")
    assert f"Source: Jaeger {url} service 'voice-latency-lab', 2026-01-01T00:00:00Z to 2026-01-01T01:00:00Z" in report
    assert (tmp_path / "rows.csv").read_text(encoding="utf-8").count("\n") == 3


def test_an_unreachable_jaeger_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as sock:  # a port that was free a moment ago, nothing listens on it now
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    assert main(["--jaeger", f"http://127.0.0.1:{port}", "--out", str(tmp_path)]) == 2
    assert "cannot reach Jaeger" in capsys.readouterr().err
    assert not (tmp_path / "report.md").exists()
