"""Where each question was played in a recording: normalised cross-correlation against the known clip.

The lab knows what it played, not when the sound card played it: the delay of an output and an input
path is unknown and differs per machine, so every occurrence is found in the microphone channel (or the
single room microphone) by correlating it with the question's audio. Only the clip's speech is matched
(from its first audible sample to its end of speech): in a room the answer may already play in the clip's
trailing silence. A coarse pass at ``COARSE_RATE``, pre-emphasised, over the whole recording finds the
candidates (the recording's spectrum made once, in blocks, shared by every question); each is refined at
the recording's own rate over a few samples around it, so a clean channel gives the exact sample, and in
a room the direct sound is preferred to a reflection that matches as well. Occurrences of different
questions may not overlap in their speech: the stronger match wins. Rounds are a question's occurrences
in the order they were played. On a clean channel the end of speech is placed by the very frame that
holds it (``speech_end_sample``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import soxr

from pipeline.acoustic.questions import PlayedQuestion
from pipeline.acoustic.recording import AUDIBLE
from pipeline.events import FRAME_MS

COARSE_RATE = 8000  # speech's correlation peak is as sharp as a 62.5 us step needs; 4x less work than 16 kHz
# normalised correlation that counts as the clip: a clean copy scores 1.0; measured in the simulated room (RT60
# 0.3-0.6 s, 20 dB SNR) the question scored 0.44-0.64 and other speech of the same voices at most 0.2
MIN_SCORE = 0.3
BLOCK = 1 << 19  # samples per FFT block of a long recording: 65 s at COARSE_RATE
FRAME_JITTER_MS = 20.0  # how far the frame holding the end of speech may lie from where the whole clip puts it
EXACT_COPY = 0.99  # that frame's match on a clean channel (a room's reverberation never reaches it)
PRE_EMPHASIS = 0.95
REFINE_SAMPLES = 3  # coarse steps searched either side at the recording's rate
EARLIEST_MS = 30.0  # how much earlier than the best match the direct sound may be (a reflection's extra path: 10 m)
EARLY_SHARE = 0.8  # an earlier match this close to the best is the direct sound (speech's own repeats score far less)


@dataclass(frozen=True, slots=True)
class Occurrence:
    """One playing of a question: the question's index, the recording sample of the clip's first sample, and
    how well it matched (0..1)."""

    question: int
    start: int
    score: float


def find_occurrences(mic: np.ndarray, rate: int, questions: Sequence[PlayedQuestion]) -> list[Occurrence]:
    """Every question's occurrences in ``mic`` (at ``rate``), in the order they were played."""
    spoken = [spoken_part(q) for q in questions]
    coarse_mic = _emphasised(_resampled(mic, rate, COARSE_RATE))
    clips = [
        _emphasised(_resampled(q.pcm[lo:hi], q.sample_rate, COARSE_RATE))
        for q, (lo, hi) in zip(questions, spoken, strict=True)
    ]
    if not len(coarse_mic) or not any(len(c) for c in clips):
        return []
    scores = Correlator(coarse_mic, max(len(c) for c in clips))
    found = []
    for index, clip in enumerate(clips):
        offset = spoken[index][0] * COARSE_RATE / questions[index].sample_rate
        for lag, score in _peaks(scores.ncc(clip), len(clip)):
            found.append(Occurrence(index, round(lag - offset), score))
    kept = _without_overlaps(found, questions)
    mic = np.asarray(mic, dtype=np.float64)
    return sorted(
        (_refined(o, mic, rate, questions[o.question], spoken[o.question]) for o in kept), key=lambda o: o.start
    )


def spoken_part(q: PlayedQuestion) -> tuple[int, int]:
    """The clip's samples from its first audible one to its end of speech: what is matched. Its silences are
    left out: in a room the answer may already play during the clip's trailing silence, and would only
    lower the match."""
    end = min(len(q.pcm), round(q.speech_end_s * q.sample_rate))
    loud = np.nonzero(np.abs(q.pcm[:end]) > AUDIBLE)[0]
    return (int(loud[0]), end) if len(loud) else (0, end)


