"""``python -m pipeline.capacity --workers 2`` on a local Ray (this module starts and stops it) against the lab's
server (``pipeline.serve``, scripted stages, its own process): a step's rows read back from its one trace file
are those its workers finished, every worker's send lateness is pooled into the step's, and a worker killed
mid-step leaves one failed turn (``worker_lost``) for each of its devices."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pipeline.analysis.read import read_traces
from pipeline.analysis.traces import trace_files
from pipeline.capacity import step_verdict
from pipeline.capacity.__main__ import main, parse_args, plan_of, profile_overrides
from pipeline.capacity.profile import load_profile
from pipeline.capacity.ramp import Ramp, Target
from pipeline.capacity.users import Users, Window
from pipeline.capacity.workers import RayFleet, ShareWorker, Tally
from pipeline.records.bench_csv import read_bench_csv
from pipeline.records.ramp_result import Capacity
from pipeline.records.turn_row import TurnRow
from pipeline.run.ray_workers import WORKER_LOST
from pipeline.run.session import TraceSink
from pipeline.tracing.export import Tracing
from pipeline.transport.device.pacer import send_lateness
from tests.capacity.test_ramp_e2e import FIXTURES, SIMULATOR, start_server

pytestmark = [pytest.mark.ray, pytest.mark.transport, pytest.mark.realtime]

ray = pytest.importorskip("ray")


@pytest.fixture(scope="module", autouse=True)
def local_ray() -> Iterator[None]:
    """One local Ray for the module (starting one takes seconds); stopped after its last test."""
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int]]:
    proc, ws, _mqtt = start_server(tmp_path_factory.mktemp("server"))
    yield ws, proc.pid
    proc.send_signal(signal.SIGINT)
    try:
        proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()


def argv(out: Path, url: str, min_turns: int = 1) -> list[str]:
    return [
        *(str(FIXTURES), "--config", str(SIMULATOR), "--server", url, "--out", str(out)),
        *("--steps", "3", "--hold", "3s", "--min-turns", str(min_turns), "--think", "0.2s", "--ramp", "0.5s"),
        *("--ids", "en10", "--workers", "2"),
    ]


class Marking(ShareWorker):
    """A worker whose loop records one send lateness of its own at the fleet's start: 1 ms + its first device
    (beside whatever its devices' paced sends record), so the driver's pool shows whose values it holds."""

    async def _hold(self, users: Users) -> Window:
        run_step = users.run_step

        async def marked(arrived: Callable[[], object] | None = None) -> Window:
            send_lateness().record(1.0 + self.spec.share[0])
            return await run_step(arrived)

        users.run_step = marked  # type: ignore[method-assign]
        return await super()._hold(users)


class Watched(RayFleet):
    """The fleet, with the lateness each worker handed over kept, and worker 0 killed once it has handed over
    ``kill_after`` turns (``None``: never): its warm-ups end well inside the hold."""

    kill_after: int | None = None
    late_by_worker: dict[int, list[float]]
    first: Any = None

    def _take(self, handle: Any, tracing: Tracing, sink: TraceSink, tally: Tally) -> None:
        before = len(tally.late)
        super()._take(handle, tracing, sink, tally)
        if self.first is None:
            self.first = handle  # the first drained is worker 0's
        key = 0 if handle is self.first else 1
        if len(tally.late) > before:
            self.late_by_worker.setdefault(key, []).extend(tally.late[-1].tolist())
        if (
            key == 0
            and self.kill_after is not None
            and tally.asked.get(0, 0) + tally.asked.get(2, 0) >= self.kill_after
        ):
            self.kill_after = None
            ray.kill(handle)


def ramp_watched(
    out: Path, url: str, kill_after: int | None, min_turns: int = 1
) -> tuple[Capacity, Watched, list[str]]:
    args = parse_args(argv(out, url, min_turns))
    plan, profile = plan_of(args), load_profile(None, profile_overrides(args))
    target = Target(url, FIXTURES, (SIMULATOR,))
    said: list[str] = []
    ramp = Ramp(target, profile, plan, out, {}, say=said.append)
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers need not import tests/
    fleet = Watched(ray, 2, target, profile, plan, {}, said.append, worker=Marking, scratch=str(out.parent / "scratch"))
    (out.parent / "scratch").mkdir(exist_ok=True)
    fleet.kill_after, fleet.late_by_worker = kill_after, {}
    ramp.spread = fleet
    return ramp.run(), fleet, said


def step_rows(out: Path, folder: str) -> tuple[list[TurnRow], list[TurnRow]]:
    """The step's bench.csv rows, and its rows read back from its one trace file."""
    bench = read_bench_csv(out / folder / "bench.csv")
    traces = trace_files(out / folder / "traces")
    assert len(traces) == 1
    return sorted(bench, key=lambda r: r.turn_start_ns), read_traces(traces, workers=1).rows


def test_a_step_over_two_workers_reads_back_what_they_finished(server: tuple[str, int], tmp_path: Path) -> None:
    url, _pid = server
    assert main(argv(tmp_path / "cli", url), env={}) == 0  # the command line's --workers
    found, fleet, said = ramp_watched(tmp_path / "w", url, kill_after=None)
    for out in (tmp_path / "cli", tmp_path / "w"):
        bench, traced = step_rows(out, "steps/3")
        assert traced == bench and {r.device for r in bench} == {0, 1, 2}  # both workers' devices, one store
        assert all(r.ok == 1 and r.devices == 3 for r in bench)
        assert sum(r.warmup for r in bench) == 3  # each device's first question, wherever it ran
    s = found.steps[0]
    assert s.turns == sum(1 for r in bench if not r.warmup) >= 1 and sum(s.failures.values()) == 0
    # every worker's paced sends reached the driver, and the step's lateness is all of them
    late = fleet.late_by_worker
    assert 1.0 in late[0] and 2.0 in late[1]  # worker 0 runs devices 0 and 2, worker 1 device 1
    assert s.lateness_sends == len(late[0]) + len(late[1])
    assert (s.lateness_p50_ms, s.lateness_p99_ms) == step_verdict.lateness(np.array(late[0] + late[1]))
    assert s.held_s >= 3 and fleet.lost == [] and not any(line.startswith("error") for line in said)


def test_a_worker_killed_mid_step_leaves_a_lost_turn_per_device(server: tuple[str, int], tmp_path: Path) -> None:
    url, _pid = server
    # the two lost turns count as measured: the hold goes on until the surviving device has answered two
    found, fleet, said = ramp_watched(tmp_path / "k", url, kill_after=1, min_turns=4)
    assert len(fleet.lost) == 1 and fleet.lost[0].startswith("worker 0 (devices 0, 2) failed mid-step:")
    assert list((tmp_path / "scratch").iterdir()) == []  # the killed worker's folder went with its step
    assert f"error: {fleet.lost[0]}" in said
    bench, traced = step_rows(tmp_path / "k", "steps/3")
    assert traced == bench
    lost = [r for r in bench if r.error == WORKER_LOST]
    assert len(lost) == 2 and {r.device for r in lost} == {0, 2} and all("failed mid-step" in str(r.note) for r in lost)
    survivor = [r for r in bench if r.device == 1]
    assert len(survivor) >= 3 and all(r.ok == 1 for r in survivor)  # the other worker: unaffected
    s = found.steps[0]
    assert s.failures["other"] == 2 and s.verdict != "holds"
