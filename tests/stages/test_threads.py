"""What the stages share: a thread's stream handed to the event loop, and audio cut into downlink frames."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from pipeline.events import FRAME_BYTES, AudioOut
from stages.threads import from_thread
from stages.tts.frames import frames_of


class Broken(RuntimeError):
    pass


def test_a_threads_items_arrive_in_order_and_its_exception_with_its_own_class() -> None:
    def produce() -> Iterator[int]:
        yield from (1, 2, 3)
        raise Broken("engine failed")

    got: list[int] = []

    async def main() -> None:
        with ThreadPoolExecutor(1) as pool:
            async with from_thread(pool, produce) as items:
                async for item in items:
                    got.append(item)

    with pytest.raises(Broken, match="engine failed"):
        asyncio.run(main())
    assert got == [1, 2, 3]


def test_leaving_early_stops_the_producer_and_waits_for_its_thread() -> None:
    stop, done = threading.Event(), threading.Event()

    def produce() -> Iterator[int]:
        n = 0
        while not stop.is_set() and n < 1000:  # bounded: a producer never told to stop still ends
            n += 1
            yield n
            stop.wait(0.001)
        if stop.is_set():
            done.set()

    async def main() -> int:
        with ThreadPoolExecutor(1) as pool:
            async with from_thread(pool, produce, stop=stop.set) as items:
                async for item in items:
                    if item == 3:
                        break
            return int(done.is_set())  # the block returned only once the thread had finished

    assert asyncio.run(main()) == 1


def _frames(chunks: list[np.ndarray], rate: int) -> list[AudioOut]:
    async def main() -> list[AudioOut]:
        return [f async for f in frames_of(chunks, rate, sentence_index=2)]

    return asyncio.run(main())


def test_frames_are_numbered_whole_and_the_same_however_the_audio_is_cut() -> None:
    tone = (3000 * np.sin(np.arange(22050) * 2 * np.pi * 440 / 22050)).astype(np.int16)
    whole = _frames([tone], 22050)
    pieces = _frames(np.array_split(tone, 7), 22050)
    assert [f.seq for f in whole] == list(range(len(whole))) and {f.sentence_index for f in whole} == {2}
    assert all(len(f.pcm) == FRAME_BYTES for f in whole)
    assert len(whole) == 17  # one second at 16 kHz: 16 whole 60 ms frames and one padded
    assert [f.pcm for f in pieces] == [f.pcm for f in whole]
