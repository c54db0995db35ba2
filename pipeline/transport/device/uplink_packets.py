"""What the device's microphone sends, encoded once per process: each clip's packets per encoder preset,
and a loop of the noise floor's.

Encoding every frame of every device with libopus is what stopped one process from holding a
fleet (scripts/bench_capacity.py, fleet part). A clip is encoded once per preset, from a fresh
encoder; the noise floor once per preset as a shared loop of ``NOISE_LOOP_FRAMES`` frames, each
device reading it from its own offset (by its seed, so runs repeat).

Packets encoded apart differ slightly from one continuous encoding: each clip starts from a fresh
encoder state rather than continuing from the noise before it (as a firmware's encoder would), and
the noise loop's last packet is followed by its first. A decoder meets these joins as a stream
whose predictor state does not match for a frame or two; the noise is 60 dB down and a clip starts
with its fixture's leading silence, so what a server's VAD and ASR hear is not changed by it. A
turn in auto mode always encoded its clip from a fresh encoder: its packets are the same as before.
"""

from __future__ import annotations

import hashlib
import zlib
from collections.abc import Sequence

import numpy as np

from pipeline.events import FRAME_SAMPLES, AudioFrame
from pipeline.transport.wire.opus import OpusEncoder

# The microphone's own noise when nobody speaks: the firmware streams its microphone, never digital zero.
NOISE_FLOOR_DBFS = -60.0
NOISE_LOOP_FRAMES = 128  # 7.68 s of noise before it repeats; every device starts it at its own frame
_NOISE_SEED = "the lab's microphone noise floor"
_CLIPS_KEPT = 256  # distinct clips x presets whose packets stay cached; a fixture set holds far fewer


class NoiseFloor:
    """Low-level Gaussian noise at NOISE_FLOOR_DBFS (RMS), seeded so that runs repeat."""

    def __init__(self, seed: str) -> None:
        self._rng = np.random.default_rng(zlib.crc32(seed.encode()))
        self._sigma = 32767 * 10 ** (NOISE_FLOOR_DBFS / 20)

    def frame(self) -> bytes:
        samples = np.rint(self._rng.normal(0.0, self._sigma, FRAME_SAMPLES))
        return np.clip(samples, -32768, 32767).astype("<i2").tobytes()


_clips: dict[tuple[str, bytes], tuple[bytes, ...]] = {}
_noise: dict[str, tuple[bytes, ...]] = {}
_noise_pcm: list[tuple[bytes, ...]] = []  # the loop's PCM, the same for every preset: made once


def encode_frames(pcm_frames: Sequence[bytes], preset: str) -> tuple[bytes, ...]:
    """The frames encoded in order by one fresh encoder of ``preset``, one packet each."""
    encoder = OpusEncoder(preset=preset)
    return tuple(encoder.encode(pcm) for pcm in pcm_frames)


def clip_packets(frames: Sequence[AudioFrame], preset: str) -> tuple[bytes, ...]:
    """The clip's packets as a fresh ``preset`` encoder makes them; encoded once per process per clip."""
    digest = hashlib.blake2b(digest_size=16)
    for frame in frames:
        digest.update(len(frame.pcm).to_bytes(4, "little"))
        digest.update(frame.pcm)
    key = (preset, digest.digest())
    packets = _clips.get(key)
    if packets is None:
        if len(_clips) >= _CLIPS_KEPT:
            _clips.pop(next(iter(_clips)))  # the oldest: a long run over many fixtures stays bounded
        packets = _clips[key] = encode_frames([frame.pcm for frame in frames], preset)
    return packets


def noise_pcm() -> tuple[bytes, ...]:
    """The noise loop's NOISE_LOOP_FRAMES frames of PCM, before encoding."""
    if not _noise_pcm:
        noise = NoiseFloor(_NOISE_SEED)
        _noise_pcm.append(tuple(noise.frame() for _ in range(NOISE_LOOP_FRAMES)))
    return _noise_pcm[0]


def noise_packets(preset: str) -> tuple[bytes, ...]:
    """The shared noise loop of ``preset``: NOISE_LOOP_FRAMES frames encoded continuously, once per process."""
    packets = _noise.get(preset)
    if packets is None:
        packets = _noise[preset] = encode_frames(noise_pcm(), preset)
    return packets


class NoiseLoop:
    """One device's noise floor, pre-encoded: the shared loop read from the device's own offset."""

    def __init__(self, seed: str, preset: str) -> None:
        self.preset = preset
        self._position = zlib.crc32(seed.encode()) % NOISE_LOOP_FRAMES
        self.last = self._position
        self._packets: tuple[bytes, ...] | None = (
            None  # encoded on first use: a device that never streams never loads libopus
        )

    def ready(self) -> None:
        """Encoded now (once per process per preset), not when the first frame falls due among other devices'."""
        if self._packets is None:
            self._packets = noise_packets(self.preset)

    def next(self) -> bytes:
        packets = self._packets
        if packets is None:
            packets = self._packets = noise_packets(self.preset)
        packet = packets[self._position]
        self.last = self._position
        self._position = (self._position + 1) % NOISE_LOOP_FRAMES
        return packet

    def last_pcm(self) -> bytes:
        """The PCM of the packet ``next`` gave last (a recording's microphone channel)."""
        return noise_pcm()[self.last]
