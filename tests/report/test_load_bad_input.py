"""Bad input never crashes the report nor leaves a silently partial table: it says what it
could and could not compute."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from pipeline.report.__main__ import main
from pipeline.report.build import build
from pipeline.report.load import load_paths
from pipeline.tracing import names
from tests.paths import TEST_DATA
from tests.report_fixtures import lines, spans, write_lines

DATA = TEST_DATA / "report"
EXPERIMENT = DATA / "experiment"


def copy_experiment(tmp_path: Path) -> Path:
    shutil.copytree(EXPERIMENT / "traces", tmp_path / "exp" / "traces")
    return tmp_path / "exp"


def test_an_empty_folder_gives_a_report_that_says_nothing_was_measured(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "empty").mkdir()
    code = main([str(tmp_path / "empty"), "--out", str(tmp_path / "out")])
    out, err = capsys.readouterr()
    assert code == 1
    assert "0 turn(s), 0 run(s): INCOMPLETE" in out
    assert f"warning: no trace files (*.jsonl) found in {tmp_path / 'empty'}" in err
    report = (tmp_path / "out" / "report.md").read_text(encoding="utf-8")
    assert "No turns were found: nothing was measured, every figure below is empty." in report
    assert "| first-token median (ms) | not measured | not measured | not measured | measured |" in report
    assert "Nothing to plot: no turns." in report
    assert (tmp_path / "out" / "report.html").stat().st_size > 0
    assert (tmp_path / "out" / "rows.csv").read_text(encoding="utf-8").count("\n") == 1  # the header only


def test_a_missing_path_is_an_error_and_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(tmp_path / "nope"), "--out", str(tmp_path / "out")]) == 2
    assert f"error: {tmp_path / 'nope'}: not found" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_truncated_trace_lines_are_named_and_the_missing_turns_counted(tmp_path: Path) -> None:
    exp = copy_experiment(tmp_path)
    a1 = exp / "traces" / "a1.jsonl"
    text = a1.read_text(encoding="utf-8").splitlines()
    text[4] = text[4][: len(text[4]) // 2]  # a turn cut in the middle (a disk full, a killed writer)
    a1.write_text("\n".join(text) + "\n", encoding="utf-8")
    (exp / "traces" / "junk.jsonl").write_bytes(b"\x00\xff not json at all\n")
    doc = build(load_paths([exp]), draw=True)
    text_out = doc.text()
    assert f"{a1}:5: unreadable trace line (JSONDecodeError" in text_out
    assert f"{exp / 'traces' / 'junk.jsonl'}:1: unreadable trace line" in text_out
    assert "Run a1: its settings ask for 9 turns, the traces hold 8" in text_out
    assert doc.table("runs").rows[0][5:7] == ("8", "⚠ 9 (found 8)")
    assert doc.table("result").rows[2][1] == "521.8 [447.7, 594.8] · 5/5"
    assert "2 read problem(s)" in text_out and "run a1: 8 of 9 expected turns found" in text_out
    assert not doc.complete


def _strip_config(path: Path) -> None:
    data = lines(path)
    for line in data:
        for span in spans(line):
            span["attributes"] = [a for a in span["attributes"] if a["key"] != names.CONFIG_JSON]
    write_lines(path, data)


def test_traces_of_an_older_schema_are_skipped_and_said_so(tmp_path: Path) -> None:
    exp = copy_experiment(tmp_path)
    bp1 = exp / "traces" / "bp1.jsonl"
    old = '{"key":"lab.schema_version","value":{"stringValue":"1"}}'
    assert old in bp1.read_text(encoding="utf-8")
    bp1.write_text(bp1.read_text(encoding="utf-8").replace(old, old.replace('"1"', '"0"')), encoding="utf-8")
    doc = build(load_paths([exp]), draw=False)
    text = doc.text()
    assert "trace schema version '0' is not '1'; skipped" in text
    assert "9 read problem(s)" in text
    assert doc.table("result").rows[2][3] == "not measured"
    assert "B' (offline) was not measured: that the chain runs fully offline is not shown (M13)." in text


def test_traces_that_do_not_record_their_settings_are_not_compared(tmp_path: Path) -> None:
    exp = copy_experiment(tmp_path)
    _strip_config(exp / "traces" / "b1.jsonl")
    doc = build(load_paths([exp]), draw=False)
    assert not doc.comparable
    assert (
        "run b1 does not record its settings (older trace format, no lab.config_json): it cannot be shown to differ "
        "from the others only in the condition" in doc.text()
    )
    assert doc.table("run-b1").rows[2][1] == "302.0 [293.8, 311.5] · 6/6"
    single = build(load_paths([exp], runs=("b1",)), draw=False)  # alone, there is nothing to compare
    assert single.comparable
    assert single.table("runs").rows[0][6] == "unknown"


def test_a_run_where_every_turn_failed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main([str(DATA / "failed"), "--out", str(tmp_path / "out")])
    assert code == 0, capsys.readouterr().err
    doc = build(load_paths([DATA / "failed"]), draw=False)
    failed = "not measured (0 of 2 turns gave a value)"
    assert [row[3] for row in doc.table("result").rows] == [failed] * 6 + [
        "0/2 (0.0%)",
        "not measured (no sensor reading)",
    ]
    assert doc.table("runs").rows[0][9:11] == ("0/2 (0.0%)", "timeout: 2")
    assert doc.table("drift").rows[0][-1] == "not checked: no successful measured turn"
    text = doc.text()
    assert "B' (offline) succeeded in 0/2 turns; B (local) was not measured, so the two cannot be compared." in text
    assert "A conclusion needs two measured conditions; measured: B' (offline)." in text
    assert "Boundaries (M21)" in text
    report = (tmp_path / "out" / "report.md").read_text(encoding="utf-8")
    assert "![latency against run order](plots/order.png)" in report


def test_a_trace_line_that_is_valid_json_but_not_traces_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "odd.jsonl"
    path.write_text(json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [{"name": "turn"}]}]}]}) + "\n")
    doc = build(load_paths([path]), draw=True)
    assert "odd.jsonl:1: unreadable trace line (KeyError" in doc.text()
    assert not doc.complete


def test_a_bench_csv_that_disagrees_with_the_traces_is_named_and_not_used(tmp_path: Path) -> None:
    exp = copy_experiment(tmp_path)
    rows = (EXPERIMENT / "bench.csv").read_text(encoding="utf-8").splitlines()
    (exp / "bench.csv").write_text("\n".join(rows[:-3]) + "\n", encoding="utf-8")  # three turns lost
    doc = build(load_paths([exp]), draw=False)
    assert (
        f"{exp / 'bench.csv'}: differs from the traces (0 turn(s) only in the CSV, 3 only in the traces); "
        "the report uses the traces" in doc.text()
    )
    assert doc.table("runs").rows[2][5] == "9"
