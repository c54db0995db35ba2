"""Many devices on one model: the scheduler's queue on the virtual clock, arrivals, and whole runs."""

from __future__ import annotations

import asyncio
import contextlib
import io
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from pipeline.analysis.traces import ReadProblems, ReadSpan, read_trace_file
from pipeline.clock import VirtualClock, run_on_clock
from pipeline.events import CallEnd, QueueWait, TokenDelta
from pipeline.fleet.arrivals import lockstep_warning, rotated, start_offsets_ms
from pipeline.fleet.background import BackgroundLoad
from pipeline.fleet.scheduled import ScheduledBackend
from pipeline.fleet.scheduler import BACKGROUND, INTERACTIVE, QueueFull, Scheduler
from pipeline.records.bench_csv import read_bench_csv
from pipeline.records.turn_row import TurnRow
from pipeline.replay import main
from pipeline.report.conditions import number
from pipeline.tracing.timeline import JobTimeline
from stages.llm.backend import ChatRequest, Chunk, Message
from tests.fixture_files import make_fixtures
from tests.paths import REPO_ROOT

ROOT = REPO_ROOT
SIM = ["--config", str(ROOT / "configs" / "simulator.toml")]
MS = 1_000_000


def waits(
    arrivals: list[tuple[int, str, int]], concurrency: int = 1, priority: bool = True, **kw: object
) -> list[object]:
    """Each call's queue wait in ms (or the error's class name) for (arrival ms, class, hold ms) calls."""
    clock = VirtualClock()

    async def call(scheduler: Scheduler, at: int, cls: str, hold: int) -> object:
        await asyncio.sleep(at / 1000)
        try:
            grant = await scheduler.acquire(cls)
        except QueueFull as exc:
            return type(exc).__name__
        await asyncio.sleep(hold / 1000)
        scheduler.release(grant)
        return (grant.granted_ns - grant.enqueued_ns) / MS

    async def main_() -> list[object]:
        scheduler = Scheduler(clock, concurrency, priority=priority, **kw)  # type: ignore[arg-type]
        return list(await asyncio.gather(*(call(scheduler, *a) for a in arrivals)))

    return run_on_clock(main_(), clock)


def test_one_slot_queues_calls_first_come_first_served() -> None:
    assert waits([(0, INTERACTIVE, 100), (10, INTERACTIVE, 100), (20, INTERACTIVE, 50)]) == [0.0, 90.0, 180.0]


def test_two_slots_halve_the_queue() -> None:
    calls = [(0, INTERACTIVE, 100), (0, INTERACTIVE, 100), (10, INTERACTIVE, 100), (20, INTERACTIVE, 100)]
    assert waits(calls, concurrency=2) == [0.0, 0.0, 90.0, 80.0]


def test_interactive_calls_go_before_waiting_background_work() -> None:
    calls = [(0, BACKGROUND, 100), (10, BACKGROUND, 100), (20, INTERACTIVE, 100)]
    assert waits(calls) == [0.0, 190.0, 80.0]
    # without priority classes the voice turn waits behind the background job that came first
    assert waits(calls, priority=False) == [0.0, 90.0, 180.0]


def test_a_running_background_job_is_not_preempted() -> None:
    assert waits([(0, BACKGROUND, 300), (50, INTERACTIVE, 10)]) == [0.0, 250.0]


def test_reject_mode_and_a_full_queue_refuse_at_once() -> None:
    assert waits([(0, INTERACTIVE, 100), (10, INTERACTIVE, 10)], when_full="reject") == [0.0, "QueueFull"]
    calls = [(0, INTERACTIVE, 100), (10, INTERACTIVE, 10), (20, INTERACTIVE, 10), (120, INTERACTIVE, 10)]
    assert waits(calls, max_waiting=1) == [0.0, 90.0, "QueueFull", 0.0]


def test_a_caller_cancelled_while_waiting_leaves_the_queue() -> None:
    clock = VirtualClock()

    async def scenario() -> tuple[float, int]:
        scheduler = Scheduler(clock, 1)
        first = await scheduler.acquire(INTERACTIVE)
        gone = asyncio.create_task(scheduler.acquire(INTERACTIVE))
        later = asyncio.create_task(scheduler.acquire(INTERACTIVE))
        await asyncio.sleep(0.05)
        gone.cancel()
        await asyncio.sleep(0.05)
        scheduler.release(first)
        grant = await later
        return (grant.granted_ns - grant.enqueued_ns) / MS, scheduler.waiting

    assert run_on_clock(scenario(), clock) == (100.0, 0)


