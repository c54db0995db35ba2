"""One turn of a recording drawn with both methods' marks: what the recording says beside what the traces say.

The recording is read with the standard library's ``wave`` (16-bit PCM, as the emulator writes it
and ``pipeline.acoustic`` reads it): the report's core install needs no audio package.
"""

from __future__ import annotations

import wave
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes

from pipeline.report import plots

CHANNELS = ("microphone", "speaker")  # the emulator's stereo layout (left, right)
MARGIN_S = 0.5  # shown before the end of speech and after the later first audible mark
ZOOM_S = 0.02  # the zoom's margin around the two first-audible marks


class WaveformError(ValueError):
    """A recording that cannot be drawn: the file and the problem."""


@dataclass(frozen=True, slots=True)
class Mark:
    """A moment in the recording (seconds from its first sample), as one method found it."""

    at_s: float
    label: str
    colour: str
    style: str = "-"


def read_wav(path: Path) -> tuple[np.ndarray, int]:
    """(samples as float in [-1, 1], one column per channel; the sample rate)."""
    try:
        with wave.open(str(path), "rb") as w:
            if w.getsampwidth() != 2:
                raise WaveformError(f"{path}: {8 * w.getsampwidth()}-bit samples; the recordings are 16-bit PCM")
            frames = w.readframes(w.getnframes())
            channels, rate = w.getnchannels(), w.getframerate()
    except (OSError, EOFError, wave.Error) as exc:
        raise WaveformError(f"{path}: cannot read the recording: {exc}") from None
    pcm = np.frombuffer(frames, dtype="<i2").astype(np.float64) / 32768.0
    return pcm.reshape(-1, channels), rate


def waveform_plot(samples: np.ndarray, rate: int, marks: Sequence[Mark], start_s: float, end_s: float) -> bytes:
    """Every channel from ``start_s`` to ``end_s`` with the marks; below, the last channel (the speaker) zoomed
    on the marks after the first (the first audible sound, where the methods may differ by milliseconds)."""
    channels = samples.shape[1]
    fig, axes = plt.subplots(channels + 1, 1, figsize=(11, 2.0 * (channels + 1)))
    for ch in range(channels):
        _draw(axes[ch], samples[:, ch], rate, start_s, end_s, marks)
        axes[ch].set_ylabel(CHANNELS[ch] if channels == 2 else "room")
    late = [m.at_s for m in marks[1:]] or [m.at_s for m in marks]
    _draw(axes[-1], samples[:, -1], rate, min(late) - ZOOM_S, max(late) + ZOOM_S, marks)
    axes[-1].set_ylabel("zoom")
    axes[-1].set_xlabel("seconds from the recording's first sample")
    axes[0].legend(loc="upper left", fontsize=8)
    axes[0].set_title("One turn of the recording: the recording's marks and the traces'")
    return plots.png(fig)


def _draw(ax: Axes, channel: np.ndarray, rate: int, start_s: float, end_s: float, marks: Sequence[Mark]) -> None:
    first = max(0, int(start_s * rate))
    last = min(len(channel), int(end_s * rate) + 1)
    times = np.arange(first, last) / rate
    ax.plot(times, channel[first:last], linewidth=0.6, color="#555555")
    for m in marks:
        ax.axvline(m.at_s, color=m.colour, linestyle=m.style, linewidth=1.2, label=m.label)
    ax.set_xlim(start_s, end_s)
    peak = float(np.abs(channel[first:last]).max()) if last > first else 0.0
    limit = 1.2 * peak if peak > 0 else 1.0  # scaled to what is shown: a quiet answer is still seen
    ax.set_ylim(-limit, limit)
    ax.grid(True, alpha=0.3)
