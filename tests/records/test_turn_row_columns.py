"""The turn record's one declaration: what is generated from it, and bench.csv written and read through it."""

from __future__ import annotations

import csv
import pickle
from pathlib import Path

import msgspec
import pytest

from labtools.script_module import load_script
from pipeline.analysis.read import rows_from_spans
from pipeline.analysis.stats import summarize
from pipeline.analysis.traces import ReadProblems, read_trace_file, trace_files
from pipeline.records import turn_row
from pipeline.records.bench_csv import BenchCsv, BenchCsvError, csv_line, read_bench_csv
from pipeline.records.path import PATH_COLUMNS, SEGMENTS, PathRow, paths_table
from pipeline.records.segment import segments_table
from pipeline.records.turn_row import (
    COLUMNS,
    DEVICE_COLUMNS,
    NUMERIC,
    TRUTH_COLUMNS,
    WIRE_COLUMNS,
    TurnRow,
    column,
    columns_table,
)
from pipeline.report.conditions import group
from pipeline.report.load import Dataset
from tests.paths import REPO_ROOT

ROOT = REPO_ROOT
EXPERIMENT = ROOT / "tests" / "data" / "report" / "experiment"
table_script = load_script("columns_table")  # the script's own logic, loaded from its file


def experiment_rows() -> list[TurnRow]:
    problems = ReadProblems()
    spans = [s for path in trace_files(EXPERIMENT / "traces") for s in read_trace_file(path, problems)]
    assert not problems.messages
    return rows_from_spans(spans)


def test_the_header_is_the_committed_bench_csvs() -> None:
    with (EXPERIMENT / "bench.csv").open(encoding="utf-8", newline="") as fh:
        assert tuple(next(csv.reader(fh))) == COLUMNS
    assert len(COLUMNS) == len(set(COLUMNS)) == 81


def test_bench_csv_written_from_the_traces_is_the_committed_file_byte_for_byte(tmp_path: Path) -> None:
    out = tmp_path / "bench.csv"
    BenchCsv(out).append(experiment_rows())
    assert out.read_bytes() == (EXPERIMENT / "bench.csv").read_bytes()


def test_rows_read_back_are_the_rows_written_and_write_the_same_lines() -> None:
    rows = experiment_rows()
    back = read_bench_csv(EXPERIMENT / "bench.csv")
    assert back == rows  # each cell its column's type again: 600 ms reads back as the float 600.0
    lines = (EXPERIMENT / "bench.csv").read_bytes().decode("utf-8").splitlines(keepends=True)[1:]
    assert [csv_line(r) for r in back] == lines


def test_the_column_groups_and_numeric_columns_follow_the_declared_types() -> None:
    assert DEVICE_COLUMNS == (
        "transport",
        "answer_edges",
        "stt_received_ms",
        "first_audio_received_ms",
        "first_audible_ms",
        "last_audible_ms",
        "turn_temperature",
        "interrupt_received_ms",
        "interrupt_played_ms",
    )
    assert WIRE_COLUMNS == ("uplink_ms", "server_first_audio_ms", "downlink_ms", "device_buffer_ms")
    assert TRUTH_COLUMNS == (
        "cut_off",
        "cut_off_by",
        "utterances",
        "endpoint_delay_ms",
        "true_end_first_audio_ms",
        "true_end_first_audible_ms",
    )
    assert COLUMNS[-len(WIRE_COLUMNS) - len(TRUTH_COLUMNS) :] == WIRE_COLUMNS + TRUTH_COLUMNS
    # the rule bench.csv was read by before the schema: every *_ms column but the per-call list, and these
    named = {"round", "warmup", "tokens", "ok", "temp_c", "llm_calls", "sentences", "turn_start_ns", "prompt_tokens"}
    named |= {"prompt_cached_tokens", "load_avg_1m", "other_cpu_share", "asr_error_rate", "answer_quality"}
    named |= {"packets_lost", "packets_late", "device", "devices", "asr_forced_switches", "cut_off", "utterances"}
    named |= {"vad_decisions"}
    by_suffix = {c for c in COLUMNS if c.endswith("_ms") and c != "llm_first_token_ms_per_call"}
    assert by_suffix | named == NUMERIC


