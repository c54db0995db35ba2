"""The records part: each record's file read back by its one reader as the record its one writer wrote."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.analysis.path.critical import path_row
from pipeline.analysis.retiming import read_graphs
from pipeline.analysis.traces import trace_files
from pipeline.records.acoustic import COLUMNS as ACOUSTIC_COLUMNS
from pipeline.records.acoustic import AcousticRow, failed_row, read_rows, write_rows
from pipeline.records.path import PATHS_SCHEMA, paths_csv, read_paths
from pipeline.records.ramp_result import (
    FAILURE_KINDS,
    STEP_COLUMNS,
    STEP_SCHEMA,
    Capacity,
    CapacityFileError,
    Quantiles,
    Step,
    read,
    read_steps,
    step_row,
    write,
)
from pipeline.records.schema import SECONDS, schema
from tests.paths import REPO_ROOT

ROOT = REPO_ROOT
EXPERIMENT = ROOT / "tests" / "data" / "report" / "experiment"


def test_steps_csv_reads_back_as_the_rows_written_each_cell_its_columns_type(tmp_path: Path) -> None:
    assert STEP_COLUMNS[10:14] == tuple(f"failed_{k}" for k in FAILURE_KINDS)
    assert {c.unit for c in STEP_SCHEMA if c.name.endswith("_ms")} == {"ms"}
    steps = [
        Step(
            1, "r,1", 'c"q', "steps/1", 7, {"no_answer": 2}, Quantiles(1234.56789, 2000.1, 3000.0, None, (1.5, 2.5)),
            1500.0, None, 60.0, 0.5, 1.25, 3, 87.123456, 512.0, "fails", "too slow\nsecond line",
        ),
        Step(3, "r3", "c", "steps/3", 0, {}, Quantiles(), None, None, 0.0, None, None, 0, None, None, "void", ""),
    ]  # fmt: skip
    found = Capacity("ws://x", "websocket", "f", {}, [1, 3], 60, 300, 10, 50, 5, steps)
    write(tmp_path, found)
    assert read(tmp_path / "capacity.json") == found
    back = read_steps(tmp_path / "steps.csv")
    assert back == [step_row(s) for s in steps]
    assert (back[0].silence_p50_ms, back[0].silence_p90_low_ms, back[0].failed_no_answer) == (1234.568, 1.5, 2)
    assert back[1].silence_p50_ms is None and back[1].held_s == 0.0


def test_a_steps_csv_of_other_columns_is_refused_naming_the_file(tmp_path: Path) -> None:
    (tmp_path / "steps.csv").write_text("devices,verdict\n1,holds\n", encoding="utf-8")
    with pytest.raises(CapacityFileError, match=r"steps\.csv: its columns are not the ones this version writes"):
        read_steps(tmp_path / "steps.csv")


def test_paths_csv_reads_back_as_the_rows_written(tmp_path: Path) -> None:
    graphs = read_graphs(trace_files(EXPERIMENT / "traces")).graphs
    rows = [path_row(g) for g in graphs]
    (tmp_path / "paths.csv").write_text(paths_csv(rows), encoding="utf-8")
    back = read_paths(tmp_path / "paths.csv")
    assert len(back) == len(rows) > 0
    assert [r.silence_ms for r in back] == [round(r.silence_ms, 3) for r in rows]
    assert all(c.unit == "ms" for c in PATHS_SCHEMA if c.name.endswith("_ms"))


def test_one_acoustic_row_written_and_read_back_with_where_it_was_read(tmp_path: Path) -> None:
    rows = [
        AcousticRow("r1", "desk-2", "zh01", 1, 1.5, 2.75, 4.0, 1250.0, 2500.0, "acoustic", True, "", "clipped"),
        failed_row("desk-2", "desk-2.wav: silent"),
    ]
    assert write_rows(tmp_path / "rows.csv", rows) == 2
    back = read_rows(tmp_path / "rows.csv")
    assert back == rows  # ``where`` is no column, and no part of a row's equality
    assert [r.where for r in back] == [f"{tmp_path / 'rows.csv'}:2", f"{tmp_path / 'rows.csv'}:3"]
    assert back[0].device_index == 2 and back[1].round is None
    assert "where" not in ACOUSTIC_COLUMNS and {c.unit for c in schema(AcousticRow) if c.name.endswith("_s")} == {
        SECONDS
    }
