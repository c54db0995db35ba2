"""Turns a real TTS engine's audio stream into 60 ms 16 kHz downlink frames as it arrives."""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Iterable

import numpy as np
import soxr

from pipeline.events import FRAME_SAMPLES, SAMPLE_RATE, AudioOut


class StreamResampler:
    """Resampling of a stream delivered in pieces, without seams (soxr, anti-aliased).

    A streaming resampler holds back a few milliseconds of audio for its filter: ``flush``
    hands them on once the stream has ended.
    """

    def __init__(self, src_rate: int, dst_rate: int = SAMPLE_RATE) -> None:
        self._stream = soxr.ResampleStream(src_rate, dst_rate, 1, dtype="float32", quality="HQ")

    def feed(self, samples: np.ndarray) -> np.ndarray:
        return self._int16(self._stream.resample_chunk(samples.astype(np.float32) / 32768.0))

    def flush(self) -> np.ndarray:
        return self._int16(self._stream.resample_chunk(np.zeros(0, dtype=np.float32), last=True))

    @staticmethod
    def _int16(x: np.ndarray) -> np.ndarray:
        return np.asarray(np.clip(x * 32768.0, -32768, 32767), dtype=np.int16)


class Framer:
    """Cuts a sample stream into whole 60 ms frames; ``flush`` pads the last one."""

    def __init__(self) -> None:
        self._buf = np.zeros(0, dtype=np.int16)

    def feed(self, samples: np.ndarray) -> list[bytes]:
        self._buf = np.concatenate([self._buf, samples.astype(np.int16)])
        n = len(self._buf) // FRAME_SAMPLES
        frames = [self._buf[i * FRAME_SAMPLES : (i + 1) * FRAME_SAMPLES].astype("<i2").tobytes() for i in range(n)]
        self._buf = self._buf[n * FRAME_SAMPLES :]
        return frames

    def flush(self) -> list[bytes]:
        if not len(self._buf):
            return []
        padded = np.concatenate([self._buf, np.zeros(FRAME_SAMPLES - len(self._buf), dtype=np.int16)])
        self._buf = np.zeros(0, dtype=np.int16)
        return [padded.astype("<i2").tobytes()]


async def frames_of(
    chunks: AsyncIterable[np.ndarray] | Iterable[np.ndarray], rate: int, sentence_index: int
) -> AsyncIterator[AudioOut]:
    """One sentence's audio (16-bit samples at ``rate``, in pieces) as numbered downlink frames, each sent
    the moment it is whole; the last one padded."""
    resampler, framer, seq = StreamResampler(rate), Framer(), 0
    async for chunk in _each(chunks):
        for pcm in framer.feed(resampler.feed(chunk)):
            yield AudioOut(sentence_index=sentence_index, seq=seq, pcm=pcm)
            seq += 1
    for pcm in [*framer.feed(resampler.flush()), *framer.flush()]:
        yield AudioOut(sentence_index=sentence_index, seq=seq, pcm=pcm)
        seq += 1


async def _each(chunks: AsyncIterable[np.ndarray] | Iterable[np.ndarray]) -> AsyncIterator[np.ndarray]:
    if isinstance(chunks, AsyncIterable):
        async for chunk in chunks:
            yield chunk
    else:
        for chunk in chunks:
            yield chunk