def test_every_column_has_a_unit_entry_and_a_meaning() -> None:
    assert all(c.meaning and "|" not in c.meaning for c in turn_row.SCHEMA)
    assert {c.unit for c in turn_row.SCHEMA if c.name.endswith("_ms") and c.kind is float} == {"ms"}


@pytest.mark.parametrize("name", sorted(table_script.TABLES))
def test_the_docs_tables_are_the_generated_ones(name: str) -> None:
    text = table_script.page(name).read_text(encoding="utf-8")
    generate = table_script.TABLES[name][2]
    assert table_script.page_table(text, name) == generate(), "run: python scripts/columns_table.py --write"


def test_each_csvs_table_says_its_columns_types_and_meanings() -> None:
    assert "| `whole_turn_ms` | number or empty | ms | end of user speech -> last audio frame" in columns_table()
    assert "| `warmup` | `True` or `False` |  | the warm-up round" in segments_table()
    assert "| `silence_asr_ms` | number | ms | the silence's path: its time in `asr` (" in paths_table()
    assert set(table_script.TABLES) == {"columns", "segments", "paths"}


def test_the_paths_columns_are_each_targets_total_segments_in_path_order_and_slack() -> None:
    by_target = [(f"{t}_ms", *(f"{t}_{kind}_ms" for kind in SEGMENTS), f"{t}_slack_ms") for t in ("silence", "whole")]
    assert (
        PATH_COLUMNS
        == PathRow.__struct_fields__
        == ("run_id", "condition", "question_id", "round", "device") + (by_target[0] + by_target[1])
    )


def test_the_texts_a_reader_keeps_once_are_those_the_schema_marks_repeated() -> None:
    # the list facts.py once wrote by hand
    assert (
        *("run_id", "condition", "config_id", "question_id", "error", "server_error", "note", "llm_model"),
        "llm_endpoint",
        *("asr_error_metric", "language", "category", "scripted", "clock", "transport", "answer_edges"),
        "turn_temperature",
        "cut_off_by",
    ) == turn_row.REPEATED
    assert all(c.kind is str for c in turn_row.SCHEMA if c.repeated)


def test_a_row_once_made_is_never_changed() -> None:
    row = experiment_rows()[0]
    with pytest.raises(AttributeError):
        row.ok = 0  # type: ignore[misc]


def test_an_unknown_column_is_refused_where_it_is_named() -> None:
    row = TurnRow(whole_turn_ms=1.0)
    assert column("whole_turn_ms")(row) == 1.0
    with pytest.raises(turn_row.UnknownColumn, match=r"'whole_turn' is not a bench\.csv column"):
        column("whole_turn")
    with pytest.raises(turn_row.UnknownColumn):
        summarize([row], "whole_turn_ms ")
    row = TurnRow(condition="A", ok=1, round=2, whole_turn_ms=1.0)
    cond = group(Dataset.of_rows([row], "test"))["A"]
    assert list(cond.values("whole_turn_ms")) == [1.0]
    with pytest.raises(turn_row.UnknownColumn):
        cond.values("first_tokn_ms")


def test_a_file_with_other_columns_or_a_bad_cell_is_refused_with_where(tmp_path: Path) -> None:
    other = tmp_path / "other.csv"
    other.write_text("run_id,whole_turn_ms\r\nr,1\r\n", encoding="utf-8")
    with pytest.raises(BenchCsvError, match="its columns are not the ones this version writes"):
        read_bench_csv(other)
    bad = tmp_path / "bad.csv"
    BenchCsv(bad).append([TurnRow(run_id="r", round=3)])
    bad.write_text(bad.read_text(encoding="utf-8").replace("r,,,,3,", "r,,,,three,"), encoding="utf-8")
    with pytest.raises(BenchCsvError, match=r"bad.csv:2: "):
        read_bench_csv(bad)


def test_a_row_crosses_processes_as_it_is() -> None:
    rows = experiment_rows()
    assert pickle.loads(pickle.dumps(rows)) == rows
    assert msgspec.structs.astuple(rows[0])[COLUMNS.index("question_id")] == rows[0].question_id
