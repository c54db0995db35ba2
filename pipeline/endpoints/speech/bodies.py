"""Uploads to the pipeline's audio, and the pipeline's audio to a response body.

An upload is anything libsndfile reads (WAV of every subtype, FLAC, Ogg Vorbis/Opus, MP3,
AIFF...), mixed to mono and resampled with soxr to the 16 kHz 16-bit PCM the ASR stages take,
as a fixture file is (``pipeline.settings.audio``). It is read a block at a time and refused
once it runs past the server's limit on duration: a small upload can hold hours (an hour of
silence is a few hundred KiB of FLAC), so its size says nothing of what decoding it costs.
A TTS stage's 16 kHz frames leave encoded by libsndfile as WAV, FLAC, MP3 or Ogg Opus, or as
OpenAI's raw ``pcm`` (24 kHz, 16-bit, mono).
"""

from __future__ import annotations

import io
from dataclasses import dataclass

import numpy as np
import soundfile
import soxr

from pipeline.events import SAMPLE_RATE

PCM_RATE = 24000  # OpenAI's ``pcm``: raw 24 kHz 16-bit signed little-endian mono
# OpenAI's gpt-4o-transcribe refuses audio over 1500 s (whisper-1 has only the 25 MB limit on the file, but a
# server that decodes must bound what one upload costs it in memory and time)
MAX_AUDIO_S = 1500.0
BLOCK_FRAMES = 1 << 16  # read and resampled a block at a time: the peak is the 16 kHz output, not the file's rate
UNKNOWN_FRAMES = 2**63 - 1  # libsndfile's count when the header does not say (a FLAC streamed without one)


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


class TooLong(ValueError):
    """The upload's audio runs past the server's limit on duration."""

    def __init__(self, limit_s: float, seen: str) -> None:
        super().__init__(f"the uploaded audio is longer than {limit_s:g} s, this server's limit ({seen})")
        self.limit_s = limit_s


@dataclass(frozen=True, slots=True)
class Upload:
    """An uploaded file as the ASR stages take it, with its length and what it was read as."""

    pcm: bytes  # 16 kHz mono 16-bit little-endian
    duration_ms: int
    kind: str  # what it was read as, e.g. "WAV PCM_16"


def decode(data: bytes, max_s: float = MAX_AUDIO_S) -> Upload:
    """An uploaded file as the pipeline's PCM; ``NotAudio``, ``NoSamples`` or ``TooLong`` when it cannot be used."""
    if not data:
        raise NoSamples("the file is empty")
    try:
        with soundfile.SoundFile(io.BytesIO(data)) as f:
            kind = f"{f.format} {f.subtype}"
            pcm = read_16k(f, max_s)
    except (NotAudio, TooLong):
        raise
    except (soundfile.LibsndfileError, RuntimeError, ValueError, OSError) as exc:
        why = getattr(exc, "error_string", "") or str(exc)  # libsndfile's own words, without the buffer's repr
        raise NotAudio(f"the file is not audio this server can read ({why})") from None
    if not pcm:
        raise NoSamples(f"the file ({kind}) holds no audio samples")
    return Upload(pcm=pcm, duration_ms=len(pcm) * 1000 // (2 * SAMPLE_RATE), kind=kind)


def read_16k(f: soundfile.SoundFile, max_s: float) -> bytes:
    """The open file as 16 kHz mono 16-bit PCM, read and resampled a block at a time; ``TooLong`` as soon as
    its header, or what has been read, passes ``max_s``. Mixed, resampled and rounded as ``to_16k_mono`` and
    ``load_audio`` do (soxr's stream gives the one-shot resampler's samples exactly)."""
    rate, channels = int(f.samplerate), int(f.channels)
    if rate <= 0 or channels < 1:
        raise NotAudio(f"unusable audio ({channels} channels, {rate} Hz)")
    limit = int(max_s * rate)  # frames at the file's rate
    if limit < f.frames < UNKNOWN_FRAMES:
        raise TooLong(max_s, f"its header says {f.frames / rate:g} s")
    stream = soxr.ResampleStream(rate, SAMPLE_RATE, 1, dtype="float64", quality="HQ") if rate != SAMPLE_RATE else None
    out: list[bytes] = []
    read = 0
    while True:
        block = f.read(BLOCK_FRAMES, dtype="float64", always_2d=True)
        read += len(block)
        if read > limit:
            raise TooLong(max_s, f"more than {max_s:g} s read")
        last = len(block) < BLOCK_FRAMES
        mono = block.mean(axis=1)
        if stream is not None:
            mono = stream.resample_chunk(mono, last=last)
        out.append((np.clip(mono, -1.0, 1.0) * 32767).astype("<i2").tobytes())
        if last:
            return b"".join(out)


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
