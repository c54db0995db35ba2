"""Interleaved conditions on the virtual clock: a stage that slows over time (the ASR, 20 ms more per
second of the hour) lands on both conditions alike when they take turns (``Baton``), and on the later
one when they run one after another, where the report's confounding check names it."""

from __future__ import annotations

import asyncio
import dataclasses
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from pipeline import experiment
from pipeline.analysis.bootstrap import Interval
from pipeline.analysis.row_sink import RowSink
from pipeline.clock import VirtualClock, run_on_clock
from pipeline.events import Event, SpeechEnd, Transcript
from pipeline.plan.prepare import make_run, prepare
from pipeline.plan.run_plan import RunPlan
from pipeline.records.bench_csv import read_bench_csv
from pipeline.replay import main as replay_main
from pipeline.report.build import build
from pipeline.report.compare import Diff
from pipeline.report.conditions import group
from pipeline.report.confound import StageCheck, checks, order
from pipeline.report.document import Paragraph, Table
from pipeline.report.load import load_paths
from pipeline.report.sections.confounding import warning
from pipeline.run.gate import OPEN, Baton, TurnGate, interleaved
from pipeline.run.session import Run, run_session
from pipeline.tracing.export import Tracing
from stages.asr.oracle import OracleAsr
from tests.fixture_files import make_fixtures
from tests.paths import REPO_ROOT

ROOT = REPO_ROOT
DRIFT_MS_PER_S = 20.0  # the ASR's slowing: its delay grows this much per second of virtual time
ASR_MS = 300.0


def test_the_order_alternates_forward_and_back() -> None:
    assert [interleaved(p, ["A", "B"]) for p in range(3)] == [["A", "B"], ["B", "A"], ["A", "B"]]
    assert interleaved(1, ["A", "B", "B'"]) == ["B'", "B", "A"]


@pytest.fixture
def drifting_asr(monkeypatch: pytest.MonkeyPatch) -> None:
    """The oracle ASR, slower by ``DRIFT_MS_PER_S`` for every virtual second since the loop began."""

    async def run(self: OracleAsr, events: AsyncIterator[Event]) -> AsyncIterator[Event]:
        async for event in events:
            if isinstance(event, SpeechEnd):
                now = asyncio.get_running_loop().time()
                await asyncio.sleep((ASR_MS + DRIFT_MS_PER_S * now) / 1000)
                yield Transcript(text=self.text, language=self.language)
                return

    monkeypatch.setattr(OracleAsr, "run", run)


def runs(tmp_path: Path, clock: VirtualClock) -> list[tuple[Run, Tracing, RowSink]]:
    fixtures = make_fixtures(tmp_path / "fx", ["q1", "q2", "q3"])
    out = tmp_path / "out"
    made = []
    for label in ("A", "B"):
        settings = {"run": {"clock": "virtual", "rounds": 3, "condition": label}}
        configs = (ROOT / "configs" / "simulator.toml",)
        p = prepare(RunPlan(fixtures, f"x-{label}", configs, settings, out=out, quiet=True), {})
        run = dataclasses.replace(make_run(f"x-{label}", p, {}), clock=clock)
        tracing = Tracing(out / "traces" / f"x-{label}.jsonl", "test")
        made.append((run, tracing, RowSink(p.bench, 0, lambda _m: None)))
    return made


def measure(tmp_path: Path, together: Callable[[list[Run]], list[TurnGate]] | None) -> list[StageCheck]:
    """Runs A and B on one virtual clock (one after another when ``together`` is None, else at once with
    the gates it gives); the confounding check of B against A, from the traces they wrote."""
    clock = VirtualClock()
    made = runs(tmp_path, clock)

    async def go() -> None:
        if together is None:
            for run, tracing, sink in made:
                await run_session(run, tracing, sink, lambda _m: None)
            return
        gates = together([run for run, _, _ in made])
        sessions = [
            run_session(dataclasses.replace(run, gate=gate), tracing, sink, lambda _m: None)
            for (run, tracing, sink), gate in zip(made, gates, strict=True)
        ]
        await asyncio.gather(*sessions)

    run_on_clock(go(), clock)
    for _, tracing, _ in made:
        tracing.shutdown()
    data = load_paths([tmp_path / "out"])
    conds = group(data)
    assert order(conds).interleaved == (together is not None)
    return checks(conds, [("B", "A")], data.runs)


def asr(found: list[StageCheck]) -> StageCheck:
    return next(c for c in found if c.stage == "asr")


def test_run_one_after_another_the_drift_falls_on_the_later_condition_and_is_named(
    tmp_path: Path, drifting_asr: None
) -> None:
    check = asr(measure(tmp_path, None))
    assert check.confounded and check.difference.value is not None and check.difference.value > 0
    assert check.n == check.n_base == 6  # 3 questions x 2 measured rounds


def test_interleaved_the_drift_falls_on_both_conditions_alike(tmp_path: Path, drifting_asr: None) -> None:
    baton = Baton(["A", "B"])
    check = asr(measure(tmp_path, lambda made: [baton.gate("A"), baton.gate("B")]))
    assert not check.confounded
    sequential = asr(measure(tmp_path / "seq", None))
    assert check.difference.value is not None and sequential.difference.value is not None
    print(
        f"B - A, ASR median: interleaved {check.difference.value:+.1f}, sequential {sequential.difference.value:+.1f}"
    )
    assert abs(check.difference.value) < 0.1 * sequential.difference.value


