import asyncio
import select
import selectors
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipeline.clock import VIRTUAL_EPOCH_NS, FineTimerSelector, RealClock, VirtualClock, run_on_clock
from tests.paths import REPO_ROOT


def test_virtual_time_moves_only_by_timers_and_is_exact() -> None:
    clock = VirtualClock()

    async def main() -> list[int]:
        t0 = clock.now_ns()

        async def after(delay: float) -> int:
            await asyncio.sleep(delay)
            return clock.now_ns() - t0

        marks = list(await asyncio.gather(after(0.06), after(0.3), after(1.234567)))
        for _ in range(100):
            await asyncio.sleep(0.06)
        marks.append(clock.now_ns() - t0)
        return marks

    started = time.perf_counter()
    assert run_on_clock(main(), clock) == [60_000_000, 300_000_000, 1_234_567_000, 7_234_567_000]
    assert time.perf_counter() - started < 2  # seven virtual seconds, no real waiting


def test_virtual_timeouts_fire_at_their_virtual_deadline() -> None:
    clock = VirtualClock()

    async def main() -> int:
        t0 = clock.now_ns()
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.5):
                await asyncio.sleep(10)
        return clock.now_ns() - t0

    assert run_on_clock(main(), clock) == 500_000_000


def test_virtual_clock_starts_at_a_fixed_epoch() -> None:
    clock = VirtualClock()

    async def main() -> int:
        return clock.now_ns()

    assert run_on_clock(main(), clock) == VIRTUAL_EPOCH_NS


def test_virtual_clock_refuses_a_real_loop() -> None:
    async def main() -> int:
        return VirtualClock().now_ns()

    with pytest.raises(RuntimeError, match="VirtualEventLoop"):
        asyncio.run(main())


def test_real_clock_is_epoch_time_and_monotonic() -> None:
    clock = RealClock()
    a = clock.now_ns()
    b = clock.now_ns()
    assert b >= a
    assert abs(a - time.time_ns()) < 1_000_000_000


def test_real_runs_wait_for_timers_to_the_microsecond(monkeypatch: pytest.MonkeyPatch) -> None:
    """The wait handed to the kernel keeps its sub-millisecond part (epoll would round it up)."""
    waits: list[float] = []
    real_select = select.select

    def recording_select(r: list[int], w: list[int], x: list[int], timeout: float) -> object:
        waits.append(timeout)
        return real_select(r, w, x, timeout)

    monkeypatch.setattr(select, "select", recording_select)

    async def main() -> None:
        await asyncio.sleep(0.5003)

    run_on_clock(main(), RealClock())
    assert any(0.4 < t <= 0.5003 and abs(t * 1000 - round(t * 1000)) > 1e-6 for t in waits), waits


def test_fine_timer_selector_loses_no_event() -> None:
    a, b = socket.socketpair()
    selector = FineTimerSelector()
    try:
        selector.register(a, selectors.EVENT_READ, "a")
        assert selector.select(0.0005) == []  # nothing ready: the wait just ends
        b.send(b"x")
        started = time.monotonic()
        [(key, events)] = selector.select(30)
        assert (key.data, events) == ("a", selectors.EVENT_READ)
        assert time.monotonic() - started < 10  # woken by the event, not by the timeout
    finally:
        selector.close()
        a.close()
        b.close()


def test_a_thread_wakes_the_real_loop_without_a_sendto_the_offline_run_would_trace(tmp_path: Path) -> None:
    code = (
        "import asyncio, threading\n"
        "from pipeline.clock import RealClock, run_on_clock\n"
        "async def main():\n"
        "    loop = asyncio.get_running_loop(); done = loop.create_future()\n"
        "    threading.Thread(target=lambda: loop.call_soon_threadsafe(done.set_result, 'woken')).start()\n"
        "    print(await asyncio.wait_for(done, 5))\n"
        "run_on_clock(main(), RealClock())\n"
    )
    log = tmp_path / "strace.log"
    done = subprocess.run(
        ["strace", "-f", "-qq", "-e", "trace=sendto", "-o", str(log), sys.executable, "-c", code],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.stdout.strip() == "woken"
    assert "sendto" not in log.read_text()
