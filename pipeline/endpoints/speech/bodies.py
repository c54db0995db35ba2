"""Uploads to the pipeline's audio, and the pipeline's audio to a response body.

An upload is anything libsndfile reads (WAV of every subtype, FLAC, Ogg Vorbis/Opus, MP3,
AIFF...), mixed to mono and resampled with soxr to the 16 kHz 16-bit PCM the ASR stages take,
as a fixture file is (``pipeline.settings.audio``). A TTS stage's 16 kHz frames leave encoded
by libsndfile as WAV, FLAC, MP3 or Ogg Opus, or as OpenAI's raw ``pcm`` (24 kHz, 16-bit, mono).
"""

from __future__ import annotations

import io
from dataclasses import dataclass

import numpy as np
import soundfile
import soxr

from pipeline.events import SAMPLE_RATE
from pipeline.settings.audio import to_16k_mono

PCM_RATE = 24000  # OpenAI's ``pcm``: raw 24 kHz 16-bit signed little-endian mono


@dataclass(frozen=True, slots=True)
class OutputFormat:
    """How one ``response_format`` is written: libsndfile's container and subtype, and the response's content type."""

    container: str  # libsndfile's format name; "" for raw PCM
    subtype: str
    content_type: str


OUTPUT_FORMATS = {
    "wav": OutputFormat("WAV", "PCM_16", "audio/wav"),
    "flac": OutputFormat("FLAC", "PCM_16", "audio/flac"),
    "mp3": OutputFormat("MP3", "MPEG_LAYER_III", "audio/mpeg"),
    "opus": OutputFormat("OGG", "OPUS", "audio/ogg"),
    "pcm": OutputFormat("", "", "audio/pcm"),
}


class NotAudio(ValueError):
    """The upload is not audio libsndfile can read."""


class NoSamples(ValueError):
    """The upload is empty, or audio with no samples in it."""


@dataclass(frozen=True, slots=True)
class Upload:
    """An uploaded file as the ASR stages take it, with its length and what it was read as."""

    pcm: bytes  # 16 kHz mono 16-bit little-endian
    duration_ms: int
    kind: str  # what it was read as, e.g. "WAV PCM_16"


def decode(data: bytes) -> Upload:
    """An uploaded file as the pipeline's PCM; ``NotAudio`` or ``NoSamples`` when it cannot be used."""
    if not data:
        raise NoSamples("the file is empty")
    try:
        with soundfile.SoundFile(io.BytesIO(data)) as f:
            kind = f"{f.format} {f.subtype}"
            samples = f.read(dtype="float64", always_2d=True)
            rate = int(f.samplerate)
    except (soundfile.LibsndfileError, RuntimeError, ValueError, OSError) as exc:
        why = getattr(exc, "error_string", "") or str(exc)  # libsndfile's own words, without the buffer's repr
        raise NotAudio(f"the file is not audio this server can read ({why})") from None
    if rate <= 0 or samples.shape[1] < 1:
        raise NotAudio(f"unusable audio ({samples.shape[1]} channels, {rate} Hz)")
    if len(samples) == 0:
        raise NoSamples(f"the file ({kind}) holds no audio samples")
    mono, _notes = to_16k_mono(samples, rate)
    pcm = (np.clip(mono, -1.0, 1.0) * 32767).astype("<i2").tobytes()
    return Upload(pcm=pcm, duration_ms=len(pcm) * 1000 // (2 * SAMPLE_RATE), kind=kind)


def encode(pcm: bytes, response_format: str) -> bytes:
    """16 kHz mono 16-bit PCM as a response body in ``response_format`` (a key of ``OUTPUT_FORMATS``)."""
    fmt = OUTPUT_FORMATS[response_format]
    samples = np.frombuffer(pcm, dtype="<i2")
    if not fmt.container:
        resampled = soxr.resample(samples.astype(np.float32) / 32768.0, SAMPLE_RATE, PCM_RATE, quality="HQ")
        return bytes(np.clip(resampled * 32768.0, -32768, 32767).astype("<i2").tobytes())
    out = io.BytesIO()
    soundfile.write(out, samples, SAMPLE_RATE, format=fmt.container, subtype=fmt.subtype)
    return out.getvalue()