def test_without_a_drift_nothing_is_confounded_either_way(tmp_path: Path) -> None:
    found = measure(tmp_path, None)
    assert {c.stage for c in found} == {"vad", "asr"}
    assert not any(c.confounded for c in found)
    assert all(c.difference.value == 0 for c in found)  # the same seeded delays in both: exactly the same


def test_the_gate_is_open_by_default() -> None:
    assert Run.__dataclass_fields__["gate"].default is OPEN


def test_an_experiment_interleaves_its_conditions_turn_by_turn(tmp_path: Path) -> None:
    """Two real processes, the emulated cloud's A and the simulator's B, kept warm and told to take turns."""
    fixtures = make_fixtures(tmp_path / "fx", ["q1"])
    out = tmp_path / "exp"
    command = [sys.executable, "-m", "pipeline.experiment", str(fixtures), "--out", str(out)]
    command += ["--config", str(ROOT / "configs" / "simulator.toml"), "--conditions", "A,B", "--rounds", "2"]
    command += ["--limit", "1"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "interleaved turn by turn: A B | B A" in done.stderr
    rows = sorted(read_bench_csv(out / "bench.csv"), key=lambda r: r.turn_start_ns)
    assert [r.condition for r in rows] == ["A", "B", "B", "A"]
    assert "were interleaved" in (out / "report" / "report.md").read_text(encoding="utf-8")


def test_only_interleaved_conditions_are_told_to_take_turns_and_their_plans_say_so(tmp_path: Path) -> None:
    args = experiment.parse_args([str(tmp_path / "fx"), "--out", str(tmp_path / "exp")])
    args.out.mkdir()  # where condition A's emulated cloud settings are written
    for gated in (True, False):
        commands = experiment.commands(args, gated=gated)
        assert sorted(commands) == ["A", "B", "B'"]
        assert all(("--turn-gate" in command) is gated for command in commands.values())


def test_a_run_whose_conductor_goes_away_keeps_its_turns_and_says_why(tmp_path: Path) -> None:
    fixtures = make_fixtures(tmp_path / "fx", ["q1"])
    command = [sys.executable, "-m", "pipeline.replay", str(fixtures), "--out", str(tmp_path / "o"), "--quiet"]
    command += ["--config", str(ROOT / "configs" / "simulator.toml"), "--clock", "virtual", "--rounds", "2"]
    done = subprocess.run([*command, "--turn-gate"], input="go\n", capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stdout.splitlines()[:2] == ["gate: ready 2", "gate: done 0"]
    assert "standard input ended before turn 2 of 2" in done.stderr
    assert len(read_bench_csv(tmp_path / "o" / "bench.csv")) == 1


def test_a_gate_needs_one_device(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fixtures = make_fixtures(tmp_path / "fx", ["q1"])
    args = [str(fixtures), "--config", str(ROOT / "configs" / "simulator.toml"), "--clock", "virtual"]
    assert replay_main([*args, "--devices", "2", "--turn-gate", "--out", str(tmp_path / "o")], env={}) == 2
    assert "--turn-gate takes one turn at a time" in capsys.readouterr().err


def test_the_report_names_the_confounded_stage_of_a_sequential_run(tmp_path: Path, drifting_asr: None) -> None:
    measure(tmp_path, None)
    doc = build(load_paths([tmp_path / "out"]), draw=False)
    said = [b.text for b in doc.blocks if isinstance(b, Paragraph)]
    assert any("run one after another (sequential)" in t for t in said)
    warned = [t for t in said if t.startswith("Confounded:")]
    assert len(warned) == 1 and "the ASR (the same component on the same audio)" in warned[0]
    assert "`python -m pipeline.experiment`" in warned[0]
    table = next(b for b in doc.blocks if isinstance(b, Table) and b.key == "confounding")
    verdicts = [(r[1], r[5], r[7]) for r in table.rows]
    # simulated time has no CPU figures: said so, never a zero
    assert verdicts == [
        ("VAD", "- (runs per frame)", "same within its interval"),
        ("ASR", "not recorded", "CONFOUNDED"),
    ]


def test_a_stage_that_moved_although_interleaved_is_worded_as_what_runs_beside_it() -> None:
    check = StageCheck("B", "A", "asr", "asr_ms", Diff(71.2, Interval(30.4, 105.8), 499.7), 21, 21)
    assert check.confounded
    interleaved_words = warning(check, interleaved=True)
    assert interleaved_words.startswith("Moved although interleaved: B (local) vs A (cloud): the ASR")
    assert "+71.2 ms" in interleaved_words and "scripts/bench_neighbours.py" in interleaved_words
    assert warning(check, interleaved=False).startswith("Confounded:")


def test_the_warning_reads_the_stages_cpu_time_as_more_work_or_a_wait() -> None:
    moved = Diff(71.2, Interval(30.4, 105.8), 499.7)
    more_work = StageCheck("B", "A", "asr", "asr_ms", moved, 21, 21, Diff(60.0, Interval(20.0, 90.0), 900.0))
    assert more_work.shares_cpu
    assert "Its CPU time moved with it (+60.0 ms [+20.0, +90.0]): the same work cost more" in warning(more_work, True)
    for cpu in (Diff(5.0, Interval(-10.0, 20.0), 900.0), Diff(20.0, Interval(5.0, 30.0), 900.0)):
        waited = StageCheck("B", "A", "asr", "asr_ms", moved, 21, 21, cpu)
        assert not waited.shares_cpu  # inside its interval, or under half the wall time's move
        assert "Its CPU time did not move as much" in warning(waited, False)
    assert "CPU time" not in warning(StageCheck("B", "A", "asr", "asr_ms", moved, 21, 21), True)
