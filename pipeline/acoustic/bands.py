"""Where a question's sound pattern lies in a recording, robust to the room: log band energies correlated.

A room's reverberation smears a waveform (at 3 m in a room with an RT60 of 0.6 s, a question's waveform
matches its clip at 0.13-0.26 of a clean copy's 1.0, no better than other speech of the same voice), but the
pattern of its energy in frequency bands over time survives it: each band's log energy in 25 ms frames every
``HOP_MS`` (``BANDS`` bands, equally wide in mel from ``LOWEST_HZ`` to ``HIGHEST_HZ``, at ``RATE``), with each band's
mean over the clip taken out, correlated with the recording's (each window's own band means taken out too), scores
a question where it was played, whatever the level, a steady noise's colour or the room's colouring. The lag
is as coarse as a frame and reverberation pulls it late by up to a few tens of milliseconds;
``align`` places the direct sound from the waveform near it.
"""

from __future__ import annotations

import itertools

import numpy as np
import soxr

RATE = 8000  # every recording's rate has this much of speech's bands; the frames cost 6x less than at 48 kHz
HOP_MS = 10.0
FRAME_MS = 25.0
BANDS = 24
LOWEST_HZ = 100.0
HIGHEST_HZ = 3800.0
FFT = 512  # the frame zero-padded: bins 15.6 Hz apart, so the lowest bands hold several
CHUNK_FRAMES = 4096  # frames transformed at once: memory that does not grow with the recording's length
HOP = round(RATE * HOP_MS / 1000)
FRAME = round(RATE * FRAME_MS / 1000)
CUT_SHARE = 0.75  # a clip the recording's end cuts short is scored on what is left, this share at least
FLAT_SHARE = 0.01  # a window whose band spread is under this share of the clip's is flat
_TINY = 1e-10  # a band's energy floor before the log (digital silence)


def band_energies(x: np.ndarray, rate: int) -> np.ndarray:
    """``BANDS`` x frames: the log energy of ``x`` (at ``rate``) per band, one frame every ``HOP_MS``."""
    y = np.asarray(x, dtype=np.float64)
    if rate != RATE:
        y = np.asarray(soxr.resample(y, rate, RATE, quality="HQ"), dtype=np.float64)
    count = max(0, (len(y) - FRAME) // HOP + 1)
    out = np.empty((BANDS, count))
    weights = _band_matrix()
    window = np.hanning(FRAME)
    for first in range(0, count, CHUNK_FRAMES):
        n = min(CHUNK_FRAMES, count - first)
        index = (first + np.arange(n))[:, None] * HOP + np.arange(FRAME)[None, :]
        power = np.square(np.abs(np.fft.rfft(y[index] * window, FFT, axis=1)))
        out[:, first : first + n] = np.log(power @ weights + _TINY).T
    return out


def band_ncc(recording: np.ndarray, clip: np.ndarray) -> np.ndarray:
    """Score per frame lag 0..frames-1: the clip's band pattern against the recording's window there, each band's
    mean taken out on both sides (1.0: the same pattern at any level). Where the window runs past the recording's
    end, the part of the clip the recording still holds is scored (at least ``CUT_SHARE`` of it): a question the
    recording cuts short is still found."""
    frames, length = recording.shape[1], clip.shape[1]
    scores = np.zeros(frames)
    if length < 2 or frames < 1:
        return scores
    recording = recording - recording.mean(axis=1, keepdims=True)  # small sums: the spreads below stay exact
    whole = frames - length + 1
    if whole > 0:
        scores[:whole] = _whole(recording, clip)
    for lag in range(max(0, whole), frames - round(CUT_SHARE * length) + 1):  # cut short by the recording's end
        held = frames - lag
        scores[lag] = _whole(recording[:, lag:], clip[:, :held])[0]
    return scores


def _whole(recording: np.ndarray, clip: np.ndarray) -> np.ndarray:
    """``band_ncc`` where the whole clip lies inside the recording (lags 0..frames-length)."""
    length = clip.shape[1]
    lags = recording.shape[1] - length + 1
    centred = clip - clip.mean(axis=1, keepdims=True)
    size = 1 << int(np.ceil(np.log2(recording.shape[1] + length)))
    spectra = np.fft.rfft(recording, size, axis=1) * np.conj(np.fft.rfft(centred, size, axis=1))
    numerator = np.fft.irfft(spectra.sum(axis=0), size)[:lags]
    spread = np.zeros(lags)
    for band in recording:
        sums = np.concatenate(([0.0], np.cumsum(band)))
        squares = np.concatenate(([0.0], np.cumsum(np.square(band))))
        s = sums[length:] - sums[:-length]
        spread += squares[length:] - squares[:-length] - s * s / length
    norm = float(np.linalg.norm(centred))
    if norm == 0.0:
        return np.zeros(lags)
    # a window nearly constant in every band (digital silence, a steady tone) has no pattern to match: its score
    # would be rounding error over rounding error
    flat = spread < FLAT_SHARE * norm**2
    scores = numerator / (norm * np.sqrt(np.maximum(spread, 1e-300)))
    return np.asarray(np.where(flat, 0.0, np.clip(scores, -1.0, 1.0)))


def _band_matrix() -> np.ndarray:
    """FFT bins x bands: which bins each band sums (the bands equally wide on the mel scale, as hearing's are)."""
    freqs = np.fft.rfftfreq(FFT, 1 / RATE)
    mel = np.linspace(_mel(LOWEST_HZ), _mel(HIGHEST_HZ), BANDS + 1)
    edges = 700.0 * (10 ** (mel / 2595.0) - 1.0)
    return np.stack([(freqs >= lo) & (freqs < hi) for lo, hi in itertools.pairwise(edges)], axis=1).astype(np.float64)


def _mel(hz: float) -> float:
    return float(2595.0 * np.log10(1.0 + hz / 700.0))
