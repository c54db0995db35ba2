"""A device's uplink as the pipeline takes it: decoded packets of any announced size, re-framed to 60 ms.

Devices announce 20, 40 or 60 ms frames in their hello (desktop clients default to 20, the
firmware to 60); the real server decodes whatever arrives and its VAD re-chunks the PCM. The
lab's stages take 60 ms ``AudioFrame``s, so the PCM is cut into those here, each frame stamped
with when the packet that completed it arrived (``arrival_ms``), which the xiaozhi-server VAD
profile counts its silence in.
"""

from __future__ import annotations

from pipeline.events import FRAME_BYTES, FRAME_MS, AudioFrame


class Reframer:
    """PCM of any length in, 60 ms frames out, numbered from 0 for one turn; each frame says how long
    the device's packets were (``AudioFrame.packet_ms``) when they were not 60 ms.

    A remainder under 60 ms when the uplink closes is dropped: at most two 20 ms packets of the
    tail, after the VAD's end-point or ``listen stop``."""

    def __init__(self, packet_ms: int = FRAME_MS) -> None:
        self.packet_ms = packet_ms if packet_ms != FRAME_MS else None
        self.pending = b""
        self.seq = 0
        self.first_arrival_ns: int | None = None

    def push(self, pcm: bytes, arrival_ns: int) -> list[AudioFrame]:
        """The frames completed by this PCM; a remainder waits for the next packet."""
        if self.first_arrival_ns is None:
            self.first_arrival_ns = arrival_ns
        arrival_ms = (arrival_ns - self.first_arrival_ns) // 1_000_000
        self.pending += pcm
        frames = []
        while len(self.pending) >= FRAME_BYTES:
            chunk, self.pending = self.pending[:FRAME_BYTES], self.pending[FRAME_BYTES:]
            frames.append(AudioFrame(seq=self.seq, pcm=chunk, arrival_ms=arrival_ms, packet_ms=self.packet_ms))
            self.seq += 1
        return frames
