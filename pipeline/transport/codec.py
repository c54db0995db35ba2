"""Opus for 16 kHz mono 60 ms frames, over libopus (``opuslib-next``), as the firmware and servers use it."""

from __future__ import annotations

import numpy as np
import opuslib_next as opus

from pipeline.events import FRAME_BYTES, FRAME_SAMPLES, SAMPLE_RATE

# The firmware's encoder setting on the ESP32 side is speech at low complexity; the server side
# (opuslib in xiaozhi-esp32-server) uses libopus defaults. Complexity is a setting so its cost shows.
DEFAULT_COMPLEXITY = 5


class CodecError(ValueError):
    """An Opus packet libopus cannot decode, or PCM of the wrong size."""


class OpusEncoder:
    def __init__(self, complexity: int = DEFAULT_COMPLEXITY) -> None:
        self._encoder = opus.Encoder(SAMPLE_RATE, 1, opus.APPLICATION_VOIP)
        self._encoder.complexity = complexity

    def encode(self, pcm: bytes) -> bytes:
        """One 60 ms frame of 16-bit PCM; a short last frame is padded with silence."""
        if len(pcm) > FRAME_BYTES or len(pcm) % 2:
            raise CodecError(f"a frame is at most {FRAME_BYTES} bytes of 16-bit PCM, got {len(pcm)}")
        return bytes(self._encoder.encode(pcm.ljust(FRAME_BYTES, b"\0"), FRAME_SAMPLES))


class OpusDecoder:
    def __init__(self) -> None:
        self._decoder = opus.Decoder(SAMPLE_RATE, 1)

    def decode(self, packet: bytes) -> bytes:
        try:
            return bytes(self._decoder.decode(packet, FRAME_SAMPLES))
        except opus.OpusError as exc:
            raise CodecError(f"undecodable Opus packet of {len(packet)} bytes: {exc}") from None


def audible(pcm: bytes, threshold: int = 64) -> bool:
    """Whether a frame holds something a listener hears: any sample above about -54 dBFS."""
    samples = np.frombuffer(pcm, dtype="<i2")
    return bool(samples.size) and int(np.abs(samples.astype(np.int32)).max()) > threshold
