"""Silero batched over streams: the batcher's bookkeeping on a stand-in model, and, on the real model, the same
probabilities and the same end-points as one stream alone, on the packaged fixtures."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest

from pipeline.clock import RealClock, VirtualClock, run_on_clock
from pipeline.events import AudioFrame, Event, SpeechEnd, SpeechStart, Stage
from pipeline.settings.audio import load_audio
from pipeline.settings.models import resolve
from stages.vad.endpointer import FrameVad
from stages.vad.silero import SileroClassifier, SileroModel
from stages.vad.silero_batch import CHUNK, CONTEXT, STATE_SHAPE, SileroBatcher
from stages.vad.xiaozhi import XiaozhiServerVad
from tests.harness import stage_run

# fixture clips with speech, two utterances, and none
CLIPS = ("en01.wav", "zh01.wav", "en02.wav", "zh02.wav", "en05.wav", "edge/two_utterances.wav", "edge/noise.wav")
# batched float32 arithmetic may round differently from a batch of one; a probability this close is the same
TOLERANCE = 1e-4


class SumModel:
    """A stand-in session: a chunk's "probability" is the sum of its input row, its next state the state plus one."""

    def __init__(self) -> None:
        self.batches: list[int] = []

    def run(self, _names: object, feeds: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
        x, state = feeds["input"], feeds["state"]
        assert x.shape == (state.shape[1], CONTEXT + CHUNK) and state.shape[::2] == (2, 128)
        self.batches.append(len(x))
        return x.sum(axis=1, keepdims=True), state + 1


class Failing:
    def run(self, _names: object, _feeds: dict[str, Any]) -> None:
        raise RuntimeError("model broke")


def pcm(value: int) -> bytes:
    return np.full(CHUNK, value, dtype="<i2").tobytes()


def fresh() -> tuple[np.ndarray, np.ndarray]:
    return np.zeros(CONTEXT, dtype=np.float32), np.zeros(STATE_SHAPE, dtype=np.float32)


def test_chunks_submitted_in_one_loop_turn_go_in_one_call_each_with_its_own_results() -> None:
    model = SumModel()
    batcher = SileroBatcher(model)

    async def main() -> list[tuple[float, np.ndarray, np.ndarray]]:
        context, state = fresh()
        futures = [batcher.submit(pcm(v), context, state + v) for v in (1024, 2048, 4096)]
        return list(await asyncio.gather(*futures))

    results = run_on_clock(main(), VirtualClock())
    assert model.batches == [3]
    assert [p for p, _c, _s in results] == [512 * 1024 / 32768, 512 * 2048 / 32768, 512 * 4096 / 32768]
    assert [float(c[0]) for _p, c, _s in results] == [1024 / 32768, 2048 / 32768, 4096 / 32768]
    assert [float(s[0, 0, 0]) for _p, _c, s in results] == [1025, 2049, 4097]  # each stream's own state
    assert all(s.shape == STATE_SHAPE and len(c) == CONTEXT for _p, c, s in results)
    assert (batcher.calls, batcher.chunks) == (1, 3)


def test_streams_that_take_turns_make_one_batch_per_round() -> None:
    model = SumModel()
    classifiers = [SileroClassifier.__new__(SileroClassifier) for _ in range(4)]
    batcher = SileroBatcher(model)
    for c in classifiers:
        c._batcher = batcher
        c.reset()

    async def stream(c: SileroClassifier) -> list[float]:
        return [await c.chunk_probability(pcm(100)) for _ in range(3)]

    async def main() -> list[list[float]]:
        return list(await asyncio.gather(*(stream(c) for c in classifiers)))

    run_on_clock(main(), VirtualClock())
    assert model.batches == [4, 4, 4]


class SlowSumModel(SumModel):
    def run(self, names: object, feeds: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
        time.sleep(0.05)  # long enough for the loop to take more chunks while this batch runs
        return super().run(names, feeds)


def test_on_its_thread_a_batch_runs_while_the_next_one_gathers() -> None:
    model = SlowSumModel()
    with ThreadPoolExecutor(1) as executor:
        batcher = SileroBatcher(model, executor)

        async def main() -> list[float]:
            context, state = fresh()
            first = [batcher.submit(pcm(v), context, state) for v in (1, 2)]
            await asyncio.sleep(0.01)  # the first batch is on the thread now
            second = [batcher.submit(pcm(v), context, state + 7) for v in (3, 4, 5)]
            results = await asyncio.gather(*first, *second)
            assert [float(s[0, 0, 0]) for _p, _c, s in results] == [1, 1, 8, 8, 8]
            return [p for p, _c, _s in results]

        probabilities = asyncio.run(main())
    assert model.batches == [2, 3]
    assert probabilities == [512 * v / 32768 for v in (1, 2, 3, 4, 5)]


def test_within_the_window_after_a_batch_chunks_gather_for_the_next_one() -> None:
    model = SumModel()
    batcher = SileroBatcher(model, window_ms=10)

    async def main() -> list[float]:
        loop = asyncio.get_running_loop()
        context, state = fresh()
        await batcher.submit(pcm(1), context, state)  # the first batch starts at once: t = 0
        heard = [loop.time()]
        await asyncio.sleep(0.002)
        later = batcher.submit(pcm(2), context, state)
        await asyncio.sleep(0.003)
        await asyncio.gather(later, batcher.submit(pcm(3), context, state))
        return [*heard, loop.time()]

    assert run_on_clock(main(), VirtualClock()) == [0.0, 0.01]  # the second batch 10 ms after the first
    assert model.batches == [1, 2]


def test_a_model_failure_reaches_every_stream_in_the_batch() -> None:
    batcher = SileroBatcher(Failing())

    async def main() -> list[object]:
        context, state = fresh()
        return list(
            await asyncio.gather(*(batcher.submit(pcm(1), context, state) for _ in range(2)), return_exceptions=True)
        )

    results = run_on_clock(main(), VirtualClock())
    assert [str(r) for r in results] == ["model broke", "model broke"]


def test_a_chunk_of_another_length_is_refused() -> None:
    batcher = SileroBatcher(SumModel())

    async def main() -> None:
        context, state = fresh()
        batcher.submit(b"\0" * 10, context, state)

    with pytest.raises(ValueError, match="512 samples, not 5"):
        run_on_clock(main(), VirtualClock())


# --- the real model ------------------------------------------------------------------------------


class Recording:
    """A classifier that writes down every probability it gives."""

    def __init__(self, inner: SileroClassifier) -> None:
        self.inner, self.name, self.seen = inner, inner.name, list[float]()

    def reset(self) -> None:
        self.inner.reset()

    async def chunk_probability(self, pcm: bytes) -> float:
        p = await self.inner.chunk_probability(pcm)
        self.seen.append(p)
        return p

    async def speech_probability(self, pcm: bytes) -> float:
        p = await self.inner.speech_probability(pcm)
        self.seen.append(p)
        return p


def clips() -> list[list[AudioFrame]]:
    from tests import real_models as models

    return [list(load_audio(models.FIXTURES / name).frames) for name in CLIPS]


def bounds(events: Sequence[Event]) -> list[tuple[str, int]]:
    return [(type(e).__name__, e.offset_ms) for e in events if isinstance(e, (SpeechStart, SpeechEnd))] + [
        ("frames", sum(1 for e in events if isinstance(e, AudioFrame)))
    ]


def alone_and_together(model: SileroModel, build: type[FrameVad] | type[XiaozhiServerVad]) -> tuple[Any, Any]:
    """Each clip through its own stage, one after the other (batches of one), then all at once (batched)."""

    def stages() -> list[tuple[Stage, Recording]]:
        recorders = [Recording(SileroClassifier(model)) for _ in CLIPS]
        return [(build(r), r) for r in recorders]

    audio = clips()

    async def alone() -> list[tuple[list[Event], list[float]]]:
        out = []
        for (stage, rec), frames in zip(stages(), audio, strict=True):
            out.append(((await stage_run(stage, frames, clock)).events, rec.seen))
        return out

    async def together() -> list[tuple[list[Event], list[float]]]:
        pairs = stages()
        runs = await asyncio.gather(*(stage_run(s, f, clock) for (s, _r), f in zip(pairs, audio, strict=True)))
        return [(run.events, rec.seen) for run, (_s, rec) in zip(runs, pairs, strict=True)]

    clock = VirtualClock()
    first = run_on_clock(alone(), clock)
    calls_before, chunks_before = model.batcher.calls, model.batcher.chunks
    clock = VirtualClock()
    second = run_on_clock(together(), clock)
    batched = (model.batcher.calls - calls_before, model.batcher.chunks - chunks_before)
    return (first, second), batched


@pytest.mark.real
@pytest.mark.parametrize("build", [XiaozhiServerVad, FrameVad])
def test_batched_silero_hears_what_one_stream_alone_hears(build: type[FrameVad] | type[XiaozhiServerVad]) -> None:
    from tests import real_models as models

    (alone, together), (calls, chunks) = alone_and_together(models.silero(), build)
    assert chunks > 2 * calls  # the streams did share calls
    worst = 0.0
    for (events_a, probs_a), (events_t, probs_t), name in zip(alone, together, CLIPS, strict=True):
        assert len(probs_a) == len(probs_t), name
        worst = max(worst, float(np.max(np.abs(np.array(probs_a) - np.array(probs_t)))))
        assert bounds(events_a) == bounds(events_t), name  # the same end-points, decided on the same frames
        assert [e for e in events_a if not isinstance(e, AudioFrame)] == [
            e for e in events_t if not isinstance(e, AudioFrame)
        ]
    assert worst <= TOLERANCE


@pytest.mark.real
def test_a_stream_alone_hears_what_the_model_called_directly_hears() -> None:
    from tests import real_models as models

    model = models.silero()
    pcm_all = b"".join(f.pcm for f in load_audio(models.FIXTURES / "en01.wav").frames)
    chunks = [pcm_all[i : i + 2 * CHUNK] for i in range(0, len(pcm_all) - 2 * CHUNK + 1, 2 * CHUNK)]
    context, state = fresh()
    direct = []
    for chunk in chunks:  # the unbatched call, as the classifier made it before it was batched
        x = np.concatenate([context, np.frombuffer(chunk, dtype="<i2").astype(np.float32) / 32768.0])[np.newaxis, :]
        out, state = model.session.run(None, {"input": x, "state": state, "sr": np.array(16000, dtype=np.int64)})
        context = x[0, -CONTEXT:]
        direct.append(float(out[0][0]))
    classifier = SileroClassifier(model)

    async def batched() -> list[float]:
        return [await classifier.chunk_probability(c) for c in chunks]

    assert run_on_clock(batched(), VirtualClock()) == direct


@pytest.mark.real
def test_batches_on_their_own_thread_hear_what_batches_on_the_loop_hear() -> None:
    from tests import real_models as models

    threaded = SileroModel(resolve("silero-vad", models.CACHE), batch_thread=True)
    (alone, _together), _calls = alone_and_together(models.silero(), XiaozhiServerVad)
    audio = clips()

    async def together() -> list[Any]:
        stages = [XiaozhiServerVad(SileroClassifier(threaded)) for _ in CLIPS]
        return list(await asyncio.gather(*(stage_run(s, f, RealClock()) for s, f in zip(stages, audio, strict=True))))

    runs = run_on_clock(together(), RealClock())
    assert [bounds(r.events) for r in runs] == [bounds(events) for events, _probs in alone]
    assert threaded.batcher.chunks > 2 * threaded.batcher.calls