class Correlator:
    """Normalised cross-correlation of one signal with many templates, the signal's spectrum made once. A long
    signal is cut into overlapping blocks of ``BLOCK`` samples (overlap-save): the same work per sample, and
    memory that does not grow with the recording's length in one piece."""

    def __init__(self, signal: np.ndarray, longest: int) -> None:
        self.n = len(signal)
        whole = _power_of_two(self.n + longest)
        self.size = whole if whole <= BLOCK else max(BLOCK, _power_of_two(2 * longest))
        self.step = self.size - longest + 1  # lags each block gives without wrapping round
        self.starts = range(0, self.n, self.step)
        self.spectra = [np.fft.rfft(signal[s : s + self.size], self.size) for s in self.starts]
        self.cumulative = np.concatenate(([0.0], np.cumsum(signal.astype(np.float64) ** 2)))

    def ncc(self, template: np.ndarray) -> np.ndarray:
        """Score per lag 0..n-1: the template against the signal from that lag (zeros past its end)."""
        norm = float(np.linalg.norm(template))
        if norm == 0.0:
            return np.zeros(self.n)
        kernel = np.conj(np.fft.rfft(template, self.size))
        corr = np.empty(self.n)
        for start, spectrum in zip(self.starts, self.spectra, strict=True):
            count = min(self.step, self.n - start)
            corr[start : start + count] = np.fft.irfft(spectrum * kernel, self.size)[:count]
        lags = np.arange(self.n)
        window = self.cumulative[np.minimum(lags + len(template), self.n)] - self.cumulative[lags]
        # silence (or near it) matches nothing: a floor keeps rounding noise from dividing into a peak
        floor = 1e-9 * len(template)
        return np.where(window > floor, corr / (norm * np.sqrt(np.maximum(window, floor))), 0.0)


def _power_of_two(n: int) -> int:
    return 1 << max(0, int(np.ceil(np.log2(max(n, 1)))))


