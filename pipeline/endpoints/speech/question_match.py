"""Which fixture question an uploaded utterance is: how an oracle ASR behind an HTTP API knows its text.

In-process and in the lab's own server, the oracle ASR is told the question (the device's
``lab`` message names it). A real xiaozhi server sends the speech service only the audio its
VAD cut, so the service must find the question from that audio. It does so by the shape of its
loudness: each fixture clip's energy envelope (20 ms hops, dB above a -60 dBFS floor) is
compared with the upload's at every offset (normalised cross-correlation, as a cosine, its dot
products by FFT so the work grows with the upload's length, not its square), and the best clip
wins when its score clears ``min_score``. This survives what lies between the fixture file and
the upload (Opus at the firmware's settings, the server's pre-roll, a cut at either end, the
device's noise floor) because the envelope, not the waveform, is compared; a few seconds of
upload cost well under a millisecond per clip, so the stand-in's latency stays its scripted one
(``scripts/bench_question_match.py`` times longer ones). An upload that matches nothing is heard
as no words (``None``), as a real ASR hears noise.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pipeline.events import SAMPLE_RATE
from pipeline.settings.audio import load_audio
from pipeline.settings.fixtures import load_questions

HOP = SAMPLE_RATE // 50  # 20 ms
BANDS = 16
_WINDOW = np.hanning(HOP)
_EDGES = np.unique(np.geomspace(2, HOP // 2 + 1, BANDS + 1).astype(int))[:BANDS] - 2  # log-spaced bins
FLOOR_DB = -60.0  # the device's noise floor sits here (about -60 dBFS), so it reads as nothing
MIN_SCORE = 0.6  # below this an upload is not any fixture clip (a clip against itself scores 1.0)


@dataclass(frozen=True, slots=True)
class Heard:
    """The fixture question an upload was matched to, and how well (cosine of the envelopes, 0..1)."""

    question_id: str
    text: str
    language: str
    score: float


def envelope(pcm: bytes) -> np.ndarray:
    """16 kHz 16-bit PCM -> loudness per 20 ms in each of ``BANDS`` frequency bands, in dB above the floor
    (0 at or below it): hops x bands."""
    samples = np.frombuffer(pcm, dtype="<i2").astype(np.float64) / 32768.0
    hops = len(samples) // HOP
    if hops == 0:
        return np.zeros((0, BANDS))
    spectrum = np.abs(np.fft.rfft(samples[: hops * HOP].reshape(hops, HOP) * _WINDOW, axis=1)) ** 2 / HOP
    power = np.add.reduceat(spectrum, _EDGES, axis=1) / np.diff(np.append(_EDGES, spectrum.shape[1]))
    return np.clip(10.0 * np.log10(power + 1e-12) - FLOOR_DB, 0.0, None)


def similarity(upload: np.ndarray, clip: np.ndarray) -> float:
    """The best cosine between the upload's features and the clip's (each padded with the floor) at any offset:
    the upload is compared with the part of the clip it lines up with, so a part of a clip matches its clip."""
    return UploadSpectrum(upload, len(clip)).similarity(clip)


class UploadSpectrum:
    """An upload's features ready to be compared with clips up to ``longest`` hops: their spectrum along time,
    taken once, so each clip costs one FFT of the pair's length (the sliding dot product at every offset, done
    directly, cost the upload's length squared: minutes for an upload at the services' limit)."""

    def __init__(self, features: np.ndarray, longest: int) -> None:
        self.hops, self.norm = len(features), float(np.linalg.norm(features))
        self.size = 1 << max(0, self.hops + longest - 2).bit_length()  # no offset wraps round
        self.spectrum = np.fft.rfft(features, self.size, axis=0)

    def similarity(self, clip: np.ndarray) -> float:
        """As ``similarity``, for a clip no longer than ``longest``."""
        if self.norm == 0.0 or not clip.any():
            return 0.0
        n, m = self.hops, len(clip)
        # one product per band, summed, then back: the dot product at every lag of the upload against the clip
        circular = np.fft.irfft(np.sum(self.spectrum * np.conj(np.fft.rfft(clip, self.size, axis=0)), axis=1))
        lags = np.arange(1 - m, n)  # upload hop i meets clip hop i - lag; every lag where the two overlap
        dots = circular[lags % self.size]
        energy = np.concatenate([[0.0], np.cumsum(np.sum(clip**2, axis=1))])
        window = np.sqrt(energy[np.clip(n - lags, 0, m)] - energy[np.clip(-lags, 0, m)])
        scores = np.divide(dots, window * self.norm, out=np.zeros_like(dots), where=window > 0)
        return float(np.max(scores))


class FixtureEars:
    """The fixture clips' envelopes, and the match of an upload against them."""

    def __init__(self, clips: dict[str, tuple[str, str, np.ndarray]], min_score: float = MIN_SCORE) -> None:
        if not clips:
            raise ValueError("no fixture clips to match uploads against")
        self.clips, self.min_score = clips, min_score

    @classmethod
    def load(cls, folder: Path, min_score: float = MIN_SCORE) -> FixtureEars:
        """Every question in ``folder``'s manifest, its clip read as a device would send it."""
        clips: dict[str, tuple[str, str, np.ndarray]] = {}
        for q in load_questions(folder).questions:
            pcm = b"".join(frame.pcm for frame in load_audio(q.audio).frames)
            clips[q.id] = (q.text, q.language, envelope(pcm))
        return cls(clips, min_score)

    def hear(self, pcm: bytes) -> Heard | None:
        """The question whose clip ``pcm`` is (or is a part of); None when none scores ``min_score``."""
        upload = UploadSpectrum(envelope(pcm), max(len(env) for _t, _l, env in self.clips.values()))
        scored = [(upload.similarity(env), qid) for qid, (_t, _l, env) in self.clips.items()]
        score, qid = max(scored)
        if score < self.min_score:
            return None
        text, language, _ = self.clips[qid]
        return Heard(qid, text, language, round(score, 4))
