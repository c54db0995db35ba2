"""Devices on Ray workers (a local Ray this test starts and stops): same rows as one process, and a
worker that dies mid-run costs only its own devices' unfinished turns, each recorded."""

from __future__ import annotations

import contextlib
import io
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipeline.records.bench_csv import read_bench_csv
from pipeline.records.turn_row import TurnRow
from pipeline.replay import main
from pipeline.run.device_side import Ask
from pipeline.run.ray_workers import WORKER_LOST, WorkerSpec, run_on_ray, shares
from pipeline.settings.config import load_config
from pipeline.settings.fixtures import load_questions
from pipeline.tracing.export import Tracing
from pipeline.tracing.timeline import TurnTimeline
from tests.fixture_files import make_fixtures
from tests.paths import REPO_ROOT

pytestmark = pytest.mark.ray

ray = pytest.importorskip("ray")
ROOT = REPO_ROOT
SIM = ROOT / "configs" / "simulator.toml"


@pytest.fixture(scope="module", autouse=True)
def local_ray() -> Iterator[None]:
    """One local Ray for the module (starting one takes seconds); stopped after its last test."""
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()


def replay(tmp_path: Path, run_id: str, extra: list[str]) -> tuple[int, str, list[TurnRow]]:
    fixtures = make_fixtures(tmp_path / "fx", ["q1", "q2", "q3"])
    out = tmp_path / "o"
    err = io.StringIO()
    args = [
        str(fixtures),
        "--config",
        str(SIM),
        "--fast",
        "--rounds",
        "2",
        "--limit",
        "2",
        "--devices",
        "3",
        "--out",
        str(out),
    ]
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main([*args, "--run-id", run_id, "--quiet", *extra], env={})
    rows = [r for r in read_bench_csv(out / "bench.csv") if r.run_id == run_id]
    return code, err.getvalue(), rows


def shape(rows: list[TurnRow]) -> list[tuple[object, ...]]:
    return sorted((r.device, r.round, r.question_id, r.ok, r.llm_calls, r.sentences) for r in rows)


def test_shares_spread_devices_over_workers() -> None:
    assert shares(5, 2) == [(0, 2, 4), (1, 3)]
    assert shares(1, 3) == [(0,)]


def test_two_ray_workers_give_the_rows_one_process_gives(tmp_path: Path) -> None:
    code, err, alone = replay(tmp_path, "one", [])
    assert code == 0, err
    code, err, spread = replay(tmp_path, "ray", ["--workers", "2"])
    assert code == 0, err
    assert len(spread) == len(alone) == 12
    assert shape(spread) == shape(alone)
    assert {r.config_id for r in spread} == {r.config_id for r in alone}
    for rows in (alone, spread):
        assert {r.ok for r in rows} == {1}


def test_every_workers_spans_reach_one_otlp_receiver(tmp_path: Path) -> None:
    from pipeline.analysis.traces import ReadProblems, read_trace_file
    from tests.otlp_receivers import HttpReceiver

    fixtures = make_fixtures(tmp_path / "fx", ["q1", "q2"])
    args = [str(fixtures), "--config", str(SIM), "--fast", "--rounds", "1", "--devices", "2", "--workers", "2"]
    with HttpReceiver() as receiver:
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint, "OTEL_SERVICE_NAME": "workers"}
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            assert main([*args, "--out", str(tmp_path / "o"), "--run-id", "w", "--quiet"], env=env) == 0
    spans = list(read_trace_file(tmp_path / "o" / "traces" / "w.jsonl", ReadProblems()))
    in_file = {s.span_id for s in spans}
    on_wire = {s.span_id.hex() for s in receiver.received.spans}
    missing = sorted((s.name, s.parent_span_id) for s in spans if s.span_id not in on_wire)
    assert len(in_file) > 10 and on_wire == in_file, missing  # both workers' spans, each once, nothing else
    assert sum(s.name == "session" for s in receiver.received.spans) == 2  # one session per worker


class DyingDevice:
    """A device of a fake server: device 1's second turn kills its worker process outright."""

    def __init__(self, index: int) -> None:
        self.index, self.turns = index, 0

    async def __aenter__(self) -> DyingDevice:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    async def turn(self, ask: Ask, then: Ask | None = None) -> TurnTimeline:
        self.turns += 1
        if self.index == 1 and self.turns == 2:
            sys.stdout.flush()
            os._exit(1)  # as a machine lost mid-run: no exception, no goodbye
        return TurnTimeline(start_ns=1_000, end_ns=2_000)


def test_a_worker_killed_mid_run_costs_only_its_unfinished_turns(tmp_path: Path) -> None:
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers need not import tests/
    fixtures = make_fixtures(tmp_path / "fx", ["q1", "q2"])
    cfg = load_config([SIM], {"fleet": {"devices": 2}, "run": {"pacing": "fast", "rounds": 2}})
    spec = WorkerSpec(
        "dies", cfg, "cfg", load_questions(fixtures, ""), tmp_path / "models", (), "fake server", {}, "test",
        remote=DyingDevice, roles=("vad",),
    )  # fmt: skip
    tracing = Tracing(tmp_path / "dies.jsonl", "test")
    lines: list[dict[str, object]] = []
    said: list[str] = []
    outcome = run_on_ray(spec, 2, tracing, lines.append, said.append)
    tracing.shutdown()
    from pipeline.analysis.read import rows_from_spans
    from pipeline.analysis.traces import ReadProblems, read_trace_file

    rows = rows_from_spans(read_trace_file(tmp_path / "dies.jsonl", ReadProblems()))
    assert len(outcome.lost) == 1 and said == [f"error: {outcome.lost[0]}"]
    assert outcome.lost[0].startswith("worker 1 (devices 1) failed mid-run:")
    by_device = {d: [r for r in rows if r.device == d] for d in (0, 1)}
    assert len(by_device[0]) == 4 and {r.ok for r in by_device[0]} == {1}  # the other worker: unaffected
    assert len(by_device[1]) == 4  # every turn of the dead worker's device is a row
    lost = [r for r in by_device[1] if r.error == WORKER_LOST]
    assert 3 <= len(lost) <= 4 and all("failed mid-run" in str(r.note) for r in lost)