class Answers:
    """A chat backend that takes ``ms`` per call and answers three tokens."""

    model, server_address = "fake", ""

    def __init__(self, ms: int, fail: bool = False) -> None:
        self.ms, self.fail = ms, fail

    async def stream(self, request: ChatRequest) -> AsyncIterator[Chunk]:
        await asyncio.sleep(self.ms / 1000)
        if self.fail:
            raise RuntimeError("the vision model crashed")
        for word in ("one ", "two ", "three"):
            yield TokenDelta(word)
        yield CallEnd("stop", 3)


def test_a_scheduled_backend_says_its_wait_first_and_frees_the_slot_at_call_end() -> None:
    clock = VirtualClock()

    async def scenario() -> list[list[str]]:
        scheduler = Scheduler(clock, 1)
        request = ChatRequest((Message("user", "hi"),), 8)

        async def one() -> list[str]:
            seen = []
            async for chunk in ScheduledBackend(Answers(100), scheduler, INTERACTIVE).stream(request):
                seen.append(
                    f"wait {(chunk.granted_ns - chunk.enqueued_ns) / MS}"
                    if isinstance(chunk, QueueWait)
                    else type(chunk).__name__
                )
                if isinstance(chunk, CallEnd):
                    break  # as the LLM stage does: the stream is left open, the slot must not be
            return seen

        return list(await asyncio.gather(one(), one()))

    first, second = run_on_clock(scenario(), clock)
    assert first[0] == "wait 0.0" and second[0] == "wait 100.0"
    assert first[1:] == ["TokenDelta"] * 3 + ["CallEnd"]


def test_background_jobs_are_recorded_and_a_crashing_one_does_not_stop_the_others() -> None:
    clock = VirtualClock()
    jobs: list[JobTimeline] = []

    async def scenario() -> None:
        scheduler = Scheduler(clock, 1)

        def backend(index: int) -> ScheduledBackend:
            return ScheduledBackend(Answers(300, fail=index == 1), scheduler, BACKGROUND)

        load = BackgroundLoad("vision", 200, 16, backend, clock, jobs.append)
        task = asyncio.create_task(load.run())
        await asyncio.sleep(1.0)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    run_on_clock(scenario(), clock)
    assert [(j.index, j.error_type or "ok") for j in sorted(jobs, key=lambda j: j.index)] == [
        (0, "ok"),
        (1, "RuntimeError"),
        (2, "ok"),
        (3, "stopped"),
        (4, "stopped"),
    ]
    first = min(jobs, key=lambda j: j.index)
    assert first.queue is not None and (first.end_ns or 0) - first.start_ns == 300 * MS
    second = next(j for j in jobs if j.index == 1)
    assert second.queue is not None and (second.queue.granted_ns - second.queue.enqueued_ns) == 100 * MS


def test_arrival_patterns_and_rotated_orders() -> None:
    assert start_offsets_ms(3, "together") == [0.0, 0.0, 0.0]
    assert start_offsets_ms(3, "staggered", gap_ms=250) == [0.0, 250.0, 500.0]
    poisson = start_offsets_ms(4, "poisson", rate_per_s=2.0, seed=3)
    assert poisson == start_offsets_ms(4, "poisson", rate_per_s=2.0, seed=3) and poisson[0] == 0.0
    assert poisson == sorted(poisson) and len(set(poisson)) == 4
    assert rotated("abc", 0) == ("a", "b", "c") and rotated("abc", 1) == ("b", "c", "a")
    assert rotated("abc", 4) == rotated("abc", 1)
    assert lockstep_warning(3, 3) is None
    assert "device k and device k+2 ask in the same order" in (lockstep_warning(5, 2) or "")
    with pytest.raises(ValueError, match="together, staggered or poisson"):
        start_offsets_ms(2, "burst")


EXACT = (
    "[asr.latency]\nfirst_ms = 300\njitter_ms = 0\n"
    "[llm.latency]\nfirst_ms = 200\nper_item_ms = 50\njitter_ms = 0\n"
    "[tts.first_frame]\nfirst_ms = 100\njitter_ms = 0\n"
    "[tts]\nreal_time_factor = 0.5\n"
    "[llm]\ntools = false\n"
)


