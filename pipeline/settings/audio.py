"""A question's audio -> 60 ms frames of 16 kHz mono 16-bit PCM, as a device would send them.

Read through libsndfile (``soundfile``): WAV of every subtype (integer, float, extensible),
FLAC, OGG Vorbis and Opus, MP3, AIFF and the rest of what this libsndfile build can open.
Other sample rates are converted with soxr (a proper anti-aliased resampler), channels are
mixed to mono, and what was converted is noted on the turn's row. A file that cannot be used
raises ``BadAudio`` naming the file and the reason; the run records that question's turns as
``bad_audio`` and goes on.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile
import soxr

from pipeline.events import FRAME_BYTES, FRAME_MS, SAMPLE_RATE, AudioFrame

# extensions libsndfile reads here, by the format name it gives them
_FORMATS = {
    "WAV": (".wav", ".wave"),
    "FLAC": (".flac",),
    "OGG": (".ogg", ".oga", ".opus"),
    "MP3": (".mp3",),
    "AIFF": (".aif", ".aiff", ".aifc"),
    "CAF": (".caf",),
    "W64": (".w64",),
    "RF64": (".rf64",),
    "AU": (".au", ".snd"),
}


def audio_extensions() -> frozenset[str]:
    """File extensions of the audio formats this libsndfile build can read."""
    available = soundfile.available_formats()
    return frozenset(ext for name, exts in _FORMATS.items() if name in available for ext in exts)


class BadAudio(ValueError):
    """One audio file cannot be used; its turn is recorded as ``bad_audio``."""


@dataclass(frozen=True, slots=True)
class LoadedAudio:
    """A question's audio ready to send: its frames, its length, and the conversions the turn's row notes."""

    frames: tuple[AudioFrame, ...]
    duration_ms: int
    note: str = ""  # what was converted, if anything


def read_samples(path: Path) -> tuple[np.ndarray, int, str]:
    """(float samples, frames x channels), sample rate, and a description of the format; or ``BadAudio``."""
    if not path.is_file():
        raise BadAudio(f"{path}: audio file not found")
    try:
        with soundfile.SoundFile(str(path)) as f:
            kind = f"{f.format} {f.subtype}"
            samples = f.read(dtype="float64", always_2d=True)
            rate = int(f.samplerate)
    except (soundfile.LibsndfileError, RuntimeError, ValueError, OSError) as exc:
        what = path.suffix.lstrip(".").upper() or "audio"
        raise BadAudio(f"{path}: unreadable {what} ({exc})") from None
    if rate <= 0 or samples.shape[1] < 1:
        raise BadAudio(f"{path}: unusable audio ({samples.shape[1]} channels, {rate} Hz)")
    if len(samples) == 0:
        raise BadAudio(f"{path}: no audio samples")
    if _truncated(path, kind, samples):
        raise BadAudio(f"{path}: truncated WAV (its data ends in the middle of a sample)")
    return samples, rate, kind


def _truncated(path: Path, kind: str, samples: np.ndarray) -> bool:
    """A PCM WAV whose data stops mid-sample: a copy that broke off (libsndfile drops the partial sample)."""
    if not kind.startswith("WAV PCM_"):
        return False
    with path.open("rb") as fh:
        head = fh.read(1 << 16)
    at = head.find(b"data", 12)
    if at < 0:
        return False
    block = {"PCM_U8": 1, "PCM_16": 2, "PCM_24": 3, "PCM_32": 4}.get(kind.split()[1], 0) * samples.shape[1]
    present = path.stat().st_size - at - 8
    declared = int.from_bytes(head[at + 4 : at + 8], "little")
    return bool(block > 0 and min(present, declared) % block != 0)


def to_16k_mono(samples: np.ndarray, rate: int) -> tuple[np.ndarray, list[str]]:
    """Mono at 16 kHz, and what was done to get there."""
    notes = []
    mono = samples.mean(axis=1)
    if samples.shape[1] != 1:
        notes.append(f"{samples.shape[1]} channels mixed to mono")
    if rate != SAMPLE_RATE:
        mono = soxr.resample(mono, rate, SAMPLE_RATE, quality="HQ")
        notes.append(f"resampled {rate} Hz -> {SAMPLE_RATE} Hz")
    return mono, notes


def load_audio(path: Path) -> LoadedAudio:
    """Decode an audio file into 60 ms frames of 16 kHz mono 16-bit PCM."""
    samples, rate, kind = read_samples(path)
    mono, notes = to_16k_mono(samples, rate)
    if not kind.startswith("WAV PCM_16"):
        notes.insert(0, f"read from {kind}")
    pcm = (np.clip(mono, -1.0, 1.0) * 32767).astype("<i2").tobytes()
    return LoadedAudio(
        frames=frames_from_pcm(pcm), duration_ms=len(pcm) * 1000 // (2 * SAMPLE_RATE), note="; ".join(notes)
    )


def frames_from_pcm(pcm: bytes) -> tuple[AudioFrame, ...]:
    """Split PCM into 60 ms frames, zero-padding the last one."""
    if len(pcm) % FRAME_BYTES:
        pcm = pcm + bytes(FRAME_BYTES - len(pcm) % FRAME_BYTES)
    return tuple(
        AudioFrame(seq=i, pcm=pcm[o : o + FRAME_BYTES], duration_ms=FRAME_MS)
        for i, o in enumerate(range(0, len(pcm), FRAME_BYTES))
    )
