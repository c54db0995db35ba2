"""A recording to measure, read and checked: the microphone channel, the speaker channel if there is one.

``stereo`` is the emulator's layout (``--record-audio``): left what the device's microphone sent, right
what its speaker played, one clock. ``mono`` is a single room microphone that hears the person and the
device (a stereo file given as ``mono`` is mixed down). ``room-feed`` is a room microphone (left) beside what
the device's speaker was fed (right: a tap of its line, or the emulator's speaker channel): the answers'
sound is then known, and found in the room by its waveform (``feed``); the feed's own timing is not used.
Any sample rate libsndfile reads is kept as it is: onsets are found at the file's own samples, so a figure is
exact to the sample at any rate (the questions are resampled to it where they are compared). Samples are floats
in -1..1, so the audibility threshold of 16-bit audio (``AUDIBLE``) is the same level at every bit depth.

What stops a file is a ``RecordingError`` naming it: unreadable, empty, fewer channels than the layout
needs. What does not stop it is noted: clipped samples (at full scale) distort the waveform but not where
sound begins, so the turns are still measured and their rows say so; a WAV cut short (its header claims
more than it holds) is measured as far as it goes; a file of several channels given as ``mono`` says each
channel's level and what the mix did to a sound in one of them.
"""

from __future__ import annotations

import wave
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import soundfile

Layout = Literal["stereo", "mono", "room-feed"]
LAYOUTS: tuple[Layout, ...] = ("stereo", "mono", "room-feed")
AUDIBLE = 64 / 32768  # pipeline.transport.wire.opus.audible's threshold: |x| > 64 of int16, about -54 dBFS
FULL_SCALE = 32767 / 32768  # a sample at or past this is clipped (16-bit's largest positive value)
CLIPPED_RUN = 3  # consecutive full-scale samples that count as clipping, not one loud peak


class RecordingError(ValueError):
    """The recording cannot be measured at all; the message names the file and the reason."""


@dataclass(frozen=True, slots=True)
class Recording:
    """A recording's channels at its own rate: the microphone (or room), the speaker (stereo only), the
    speaker's feed (room-feed only)."""

    path: Path
    rate: int
    mic: np.ndarray
    speaker: np.ndarray | None
    note: str = ""  # what was noticed but did not stop the measurement (clipping, a mixed-down file)
    feed: np.ndarray | None = None

    @property
    def seconds(self) -> float:
        return len(self.mic) / self.rate


def read_recording(path: Path, layout: Layout) -> Recording:
    """The file's channels for ``layout``, or ``RecordingError`` naming the file."""
    samples, rate = _samples(path)
    channels = samples.shape[1]
    notes = [short] if (short := cut_short(path, len(samples), rate)) else []
    feed = None
    if layout == "mono":
        mic, speaker = samples.mean(axis=1), None
        if channels > 1:
            notes.append(mixed(samples))
    elif channels != 2:
        raise RecordingError(
            f"{path}: {channels} channel{'s' if channels != 1 else ''}; the {layout} layout needs 2 ("
            + (
                "left: the microphone, right: the speaker"
                if layout == "stereo"
                else "left: the room microphone, right: the speaker's feed"
            )
            + "); a single room microphone is --layout mono"
        )
    elif layout == "stereo":
        mic, speaker = samples[:, 0], samples[:, 1]
    else:
        mic, speaker, feed = samples[:, 0], None, np.ascontiguousarray(samples[:, 1])
    clipped = [
        f"{name} {n} samples"
        for name, x in (("microphone", mic), ("speaker", speaker), ("feed", feed))
        if (n := clipped_samples(x))
    ]
    if clipped:
        notes.append(f"clipped at full scale ({', '.join(clipped)}): onsets measured, levels distorted")
    return Recording(
        path,
        rate,
        np.ascontiguousarray(mic),
        None if speaker is None else np.ascontiguousarray(speaker),
        "; ".join(notes),
        feed,
    )


def mixed(samples: np.ndarray) -> str:
    """What mixing a file's channels to one microphone did: a sound in one channel alone comes out at
    1/N of its level (-6 dB of two), so a soft onset crosses the audibility level later."""
    channels = samples.shape[1]
    rms = np.sqrt(np.mean(samples**2, axis=0))
    levels = ", ".join("silent" if r == 0 else f"{20 * np.log10(r):.1f}" for r in rms)
    drop = 20 * np.log10(channels)
    return (
        f"{channels} channels mixed to one microphone (RMS {levels} dBFS): a sound in one channel alone is "
        f"{drop:.1f} dB softer in the mix; a recording of the emulator (left microphone, right speaker) is "
        "--layout stereo"
    )


def cut_short(path: Path, frames: int, rate: int) -> str:
    """ "" or what a WAV whose header claims more audio than the file holds lost (libsndfile reads such a file
    as far as it goes, without a word)."""
    try:
        with wave.open(str(path)) as w:
            claimed = w.getnframes()
    except (wave.Error, EOFError, OSError):  # not a PCM WAV the standard library reads: no header to check
        return ""
    if claimed <= frames:
        return ""
    return (
        f"the header claims {claimed} frames ({claimed / rate:.3f} s), the file holds {frames} "
        f"({frames / rate:.3f} s): cut short, measured as far as it goes"
    )


def clipped_samples(x: np.ndarray | None) -> int:
    """Samples in runs of at least ``CLIPPED_RUN`` at full scale: what a converter that ran out of range leaves."""
    if x is None or not len(x):
        return 0
    at = (np.abs(x) >= FULL_SCALE).astype(np.int8)
    if not at.any():
        return 0
    edges = np.diff(np.concatenate(([0], at, [0])))
    starts, ends = np.nonzero(edges == 1)[0], np.nonzero(edges == -1)[0]
    lengths = ends - starts
    return int(lengths[lengths >= CLIPPED_RUN].sum())


def _samples(path: Path) -> tuple[np.ndarray, int]:
    if not path.is_file():
        raise RecordingError(f"{path}: recording not found")
    try:
        with soundfile.SoundFile(str(path)) as f:
            samples = f.read(dtype="float64", always_2d=True)
            rate = int(f.samplerate)
    except (soundfile.LibsndfileError, RuntimeError, ValueError, OSError) as exc:
        raise RecordingError(f"{path}: unreadable audio ({exc})") from None
    if rate <= 0 or samples.shape[1] < 1:
        raise RecordingError(f"{path}: unusable audio ({samples.shape[1]} channels, {rate} Hz)")
    if not len(samples):
        raise RecordingError(f"{path}: no audio samples")
    return samples, rate
