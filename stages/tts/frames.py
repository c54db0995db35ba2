"""Turns a real TTS engine's audio stream into 60 ms 16 kHz downlink frames as it arrives."""

from __future__ import annotations

import numpy as np

from pipeline.events import FRAME_SAMPLES, SAMPLE_RATE


class StreamResampler:
    """Linear-interpolation resampling of a stream delivered in pieces, without seams."""

    def __init__(self, src_rate: int, dst_rate: int = SAMPLE_RATE) -> None:
        self.step = src_rate / dst_rate
        self._pos = 0.0  # next output position, in input samples since the last kept sample
        self._last: np.ndarray = np.zeros(0, dtype=np.float64)

    def feed(self, samples: np.ndarray) -> np.ndarray:
        x = np.concatenate([self._last, samples.astype(np.float64)])
        if len(x) < 2:
            self._last = x
            return np.zeros(0, dtype=np.int16)
        positions = np.arange(self._pos, len(x) - 1, self.step)
        out = np.interp(positions, np.arange(len(x)), x)
        next_pos = self._pos + len(positions) * self.step
        keep_from = int(next_pos)
        self._last = x[keep_from:]
        self._pos = next_pos - keep_from
        resampled: np.ndarray = np.clip(out, -32768, 32767).astype(np.int16)
        return resampled


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
