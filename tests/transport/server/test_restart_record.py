"""A supervised run's record of restarts: how a process's end is said, its segments' run ids, the file read back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.transport.server.restart_budget import RestartLimit
from pipeline.transport.server.restart_record import (
    Restart,
    RestartRecord,
    ended_how,
    read_restarts,
    record_path,
    segment_run_id,
)


def test_how_a_process_ended_is_said() -> None:
    assert ended_how(0) == "exit 0"
    assert ended_how(1) == "exit 1"
    assert ended_how(-9) == "killed by SIGKILL"
    assert ended_how(-11) == "killed by SIGSEGV"
    assert ended_how(-99) == "killed by signal 99"


def test_each_segment_has_its_run_id_and_each_run_its_record() -> None:
    assert segment_run_id("RUN", 2, 0) == "RUN-p2"
    assert segment_run_id("RUN", 2, 3) == "RUN-p2-r3"
    assert record_path(Path("out"), "RUN") == Path("out") / "restarts" / "RUN.json"


def test_the_record_is_read_back_as_written(tmp_path: Path) -> None:
    restart = Restart(2, 1, "RUN-p2", "RUN-p2-r1", "killed by SIGKILL", -9, 1_767_225_600.25, 1.375)
    record = RestartRecord("RUN", 2, RestartLimit(5, 300.0), [restart], gave_up="")
    path = record_path(tmp_path, "RUN")
    record.write(path)
    assert read_restarts(path) == record
    assert json.loads(path.read_text())["restarts"][0]["listening_after_s"] == 1.375
    assert [p.name for p in path.parent.iterdir()] == ["RUN.json"]  # the part file renamed, none left
    record.gave_up = "why"
    record.write(path)  # rewritten whole
    assert read_restarts(path).gave_up == "why"


def test_another_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    path.write_text('{"schema": 2}')
    with pytest.raises(ValueError, match="not a restart record of schema 1"):
        read_restarts(path)
    path.write_text('{"schema": 1, "run_id": "RUN"}')
    with pytest.raises(ValueError, match="malformed restart record"):
        read_restarts(path)
