"""What lets one process hold a fleet of emulated devices: the shared pacer, the pre-encoded uplink, the sink."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys

from websockets.asyncio.server import Server, serve

from pipeline.capacity.sink import Sink
from pipeline.clock import RealClock, VirtualClock, run_on_clock
from pipeline.events import AudioFrame
from pipeline.transport.device.device import DeviceSettings, EmulatedDevice
from pipeline.transport.device.pacer import Pacer, pacer, send_lateness
from pipeline.transport.device.uplink_packets import (
    NOISE_LOOP_FRAMES,
    NoiseLoop,
    clip_packets,
    encode_frames,
    noise_packets,
)
from pipeline.transport.wire.opus import OpusEncoder
from tests.paths import REPO_ROOT
from tests.scenario import utterance

ROOT = REPO_ROOT


def test_pacer_releases_in_due_order_with_exact_lateness() -> None:
    async def main() -> list[tuple[str, int, float]]:
        paced, released = pacer(), []

        async def device(name: str, due_us: int) -> None:
            await paced.wait(due_us)
            released.append((name, paced.now_us(), paced.late_ms(due_us)))

        await asyncio.sleep(0.0025)  # 2,500 µs: a due time of 1,000 µs has passed
        await asyncio.gather(device("a", 3000), device("b", 1000), device("c", 3000), device("d", 2600))
        return released

    assert run_on_clock(main(), VirtualClock()) == [
        ("b", 2500, 1.5),  # already due: released at once, 1.5 ms late
        ("d", 2600, 0.0),
        ("a", 3000, 0.0),  # one slot, in the order they asked
        ("c", 3000, 0.0),
    ]


def test_pacer_start_phase_is_on_its_grid_and_one_timer_serves_a_slot() -> None:
    async def main() -> tuple[int, int, int]:
        await asyncio.sleep(0.0004)
        paced = Pacer(asyncio.get_running_loop(), grid_us=1000)
        start = paced.start_us()
        waiters = [paced.wait(start + 60_000) for _ in range(3)]
        timers = len(asyncio.get_running_loop()._scheduled)  # type: ignore[attr-defined]
        await asyncio.gather(*waiters)
        return start, timers, paced.now_us()

    assert run_on_clock(main(), VirtualClock()) == (1000, 1, 61_000)


def test_a_stopped_waiter_is_skipped() -> None:
    async def main() -> list[str]:
        paced, released = pacer(), []

        async def device(name: str) -> None:
            await paced.wait(5000)
            released.append(name)

        gone = asyncio.create_task(device("gone"))
        kept = asyncio.create_task(device("kept"))
        await asyncio.sleep(0.001)
        gone.cancel()
        await asyncio.gather(gone, kept, return_exceptions=True)
        return released

    assert run_on_clock(main(), VirtualClock()) == ["kept"]


def test_realtime_microphone_records_each_send_on_the_pacer() -> None:
    """A realtime device against a sink on the virtual clock: every frame sent on time, recorded once."""

    async def main() -> tuple[int, float]:
        sink = await _sink_server()
        url = f"ws://127.0.0.1:{sink.sockets[0].getsockname()[1]}/xiaozhi/v1/"
        settings = DeviceSettings(url=url, listen_mode="realtime", mcp_wait_s=0.0)
        async with EmulatedDevice(settings, VirtualClock()):
            send_lateness().take()
            await asyncio.sleep(0.63)  # its start phase is on the pacer's 1 ms grid: ten frames fall due
        sink.close()
        late = send_lateness().take()
        return int(late.size), float(abs(late).max())

    assert run_on_clock(main(), VirtualClock()) == (10, 0.0)


async def _sink_server() -> Server:
    return await serve(Sink().handle, "127.0.0.1", 0, compression=None)


def test_clip_packets_are_what_a_fresh_encoder_makes_and_are_cached() -> None:
    clip = utterance(lead_frames=2, speech_frames=4, tail_frames=2)
    for preset in ("lab", "firmware", "xiaozhi-server"):
        encoder = OpusEncoder(preset)
        assert clip_packets(clip, preset) == tuple(encoder.encode(f.pcm) for f in clip)
    assert clip_packets(clip, "lab") is clip_packets(list(clip), "lab")  # same audio, same packets object


def test_clip_packets_tell_clips_apart() -> None:
    one = utterance(lead_frames=1, speech_frames=2, tail_frames=1)
    short = [AudioFrame(seq=f.seq, pcm=f.pcm[:960]) for f in one]
    assert clip_packets(one, "lab") != clip_packets(short, "lab")


def test_noise_loop_is_one_continuous_encoding_read_from_each_devices_offset() -> None:
    # the lab's preset: no DTX, so every packet differs (the firmware's sends 1-byte DTX packets after four)
    pool = noise_packets("lab")
    assert len(pool) == NOISE_LOOP_FRAMES == len(set(pool))
    assert pool is noise_packets("lab")
    a, again, b = NoiseLoop("a", "lab"), NoiseLoop("a", "lab"), NoiseLoop("b", "lab")
    run_a = [a.next() for _ in range(NOISE_LOOP_FRAMES + 1)]
    assert run_a == [again.next() for _ in range(NOISE_LOOP_FRAMES + 1)]  # seeded: runs repeat
    assert run_a[0] == run_a[-1]  # it loops
    assert set(run_a) <= set(pool)
    assert [b.next() for _ in range(4)] != run_a[:4]
    assert encode_frames([], "lab") == ()


def test_sink_answers_hello_and_counts_frames() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "pipeline.capacity.sink", "--port", "0"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()

        async def main() -> str:
            settings = DeviceSettings(url=url, mcp_wait_s=0.0)
            async with EmulatedDevice(settings, RealClock()) as device:
                await device.link.send_audio(b"\xf8\xff\xfe", 0)
                await device.link.send_audio(b"\xf8\xff\xfe", 60)
                return device.session_id

        session_id = asyncio.run(main())
        assert len(session_id) == 32
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=10)
    assert proc.returncode == 0
    assert out.strip() == "sessions: 1 frames received: 2"
