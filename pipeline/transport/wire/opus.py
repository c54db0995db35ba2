"""Opus for the pipeline's 16 kHz mono 60 ms frames, over libopus (``opuslib-next``), with named encoder presets.

The pipeline's audio is 16 kHz PCM in 60 ms frames whatever goes over the wire. An encoder
preset says how a real implementation encodes it: the lab's own setting, the firmware's uplink,
or the real server's downlink (24 kHz). A decoder takes any of those streams back to 16 kHz.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from types import ModuleType

import numpy as np
import soxr

from pipeline.events import FRAME_BYTES, FRAME_MS, FRAME_SAMPLES, SAMPLE_RATE

_APPLICATIONS = {"voip": "APPLICATION_VOIP", "audio": "APPLICATION_AUDIO"}  # opuslib-next's names
_SIGNALS = {"voice": "SIGNAL_VOICE"}
_LONGEST_PACKET_MS = 120  # the longest duration one Opus packet can hold (RFC 6716, 3.2.5)


@dataclass(frozen=True, slots=True)
class OpusPreset:
    """How one implementation sets up its Opus encoder; every field is part of what a run measures."""

    name: str
    follows: str  # the implementation and the source it is read from
    sample_rate: int  # what goes over the wire; the pipeline's 16 kHz is resampled to it
    application: str  # libopus application: "voip" or "audio"
    complexity: int  # 0-10
    bitrate: int | None  # bits per second; None: libopus chooses (OPUS_AUTO)
    vbr: bool
    dtx: bool  # discontinuous transmission: silence goes out as 1-2 byte packets
    signal: str | None  # "voice": tuned for speech; None: libopus decides


PRESETS: dict[str, OpusPreset] = {
    p.name: p
    for p in (
        OpusPreset("lab", "this lab before issue 23", SAMPLE_RATE, "voip", 5, None, True, False, None),
        OpusPreset(
            "firmware",
            "xiaozhi-esp32 main/audio/audio_service.h:65-76 (AS_OPUS_ENC_CONFIG)",
            SAMPLE_RATE,
            "audio",
            0,
            None,
            True,
            True,
            None,
        ),
        OpusPreset(
            "xiaozhi-server",
            "xiaozhi-esp32-server core/utils/opus_encoder_utils.py:33-47, hello sample_rate 24000",
            24000,
            "audio",
            10,
            24000,
            True,
            False,
            "voice",
        ),
    )
}


class CodecError(ValueError):
    """An Opus packet libopus cannot decode, or PCM of the wrong size."""


def opus_preset(name: str) -> OpusPreset:
    """The named encoder preset; a ValueError that lists the known ones otherwise."""
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown Opus encoder preset {name!r}; known: {', '.join(PRESETS)}") from None


class _Resampler:
    """The pipeline's 16 kHz frames at another rate, one frame out per frame in, as one continuous stream.

    Each frame is resampled together with the one before it and cut ``_LOOKAHEAD`` samples
    early, so every output sample has the filter's whole support on both sides: the frames
    join without clicks (within 2 LSB of resampling the whole turn at once), at the cost of
    4 ms of delay (the turn's last 4 ms, its TTS's trailing silence, are never sent). soxr's
    own streaming resampler emits uneven blocks (0, 734 or 1468 samples for 960 in), which
    would not give one packet per frame.
    """

    _LOOKAHEAD = 64  # 16 kHz samples: enough for soxr's HQ filter, whole output samples at 8-48 kHz

    def __init__(self, rate: int) -> None:
        if rate * self._LOOKAHEAD % SAMPLE_RATE:
            raise ValueError(f"cannot resample 16 kHz frames to {rate} Hz in whole samples")
        self.rate = rate
        self._previous = np.zeros(FRAME_SAMPLES, dtype=np.int16)
        self._start = (FRAME_SAMPLES - self._LOOKAHEAD) * rate // SAMPLE_RATE
        self._length = FRAME_SAMPLES * rate // SAMPLE_RATE

    def frame(self, pcm: bytes) -> bytes:
        current = np.frombuffer(pcm, dtype="<i2")
        both = soxr.resample(np.concatenate([self._previous, current]), SAMPLE_RATE, self.rate, quality="HQ")
        self._previous = current
        return np.asarray(both[self._start : self._start + self._length], dtype="<i2").tobytes()


def _opuslib() -> ModuleType:
    """opuslib-next, imported on first use: its import loads libopus (Debian libopus0), which a run
    without a device link (the in-process default, ``make demo``) neither needs nor installs."""
    import opuslib_next

    module: ModuleType = opuslib_next
    return module


class OpusEncoder:
    """Encodes the pipeline's 60 ms 16 kHz frames as the named preset does, one packet per frame."""

    def __init__(self, preset: str = "lab") -> None:
        self.preset = opus_preset(preset)
        self.sample_rate = self.preset.sample_rate
        self._samples = self.sample_rate * FRAME_MS // 1000
        opus = _opuslib()
        self._encoder = opus.Encoder(self.sample_rate, 1, getattr(opus, _APPLICATIONS[self.preset.application]))
        self._encoder.complexity = self.preset.complexity
        self._encoder.vbr = int(self.preset.vbr)
        self._encoder.dtx = int(self.preset.dtx)
        if self.preset.bitrate is not None:
            self._encoder.bitrate = self.preset.bitrate
        if self.preset.signal is not None:
            self._encoder.signal = getattr(opus, _SIGNALS[self.preset.signal])
        self._resampler = _Resampler(self.sample_rate) if self.sample_rate != SAMPLE_RATE else None

    def encode(self, pcm: bytes) -> bytes:
        """One 60 ms frame of 16 kHz 16-bit PCM; a short last frame is padded with silence."""
        if len(pcm) > FRAME_BYTES or len(pcm) % 2:
            raise CodecError(f"a frame is at most {FRAME_BYTES} bytes of 16-bit PCM, got {len(pcm)}")
        pcm = pcm.ljust(FRAME_BYTES, b"\0")
        if self._resampler is not None:
            pcm = self._resampler.frame(pcm)
        return bytes(self._encoder.encode(pcm, self._samples))


