"""Run identity: a second run into the same folder never merges silently into the first (replay and
experiment refuse unless asked to append), and the report calls a merged run what it is."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import cast

import pytest

from pipeline.analysis.traces import spans_from_traces_data
from pipeline.records.bench_csv import read_bench_csv
from pipeline.replay import main
from pipeline.report.build import build
from pipeline.report.load import load_paths
from pipeline.run.session import Run, session_attributes
from pipeline.tracing import names
from tests.fixture_files import make_fixtures
from tests.paths import REPO_ROOT

ROOT = REPO_ROOT
SIM = ["--config", str(ROOT / "configs" / "simulator.toml"), "--clock", "virtual", "--quiet"]


def replay(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(args, env={})
    return code, capsys.readouterr().err


def test_replay_refuses_a_run_id_the_folder_holds_and_appends_only_when_asked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fixtures = make_fixtures(tmp_path / "fx", ["q1", "q2"])
    out = tmp_path / "o"
    args = [str(fixtures), *SIM, "--rounds", "2", "--out", str(out), "--run-id", "r1"]
    assert replay(args, capsys)[0] == 0
    before = (out / "bench.csv").read_bytes(), (out / "traces" / "r1.jsonl").read_bytes()
    code, err = replay(args, capsys)
    assert code == 2 and "already holds run 'r1'" in err and "--append" in err
    assert ((out / "bench.csv").read_bytes(), (out / "traces" / "r1.jsonl").read_bytes()) == before
    assert replay([*args, "--append"], capsys)[0] == 0
    assert len(read_bench_csv(out / "bench.csv")) == 8
    assert replay([str(fixtures), *SIM, "--rounds", "2", "--out", str(out)], capsys)[0] == 0  # a fresh run id


def test_the_session_span_carries_the_identity_every_turn_of_the_run_carries(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The replay and the server both open their session with ``session_attributes``: the run's identity."""
    fixtures = make_fixtures(tmp_path / "fx", ["q1"])
    out = tmp_path / "o"
    assert replay([str(fixtures), *SIM, "--rounds", "1", "--out", str(out), "--run-id", "r1"], capsys)[0] == 0
    lines = (out / "traces" / "r1.jsonl").read_text(encoding="utf-8").splitlines()
    spans = [s for line in lines for s in spans_from_traces_data(json.loads(line))]
    session = next(s for s in spans if s.name == names.SESSION)
    turn = next(s for s in spans if s.name == names.TURN)
    stand_in = SimpleNamespace(
        run_id="r",
        config=SimpleNamespace(run=SimpleNamespace(condition="B")),
        config_id="c",
        clock=SimpleNamespace(kind="virtual"),
        config_json="{}",
    )
    identity = set(session_attributes(cast(Run, stand_in)))
    assert identity >= {names.RUN_ID, names.CONDITION, names.CONFIG_ID, names.CLOCK, names.CONFIG_JSON}
    assert session.attributes == {k: turn.attributes[k] for k in identity}
    assert session.attributes[names.RUN_ID] == "r1"


def test_the_report_flags_turns_recorded_twice_as_an_integrity_failure(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fixtures = make_fixtures(tmp_path / "fx", ["q1", "q2"])
    out = tmp_path / "o"
    args = [str(fixtures), *SIM, "--rounds", "2", "--out", str(out), "--run-id", "r1"]
    assert replay(args, capsys)[0] == 0
    assert replay([*args, "--append"], capsys)[0] == 0
    doc = build(load_paths([out], ()), draw=False)
    text = " ".join(getattr(b, "text", "") for b in doc.blocks)
    assert not doc.complete and "4 turn(s) recorded more than once" in text
    assert "INTEGRITY FAILURE" in text


def experiment(out: Path, fixtures: Path, config: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "pipeline.experiment", str(fixtures), "--out", str(out), "--config", str(config)]
    command += ["--conditions", "B", "--rounds", "2", "--limit", "2", *extra]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_a_second_experiment_into_the_same_folder_refuses_and_leaves_the_first_report(tmp_path: Path) -> None:
    fixtures = make_fixtures(tmp_path / "fx", ["q1", "q2"])
    config = tmp_path / "sim.toml"
    config.write_text((ROOT / "configs" / "simulator.toml").read_text().replace('clock = "real"', 'clock = "virtual"'))
    out = tmp_path / "exp"
    first = experiment(out, fixtures, config)
    assert first.returncode == 0, first.stderr
    report = (out / "report" / "report.md").read_bytes()
    second = experiment(out, fixtures, config)
    assert second.returncode == 2 and "already holds run(s) exp-B" in second.stderr
    assert (out / "report" / "report.md").read_bytes() == report
    fresh = experiment(out, fixtures, config, "--name", "again")
    assert fresh.returncode == 0, fresh.stderr
    assert {r.run_id for r in read_bench_csv(out / "bench.csv")} == {"exp-B", "again-B"}