def fleet_run(tmp_path: Path, extra: list[str], run_id: str = "f") -> tuple[int, str, list[TurnRow], Path]:
    fixtures = make_fixtures(tmp_path / "fx", ["q1", "q2", "q3"])
    config = tmp_path / "exact.toml"
    config.write_text(EXACT)
    out = tmp_path / "o"
    args = [str(fixtures), *SIM, "--config", str(config), "--clock", "virtual", "--out", str(out), "--run-id", run_id]
    buffer = io.StringIO()
    with contextlib.redirect_stderr(buffer):
        code = main([*args, "--quiet", *extra], env={})
    rows = read_bench_csv(out / "bench.csv") if (out / "bench.csv").exists() else []
    return code, buffer.getvalue(), rows, out / "traces" / f"{run_id}.jsonl"


def spans_named(trace: Path, name: str) -> list[ReadSpan]:
    return [s for s in read_trace_file(trace, ReadProblems()) if s.name == name]


def test_three_devices_share_one_model_and_the_queue_is_measured(tmp_path: Path) -> None:
    code, err, rows, trace = fleet_run(tmp_path, ["--devices", "3", "--concurrency", "1", "--rounds", "1"])
    assert code == 0, err
    assert len(rows) == 9 and {r.ok for r in rows} == {1}
    assert sorted({(r.device, r.devices) for r in rows}) == [(0, 3), (1, 3), (2, 3)]
    firsts = [next(r.question_id for r in rows if r.device == d) for d in (0, 1, 2)]
    assert firsts == ["q1", "q2", "q3"]  # rotated: no two devices ask the same question at once
    waits_ms = sorted(number(r.queue_wait_ms) or 0.0 for r in rows)
    assert waits_ms[0] == 0.0 and waits_ms[-1] > 0.0
    # a waiting call gets the model the moment the call before it ends (the scheduler's own clock)
    calls = {s.end_ns for s in spans_named(trace, "llm.call")}
    queued = [s for s in spans_named(trace, "llm.queue") if s.end_ns != s.start_ns]
    assert queued and all(s.end_ns in calls for s in queued)


def test_one_device_without_a_scheduler_has_an_empty_queue_column(tmp_path: Path) -> None:
    code, err, rows, _ = fleet_run(tmp_path, ["--rounds", "1"])
    assert code == 0, err
    assert {(r.device, r.devices, r.queue_wait_ms) for r in rows} == {(None, None, None)}


def test_more_devices_than_questions_are_warned_of_and_every_turn_is_recorded(tmp_path: Path) -> None:
    code, err, rows, _ = fleet_run(
        tmp_path, ["--devices", "5", "--arrival", "staggered", "--gap-ms", "100", "--rounds", "1", "--limit", "2"]
    )
    assert code == 0, err
    assert "5 devices but 2 question(s): device k and device k+2 ask in the same order" in err
    assert "share the model with no scheduler in front of it" in err
    assert len(rows) == 10 and {r.ok for r in rows} == {1}


def test_background_load_competes_and_priority_serves_voice_turns_first(tmp_path: Path) -> None:
    def interactive_wait(priority: bool) -> tuple[float, int]:
        folder = tmp_path / f"p{priority}"
        folder.mkdir()
        extra = (folder / "bg.toml").resolve()
        extra.write_text(
            f"[scheduler]\nconcurrency = 1\npriority = {str(priority).lower()}\n[background]\nperiod_ms = 900\n"
        )
        code, err, rows, trace = fleet_run(
            folder, ["--config", str(extra), "--background", "summarise", "--rounds", "1"]
        )
        assert code == 0, err
        assert {r.ok for r in rows} == {1}
        jobs = spans_named(trace, "background.job")
        return sum(number(r.queue_wait_ms) or 0.0 for r in rows), len(jobs)

    with_priority, jobs = interactive_wait(True)
    without, _ = interactive_wait(False)
    assert jobs > 0
    assert with_priority < without


def test_a_background_job_needs_a_scheduler(tmp_path: Path) -> None:
    code, err, rows, _ = fleet_run(tmp_path, ["--background", "vision"])
    assert code == 2 and "[background] job needs [scheduler] concurrency > 0" in err and rows == []
