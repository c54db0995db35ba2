"""A step's users on the virtual clock, with devices that take a fixed time per turn: arrivals, think time,
the hold's end, warm-ups, session length and refused sessions, exact; and the rows read back from the traces."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.analysis.read import read_traces
from pipeline.analysis.row_sink import RowSink
from pipeline.capacity.profile import LoadProfile
from pipeline.capacity.users import Users, Window
from pipeline.clock import Clock, VirtualClock, run_on_clock
from pipeline.records.bench_csv import BenchCsv, read_bench_csv
from pipeline.run.device_side import Ask
from pipeline.run.session import Run
from pipeline.settings.config import Config
from pipeline.settings.fixtures import load_questions
from pipeline.tracing.export import Tracing
from pipeline.tracing.timeline import TurnTimeline
from pipeline.transport.device.link import DeviceError
from tests.paths import REPO_ROOT

FIXTURES = REPO_ROOT / "audio_fixtures"
TURN_S = 4.0


@dataclass
class _Engines:
    endpoint: str = "fake server"


class FakeDevice:
    """A session whose every turn takes ``TURN_S`` of the clock; ``refuse``: its session never opens."""

    opened: list[tuple[int, float]] = []  # noqa: RUF012 - (device, second) of every session opened, for the test
    asked: list[Ask] = []  # noqa: RUF012 - every question asked, for the test

    def __init__(self, index: int, clock: Clock, refuse: bool = False) -> None:
        self.index, self.clock, self.refuse = index, clock, refuse

    async def __aenter__(self) -> FakeDevice:
        if self.refuse:
            raise DeviceError("ws://fake: refused (HTTP 503)")
        FakeDevice.opened.append((self.index, _seconds(self.clock)))
        return self

    async def __aexit__(self, *exc: object) -> None:
        pass

    async def turn(self, ask: Ask, then: Ask | None = None) -> TurnTimeline:
        import asyncio

        FakeDevice.asked.append(ask)
        start = self.clock.now_ns()
        await asyncio.sleep(TURN_S)
        return TurnTimeline(start_ns=start, end_ns=self.clock.now_ns())


def _seconds(clock: Clock) -> float:
    return round((clock.now_ns() - START_NS[0]) / 1e9, 3)


START_NS = [0]


def users_of(
    tmp_path: Path,
    profile: LoadProfile,
    devices: int,
    refused: frozenset[int] = frozenset(),
    run_id: str = "cap-1",
    hold_s: float = 10,
) -> tuple[Users, RowSink, VirtualClock]:
    """A step's users of ``FakeDevice``s on a virtual clock, tracing to ``tmp_path``/traces (also a soak's)."""
    FakeDevice.opened, FakeDevice.asked = [], []
    clock = VirtualClock()
    questions = load_questions(FIXTURES)
    questions = dataclasses.replace(
        questions, questions=tuple(q for q in questions.questions if q.id in ("en01", "en02"))
    )
    cfg = Config()
    cfg = dataclasses.replace(cfg, fleet=dataclasses.replace(cfg.fleet, **profile.arrival_settings(devices)))
    run = Run(
        run_id,
        cfg,
        f"cid-{devices}",
        questions,
        clock,
        _Engines(),  # type: ignore[arg-type]
        remote=lambda i: FakeDevice(i, clock, i in refused),
    )
    tracing = Tracing(tmp_path / "traces" / f"{run_id}.jsonl", "test")
    sink = RowSink(BenchCsv(tmp_path / "bench.csv"), 0, lambda _m: None)
    users = Users(run, profile, tracing, sink, hold_s=hold_s, max_hold_s=max(30, hold_s), min_turns=1)
    users.speech_ends = {q.id: 1000 for q in questions.questions}  # no VAD: where speech ends is given
    return users, sink, clock


def step(
    tmp_path: Path, profile: LoadProfile, devices: int, refused: frozenset[int] = frozenset(), run_id: str = "cap-1"
) -> tuple[Window, list[Any], Path]:
    users, sink, clock = users_of(tmp_path, profile, devices, refused, run_id)

    async def go() -> Window:
        START_NS[0] = clock.now_ns()
        return await users.run_step()

    window = run_on_clock(go(), clock)
    users.tracing.shutdown()
    return window, sink.rows, tmp_path / "traces" / f"{run_id}.jsonl"


def test_devices_arrive_ask_think_and_stop_at_the_holds_end(tmp_path: Path) -> None:
    window, rows, trace = step(tmp_path, LoadProfile(arrival="staggered", ramp_s=2, think_s=1), devices=2)
    # device 0 arrives at 0 s, device 1 at 1 s (2 s ramp over 2 devices); the hold ends 10 s after the last arrival.
    # Each turn takes 4 s and each user thinks 1 s: device 0 asks at 0, 5, 10; device 1 at 1, 6 (at 11 the hold is over)
    starts = sorted((r.device, round((r.turn_start_ns - START_NS[0]) / 1e9, 3)) for r in rows)
    assert starts == [(0, 0.0), (0, 5.0), (0, 10.0), (1, 1.0), (1, 6.0)]
    assert [(r.device, r.warmup) for r in rows if r.warmup] == [(0, 1), (1, 1)]  # each device's first question
    assert {r.devices for r in rows} == {2} and {r.run_id for r in rows} == {"cap-1"}
    assert [(r.device, r.question_id, r.round) for r in sorted(rows, key=lambda r: (r.device, r.turn_start_ns))] == [
        (0, "en01", 1),
        (0, "en02", 1),
        (0, "en01", 2),
        (1, "en02", 1),
        (1, "en01", 1),
    ]  # each device in its own order (rotated by its index), a round per pass over the set
    assert window.measured == 3 and window.held_s == 13.0  # from the last arrival (1 s) to the last turn's end (14 s)
    # the traces read back with the project's reader give the very rows the run wrote, and bench.csv holds them
    assert read_traces([trace], workers=1).rows == sorted(rows, key=lambda r: r.turn_start_ns)
    assert read_bench_csv(tmp_path / "bench.csv") == rows


def test_each_question_is_asked_with_its_truth_so_its_silence_runs_from_where_the_user_finished(tmp_path: Path) -> None:
    step(tmp_path, LoadProfile(arrival="together", ramp_s=0, think_s=1), devices=1)
    truths = {q.id: q.truth.speech_end_ms for q in load_questions(FIXTURES).questions if q.truth is not None}
    assert FakeDevice.asked and all(a.true_end_ms == truths[a.question_id] for a in FakeDevice.asked)


def test_questions_per_hour_and_the_session_length(tmp_path: Path) -> None:
    # 720 questions an hour: one every 5 s, so 1 s of thinking after each 4 s turn; a new connection after 4 s
    profile = LoadProfile(arrival="together", ramp_s=0, questions_per_hour=720, session_s=4)
    _window, rows, _ = step(tmp_path, profile, devices=1)
    assert sorted(round((r.turn_start_ns - START_NS[0]) / 1e9, 3) for r in rows) == [0.0, 5.0]  # at 10 s: over
    assert FakeDevice.opened == [(0, 0.0), (0, 5.0)]  # the second session opened once the first's 4 s were over
    assert [r.warmup for r in sorted(rows, key=lambda r: r.turn_start_ns)] == [1, 0]  # one warm-up per device


def test_a_refused_device_records_failed_turns_and_tries_again(tmp_path: Path) -> None:
    _window, rows, _ = step(
        tmp_path, LoadProfile(arrival="together", ramp_s=0, think_s=3), devices=2, refused=frozenset({1})
    )
    refused = sorted(round((r.turn_start_ns - START_NS[0]) / 1e9, 3) for r in rows if r.device == 1)
    assert refused == [0.0, 3.0, 6.0, 9.0]  # every 3 s (its think time) until the hold is over
    assert all(r.error == "refused" and r.ok == 0 and r.warmup == 0 for r in rows if r.device == 1)
    assert [r.ok for r in rows if r.device == 0] == [1, 1]
