"""A stage's CPU: the meter's readings on a synthetic ``/proc/stat`` and ``getrusage``, exactly; the
recorder reading it at each stage's start and first output on the virtual clock, through spans and the
trace file to bench.csv's columns; none in simulated time; and a real replay records it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pipeline.analysis.read import rows_from_spans
from pipeline.analysis.traces import ReadProblems, read_trace_file
from pipeline.clock import VirtualClock, run_on_clock
from pipeline.records.turn_row import TurnRow
from pipeline.replay import main
from pipeline.report.build import build
from pipeline.report.document import Table
from pipeline.report.load import Dataset, RunInfo, load_paths
from pipeline.run.cpu import CpuMeter
from pipeline.run.turn import run_turn
from pipeline.tracing.export import Tracing
from pipeline.tracing.timeline import StageCpu
from stages.llm.scripted import ScriptedReply
from tests.fixture_files import make_fixtures
from tests.paths import REPO_ROOT
from tests.scenario import run_virtual, stages, utterance
from tests.tracing.test_export_roundtrip import ATTRS

ROOT = REPO_ROOT


@dataclass
class Usage:
    ru_utime: float = 0.0
    ru_stime: float = 0.0
    ru_nvcsw: int = 0
    ru_nivcsw: int = 0


def stat(path: Path, busy: int, steal: int) -> None:
    """``/proc/stat``'s first line: user nice system idle iowait irq softirq steal ..."""
    path.write_text(f"cpu  {busy - steal} 0 0 999999 0 0 0 {steal} 0 0\ncpu0 1 0 0 1 0 0 0 0 0 0\n")


def test_the_meter_gives_this_process_cpu_and_the_machines_other_and_steal_time(tmp_path: Path) -> None:
    usage = Usage(1.0, 0.5, 10, 2)
    meter = CpuMeter(tmp_path / "stat", lambda: usage)
    stat(tmp_path / "stat", busy=1000, steal=3)
    start = meter.read()
    usage.ru_utime, usage.ru_stime, usage.ru_nvcsw, usage.ru_nivcsw = 1.25, 0.55, 14, 9
    stat(tmp_path / "stat", busy=1000 + 60, steal=3 + 2)
    used = meter.between(start, meter.read())
    # ours: 250 ms user + 50 ms system; the machine's 60 ticks hold ours, the rest is someone else's
    tick = meter.tick_ms
    assert used == StageCpu(250.0, 50.0, 4, 7, round(max(0.0, 60 * tick - 300), 1), round(2 * tick, 1))


def test_without_proc_stat_only_this_process_is_measured(tmp_path: Path) -> None:
    usage = Usage()
    meter = CpuMeter(tmp_path / "missing", lambda: usage)
    start = meter.read()
    usage.ru_utime = 0.1
    assert meter.between(start, meter.read()) == StageCpu(100.0, 0.0, 0, 0, None, None)


def test_the_recorder_reads_each_stage_from_its_start_to_its_first_output_into_the_csv(tmp_path: Path) -> None:
    clock = VirtualClock()

    def usage() -> Usage:
        # half a core of user time and a tenth of system time for as long as the turn runs
        t = clock.now_ns() / 1e9
        return Usage(t * 0.5, t * 0.1, 0, 0)

    stat(tmp_path / "stat", busy=0, steal=0)
    meter = CpuMeter(tmp_path / "stat", usage)
    server = stages(ScriptedReply("Hi. How are you today? Fine."), asr_ms=300, ttft_ms=200, tts_first_ms=100)
    tl = run_on_clock(run_turn(utterance(), server, clock, meter=meter), clock)
    assert tl.asr.cpu == StageCpu(150.0, 30.0, 0, 0, 0.0, 0.0)
    assert tl.calls[0].cpu == StageCpu(100.0, 20.0, 0, 0, 0.0, 0.0)
    assert tl.tts[0].cpu == StageCpu(50.0, 10.0, 0, 0, 0.0, 0.0)
    tracing = Tracing(tmp_path / "t.jsonl", "test")
    tracing.emit_turn(tl, ATTRS)
    tracing.shutdown()
    problems = ReadProblems()
    [row] = rows_from_spans(read_trace_file(tmp_path / "t.jsonl", problems), problems)
    assert (row.asr_cpu_ms, row.asr_forced_switches, row.asr_other_cpu_ms, row.asr_steal_ms) == (180.0, 0, 0.0, 0.0)
    assert (row.first_token_cpu_ms, row.tts_first_frame_cpu_ms) == (120.0, 60.0)


def test_simulated_time_has_no_cpu_figures() -> None:
    tl = run_virtual(stages(ScriptedReply("Hi. Fine.")))
    assert tl.asr.cpu is None and tl.calls[0].cpu is None and tl.tts[0].cpu is None


def test_a_real_replay_records_each_stages_cpu(tmp_path: Path) -> None:
    fixtures = make_fixtures(tmp_path / "fx", ["q1"])
    out = tmp_path / "o"
    args = [str(fixtures), "--config", str(ROOT / "configs" / "simulator.toml"), "--rounds", "1", "--fast"]
    assert main([*args, "--out", str(out), "--quiet"], env={}) == 0
    [row] = load_paths([out], ()).rows
    assert row.ok and row.asr_cpu_ms is not None and row.asr_cpu_ms >= 0
    assert row.asr_forced_switches is not None and row.asr_forced_switches >= 0
    assert row.asr_other_cpu_ms is not None and row.asr_steal_ms is not None
    assert row.tts_first_frame_cpu_ms is not None and row.first_token_cpu_ms is not None


def _rows(condition: str, tts_cpu: float | None) -> list[TurnRow]:
    return [
        TurnRow(
            run_id=f"r-{condition}",
            condition=condition,
            config_id=f"cfg-{condition}",
            question_id=f"q{i}",
            round=2,
            ok=1,
            turn_start_ns=1_000 + i,
            asr_ms=400.0 + 10 * i,
            asr_cpu_ms=None if tts_cpu is None else 720.0 + 18 * i,
            tts_first_frame_ms=10.0,
            tts_first_frame_cpu_ms=tts_cpu,
        )
        for i in range(3)
    ]


def test_the_report_sets_each_conditions_stage_cpu_beside_the_segments(tmp_path: Path) -> None:
    runs = {f"r-{c}": RunInfo(f"r-{c}", c, (f"cfg-{c}",), "{}", 1) for c in ("A", "B")}
    doc = build(Dataset.of_rows(_rows("A", 1.5) + _rows("B", 12.0), str(tmp_path), runs=runs), draw=False)
    table = next(b for b in doc.blocks if isinstance(b, Table) and b.key == "neighbours")
    # medians: ASR 410 ms wall, 738 ms CPU (1.80 cores); the TTS's first frame 10 ms, beside it B's LLM
    assert table.rows == (
        ("A (cloud)", "410.0", "738.0", "1.80", "10.0", "1.5", "0.15", "measured"),
        ("B (local)", "410.0", "738.0", "1.80", "10.0", "12.0", "1.20", "measured"),
    )
    without = build(Dataset.of_rows(_rows("A", None) + _rows("B", None), str(tmp_path), runs=runs), draw=False)
    assert not any(isinstance(b, Table) and b.key == "neighbours" for b in without.blocks)
