"""The downlink pacer on the virtual clock: exact send and stop times, the real server's pacing and the lab's old."""

from __future__ import annotations

import asyncio

import pytest

from pipeline.clock import VirtualClock, run_on_clock
from pipeline.transport.server.pacing import PACINGS, DownlinkPacer, pacing

FRAME_MS = 60
# The firmware keeps at most this many packets waiting to be decoded and drops the rest
# (xiaozhi-esp32 main/audio/audio_service.h:42, MAX_DECODE_PACKETS_IN_QUEUE = 2400 / 60).
FIRMWARE_DECODE_QUEUE = 40
# Beside that queue it holds at most 2 decoded frames waiting to play (MAX_PLAYBACK_TASKS_IN_QUEUE) and the one playing.
FIRMWARE_BEYOND_QUEUE = 3


def downlink(name: str, arrivals_ms: list[int], end_ms: int | None = None) -> tuple[list[float], float]:
    """Frames made available at these times, then the turn's end: when each frame and the stop went out (ms).

    The loop is a server's downlink task: it takes the next item as soon as there is one, and
    paces and sends each frame before taking the next.
    """
    end = arrivals_ms[-1] if end_ms is None else end_ms
    script = [(t, "frame") for t in arrivals_ms] + [(end, "end")]

    async def main() -> tuple[list[float], float]:
        loop = asyncio.get_running_loop()
        outbox: asyncio.Queue[str] = asyncio.Queue()
        pacer = DownlinkPacer(PACINGS[name], loop.time, asyncio.sleep)

        async def produce() -> None:
            for t, kind in script:
                await asyncio.sleep(max(0.0, t / 1000 - loop.time()))
                outbox.put_nowait(kind)

        producer = asyncio.create_task(produce())
        sends = []
        while await outbox.get() == "frame":
            await pacer.before_frame()
            sends.append(round(loop.time() * 1000, 3))
            pacer.sent()
        await pacer.before_stop()
        stop = round(loop.time() * 1000, 3)
        await producer
        return sends, stop

    return run_on_clock(main(), VirtualClock())


def playout_starts(sends: list[float]) -> list[float]:
    """When a firmware device starts playing each frame: back to back, each as soon as it is there (no jitter hold).

    The link is taken as instant, so a frame arrives when it is sent.
    """
    starts: list[float] = []
    free = float("-inf")
    for sent in sends:
        starts.append(max(sent, free))
        free = starts[-1] + FRAME_MS
    return starts


def most_held(sends: list[float]) -> int:
    """The most frames the device holds at once: received and not yet played out."""
    ends = [start + FRAME_MS for start in playout_starts(sends)]
    return max(sum(1 for s, e in zip(sends, ends, strict=True) if s <= t < e) for t in sends)


def most_ahead_ms(sends: list[float]) -> float:
    """How far ahead of the device's playout the server ever sent a frame."""
    return max(start - sent for start, sent in zip(playout_starts(sends), sends, strict=True))


def test_the_presets_are_the_real_servers_and_the_labs_old_one() -> None:
    real, old = pacing("xiaozhi-server"), pacing("lab-v1")
    assert (real.prebuffer_frames, real.reanchor, real.stop_allowance_frames) == (5, True, 7)
    assert (old.prebuffer_frames, old.reanchor, old.stop_allowance_frames) == (3, False, 0)
    with pytest.raises(ValueError, match="unknown downlink pacing 'fast'; known: xiaozhi-server, lab-v1"):
        pacing("fast")


def test_a_steady_answer_real_server_sends_six_at_once_then_one_per_frame_and_stops_420_ms_after() -> None:
    sends, stop = downlink("xiaozhi-server", [0] * 30)
    # 5 prebuffer frames, and the first queued one starts the rate controller's clock at once
    assert sends == [0] * 6 + [FRAME_MS * k for k in range(1, 25)]
    assert stop == sends[-1] + (5 + 2) * FRAME_MS == 1860
    assert most_held(sends) == 6
    assert most_ahead_ms(sends) == 5 * FRAME_MS