def _peaks(scores: np.ndarray, length: int) -> list[tuple[int, float]]:
    """Lags above ``MIN_SCORE``, strongest first, each at least half a clip from a stronger one."""
    scores = scores.copy()
    peaks = []
    half = max(1, length // 2)
    while len(scores):
        lag = int(np.argmax(scores))
        if scores[lag] < MIN_SCORE:
            break
        peaks.append((lag, float(scores[lag])))
        scores[max(0, lag - half) : lag + half] = 0.0
    return peaks


def _without_overlaps(found: list[Occurrence], questions: Sequence[PlayedQuestion]) -> list[Occurrence]:
    """The strongest matches whose speech does not overlap a stronger match's."""
    kept: list[tuple[float, float, Occurrence]] = []
    for o in sorted(found, key=lambda o: -o.score):
        q = questions[o.question]
        begin, end = o.start / COARSE_RATE, o.start / COARSE_RATE + q.speech_end_s
        if all(end <= b or begin >= e for b, e, _ in kept):
            kept.append((begin, end, o))
    return [o for _, _, o in kept]


def speech_end_sample(mic: np.ndarray, rate: int, q: PlayedQuestion, o: Occurrence) -> int:
    """The recording sample where the question's speech ends: from the frame that holds it when that frame is
    found where the occurrence puts it (within ``FRAME_JITTER_MS``, as an exact copy: a clean channel), else
    from the occurrence. The emulator writes each uplink frame where it was handed over, so a late frame moves
    the end of speech with it, as the trace side marks it: that frame's start + the end's offset in the frame."""
    end_ms = q.speech_end_s * 1000
    frame = q.sample_rate * FRAME_MS // 1000
    k = max(0, int(np.ceil(end_ms / FRAME_MS)) - 1)
    fallback = o.start + round(q.speech_end_s * rate)
    own = q.pcm[k * frame : (k + 1) * frame].astype(np.float64)
    if not len(own) or not np.any(own):
        return fallback
    if rate != q.sample_rate:
        own = _resampled(q.pcm, q.sample_rate, rate)[round(k * frame * rate / q.sample_rate) :][
            : round(len(own) * rate / q.sample_rate)
        ]
    predicted = o.start + round(k * FRAME_MS * rate / 1000)
    reach = round(FRAME_JITTER_MS * rate / 1000)
    scores = _local_ncc(mic, own, predicted - reach, predicted + reach + 1)
    best = int(np.argmax(scores))
    if scores[best] < EXACT_COPY:
        return fallback
    return predicted - reach + best + round((end_ms - k * FRAME_MS) * rate / 1000)


def _refined(o: Occurrence, mic: np.ndarray, rate: int, q: PlayedQuestion, spoken: tuple[int, int]) -> Occurrence:
    """The coarse lag made exact at the recording's rate: the best lag near it, or an earlier one nearly as
    good: in a room a reflection can match as well as the direct sound, which comes first."""
    if rate == q.sample_rate:  # the clip's own samples: a clean channel matches them exactly
        clip, offset = q.pcm[spoken[0] : spoken[1]].astype(np.float64), spoken[0]
    else:
        at_rate = _resampled(q.pcm, q.sample_rate, rate)
        offset = round(spoken[0] * rate / q.sample_rate)
        clip = at_rate[offset : round(spoken[1] * rate / q.sample_rate)]
    o = Occurrence(o.question, o.start + round(offset * COARSE_RATE / rate), o.score)
    step = rate / COARSE_RATE
    reach = int(np.ceil(REFINE_SAMPLES * step))
    early = round(EARLIEST_MS * rate / 1000)
    lo = round(o.start * step) - reach - early
    scores = _local_ncc(mic, clip, lo, lo + early + 2 * reach + 1)
    best = early + int(np.argmax(scores[early:]))
    inner = scores[1:-1]
    peaks = np.nonzero((inner >= scores[:-2]) & (inner >= scores[2:]) & (inner >= EARLY_SHARE * scores[best]))[0] + 1
    first = int(peaks[0]) if len(peaks) and peaks[0] < best else best
    return Occurrence(o.question, lo + first - offset, max(float(scores[first]), 0.0))


def _local_ncc(mic: np.ndarray, clip: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """Normalised correlation of ``clip`` with ``mic`` at lags ``lo..hi-1`` (zeros outside the recording)."""
    pad = max(0, -lo)
    segment = mic[max(0, lo) : max(0, hi - 1 + len(clip))]
    segment = np.concatenate((np.zeros(pad), segment, np.zeros(max(0, hi - lo - 1 + len(clip) - pad - len(segment)))))
    lags = hi - lo
    size = 1 << int(np.ceil(np.log2(len(segment) + len(clip))))
    corr = np.fft.irfft(np.fft.rfft(segment, size) * np.conj(np.fft.rfft(clip, size)), size)[:lags]
    cumulative = np.concatenate(([0.0], np.cumsum(np.square(segment))))
    window = cumulative[np.arange(lags) + len(clip)] - cumulative[:lags]
    norm = float(np.sqrt(np.square(clip).sum()))
    return np.where(window > 0, corr / (norm * np.sqrt(np.maximum(window, 1e-300))), 0.0)


def _emphasised(x: np.ndarray) -> np.ndarray:
    """Pre-emphasis (a first difference): speech's strong low frequencies made to weigh less, so another
    utterance of the same voice (an answer) matches a question far less (measured here: false matches
    fell from 0.37 to 0.2, true ones in a room stayed above 0.44)."""
    return np.concatenate((x[:1], x[1:] - PRE_EMPHASIS * x[:-1])) if len(x) else x


def _resampled(x: np.ndarray, rate: int, to: int) -> np.ndarray:
    if rate == to:
        return np.asarray(x, dtype=np.float64)
    return np.asarray(soxr.resample(np.asarray(x, dtype=np.float64), rate, to, quality="HQ"), dtype=np.float64)