class OpusDecoder:
    """Decodes any Opus stream (8-48 kHz, 20/40/60 ms packets) to PCM at ``sample_rate``, as libopus can.

    libopus is called into one buffer the decoder keeps: opuslib's own ``decode`` allocates a buffer per
    packet and copies the PCM out through a Python list of samples, which cost a server more than the
    decoding itself (py-spy, 200 streams)."""

    def __init__(self, sample_rate: int = SAMPLE_RATE) -> None:
        self.sample_rate = sample_rate
        self._opus = _opuslib()
        self._decoder = self._opus.Decoder(sample_rate, 1)
        self._most = sample_rate * _LONGEST_PACKET_MS // 1000
        api = self._opus.api
        self._pcm = (ctypes.c_int16 * self._most)()
        self._pcm_pointer = ctypes.cast(self._pcm, api.c_int16_pointer)
        self._decode = api.decoder.libopus_decode

    def decode(self, packet: bytes) -> bytes:
        """The PCM the packet holds: 20 ms of it for a 20 ms packet, 60 ms for a 60 ms one (16-bit, mono)."""
        if not packet:  # libopus would conceal a lost packet, inventing 120 ms of audio
            raise CodecError("an empty Opus packet")
        samples = self._decode(self._decoder.decoder_state, packet, len(packet), self._pcm_pointer, self._most, 0)
        if samples < 0:
            raise CodecError(f"undecodable Opus packet of {len(packet)} bytes: {self._opus.OpusError(samples)}")
        return ctypes.string_at(self._pcm, samples * 2)


_threads: ThreadPoolExecutor | None = None


def codec_threads() -> ThreadPoolExecutor:
    """The threads that encode beside an event loop (libopus runs without the GIL), made on first use:
    importing the codec starts nothing."""
    global _threads
    if _threads is None:
        _threads = ThreadPoolExecutor(max_workers=os.cpu_count() or 1, thread_name_prefix="opus")
    return _threads


async def encode_off_loop(encoder: OpusEncoder, pcm: bytes, inline: bool = False) -> bytes:
    """One frame encoded in the codec's threads, so the loop serves other devices meanwhile; ``inline`` on a
    virtual clock, whose time would jump ahead while the loop waited for a thread."""
    if inline:
        return encoder.encode(pcm)
    return await asyncio.get_running_loop().run_in_executor(codec_threads(), encoder.encode, pcm)


AUDIBLE = 64  # |x| of a 16-bit sample above this is heard: about -54 dBFS


def audible(pcm: bytes, threshold: int = AUDIBLE) -> bool:
    """Whether a frame holds something a listener hears: any sample above about -54 dBFS."""
    samples = np.frombuffer(pcm, dtype="<i2")
    # the extremes, not abs(): no widened copy of the frame, and -32768 needs none
    return bool(samples.size) and (int(samples.max()) > threshold or int(samples.min()) < -threshold)