def test_a_steady_answer_lab_v1_sends_three_at_once_then_one_per_frame_and_stops_at_once() -> None:
    sends, stop = downlink("lab-v1", [0] * 30)
    assert sends == [0] * 3 + [FRAME_MS * k for k in range(1, 28)]
    assert stop == sends[-1] == 1620
    assert most_held(sends) == 3


def test_a_3_s_stall_between_sentences_real_server_restarts_its_clock_no_burst() -> None:
    # sentence 1: 20 frames at once; sentence 2's 50 frames come 3 s after sentence 1 could have played out
    sentence_2_at = 20 * FRAME_MS + 3000
    sends, stop = downlink("xiaozhi-server", [0] * 20 + [sentence_2_at] * 50)
    assert sends[:20] == [0] * 6 + [FRAME_MS * k for k in range(1, 15)]
    assert sends[20:] == [sentence_2_at + FRAME_MS * k for k in range(50)]  # re-anchored: one per frame from now
    assert stop == sends[-1] + 7 * FRAME_MS == 7560
    assert most_ahead_ms(sends) <= PACINGS["xiaozhi-server"].prebuffer_frames * FRAME_MS
    assert most_held(sends) == 6 <= FIRMWARE_DECODE_QUEUE


def test_a_3_s_stall_between_sentences_lab_v1_bursts_past_the_firmwares_decode_queue() -> None:
    sentence_2_at = 20 * FRAME_MS + 3000
    sends, stop = downlink("lab-v1", [0] * 20 + [sentence_2_at] * 50)
    assert sends[:20] == [0] * 3 + [FRAME_MS * k for k in range(1, 18)]
    burst = sends.count(sentence_2_at)
    assert burst == 50  # every frame of sentence 2 was due before it existed: all at once
    assert stop == sentence_2_at
    assert most_ahead_ms(sends) == 49 * FRAME_MS
    held = most_held(sends)
    assert held == 50
    assert held - FIRMWARE_BEYOND_QUEUE > FIRMWARE_DECODE_QUEUE  # a real device drops the excess


def test_a_gap_shorter_than_a_frame_keeps_the_clock_a_longer_one_restarts_it() -> None:
    # 10 frames at once (the clock's frames go at 0, 60 .. 240), one 40 ms after the last left, two at 500 ms
    sends, _stop = downlink("xiaozhi-server", [0] * 10 + [280, 500, 500])
    assert sends == [0] * 6 + [60, 120, 180, 240] + [300, 500, 560]


def test_frames_slower_than_real_time_go_out_as_they_come_with_either_pacing() -> None:
    arrivals = [100 * k for k in range(12)]
    for name in PACINGS:
        sends, _stop = downlink(name, arrivals)
        assert sends == arrivals, name


def test_real_server_stop_counts_from_the_turns_end_when_it_comes_after_the_last_frame() -> None:
    sends, stop = downlink("xiaozhi-server", [0] * 3, end_ms=1000)
    assert sends == [0, 0, 0]
    assert stop == 1000 + 7 * FRAME_MS
    _sends, stop = downlink("lab-v1", [0] * 3, end_ms=1000)
    assert stop == 1000


def test_real_server_waits_its_allowance_even_for_a_turn_without_audio() -> None:
    assert downlink("xiaozhi-server", [], end_ms=200) == ([], 200 + 7 * FRAME_MS)
    assert downlink("lab-v1", [], end_ms=200) == ([], 200)


def test_lab_v1_is_the_labs_old_schedule_anchored_at_the_turns_first_frame() -> None:
    # the first frame at 100 ms starts the one clock of the turn: frame k >= 3 is due 60 ms x (k - 2) after it;
    # frames made late go at once until the schedule is caught up (frames 6-12 were due at 340-700 ms)
    sends, _stop = downlink("lab-v1", [100] * 4 + [150] * 2 + [700] * 8)
    assert sends == [100, 100, 100, 160, 220, 280] + [700] * 7 + [760]
