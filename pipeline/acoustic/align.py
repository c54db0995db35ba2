"""Where each question was played in a recording: its band pattern found, its direct sound placed by the waveform.

The lab knows what it played, not when the sound card played it: the delay of an output and an input path
is unknown and differs per machine, so every occurrence is found in the microphone channel (or the single
room microphone). Only the clip's speech is matched (from its first audible sample to its end of speech): in
a room the answer may already play in the clip's trailing silence. Two passes:

- **find** (``bands``): each clip's log band energies correlated with the recording's, a score that a room's
  reverberation and noise lower far less than they lower a waveform's match; its lag is a 10 ms frame, and
  reverberation pulls it late.
- **place**: near that lag (``REACH_MS`` either side), the waveform's phase-transform correlation (GCC-PHAT)
  at the recording's own rate, so a clean channel gives the exact sample, and in a room the direct sound is
  preferred to a reflection that matches as well (an earlier peak nearly as strong, within ``EARLIEST_MS``).

Two ways to say what was played. ``find_occurrences``: any question, any number of times, each match above
``FREE_SCORE``, the stronger winning where two overlap; a question below it is not seen at all. ``find_played``:
the order the questions were played in (``schedule``, the replay's own order), every one of them accounted for:
the occurrences chosen are the order-keeping set of matches above ``PLAYED_SCORE`` with the largest summed
score, less any that scores under ``RELATIVE_SCORE`` of the recording's median (another utterance where the
question was expected), and a question none of them explains is ``Missed``, with its best score and where it
most likely was (between its neighbours): the answer before it is looked for only up to there. On a clean
channel the end of speech is placed by the very frame that holds it (``speech_end_sample``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import soxr

from pipeline.acoustic import bands
from pipeline.acoustic.questions import PlayedQuestion
from pipeline.acoustic.recording import AUDIBLE
from pipeline.acoustic.schedule import Slot, chosen
from pipeline.events import FRAME_MS

# band-pattern scores, measured on 30- and 32-turn recordings through simulated rooms (RT60 0.2-0.8 s, 1.5 and 3 m,
# SNR 30-10 dB, white and pink noise, 8-48 kHz; scripts/bench_acoustic.py): a question where it was played scored
# 0.36-1.0 (the lowest at 8 kHz, RT60 0.8 s, 3 m, SNR 10 dB), another question or an answer of the same voices
# anywhere in the recording at most 0.62 (0.59 in a dry room); another utterance of about the same length where the
# question was expected, 0.39: the order cannot tell that one from the question
FREE_SCORE = 0.65  # found with nothing else known: above any other speech's score
PLAYED_SCORE = 0.3  # found where the played order allows it: the worst room's true matches kept
# and at least this share of the recording's median match: in the bench's 34 rooms the weakest true match scored 0.71
# of its recording's median or more; a Chinese clip said where an English question was expected, 0.39
RELATIVE_SCORE = 0.55
TYPICAL_FROM = 3  # matches needed for a median worth comparing with
MOST_PER_PLAYING = 3  # candidates kept per time a question was played, for the order to choose from
FRAME_JITTER_MS = 20.0  # how far the frame holding the end of speech may lie from where the whole clip puts it
EXACT_COPY = 0.99  # that frame's match on a clean channel (a room's reverberation never reaches it)
REACH_MS = 50.0  # how far from the band pattern's lag the waveform's is looked for (reverberation pulls it late)
EARLIEST_MS = 30.0  # how much earlier than the best match the direct sound may be (a reflection's extra path: 10 m)
# an earlier peak this close to the best is the direct sound: at 3 m (the bench's rooms), a reflection 2.8 ms after it
# peaked higher for up to 11 of 32 questions, and the whitening leaves speech's own repeats (its pitch) far lower
EARLY_SHARE = 0.8
# the phase transform weighs every frequency alike, so those where the clip has no sound (under this share of its
# strongest: -60 dB) are left out, or a high-rate room's noise there buries the peak: at 48 kHz (answers of 16 kHz
# audio, nothing over 8 kHz), RT60 0.8 s, SNR 10 dB and 3 m, one of 32 answers was placed 58.8 ms off without it;
# at -40 dB, up to 11 of 32 questions at 3 m were placed on a reflection 2.8 ms late (scripts/bench_acoustic.py)
CLIP_FLOOR = 1e-6


@dataclass(frozen=True, slots=True)
class Occurrence:
    """One playing of a question: the question's index, the recording sample of the clip's first sample, and
    how well it matched (0..1: the band pattern's score)."""

    question: int
    start: int
    score: float


@dataclass(frozen=True, slots=True)
class Missed:
    """A question played but not found: its index, its best score between the occurrences found either side of
    it, the recording sample of the clip's first sample where that best score puts it, and the score a match
    needed in this recording."""

    question: int
    start: int
    score: float
    needed: float


class _Scores:
    """Every question's band-pattern score against one recording, made once."""

    def __init__(self, mic: np.ndarray, rate: int, questions: Sequence[PlayedQuestion]) -> None:
        self.rate = rate
        spoken = [spoken_part(q) for q in questions]
        recording = bands.band_energies(mic, rate)
        self.scores = []
        self.lengths = []
        for q, (lo, hi) in zip(questions, spoken, strict=True):
            clip = bands.band_energies(q.pcm[lo:hi], q.sample_rate)
            self.lengths.append(clip.shape[1])
            self.scores.append(bands.band_ncc(recording, clip))
        self.offsets = [lo * rate / q.sample_rate for q, (lo, _) in zip(questions, spoken, strict=True)]

    def start(self, question: int, lag: int) -> int:
        """The recording sample of the clip's first sample, for a band lag of the question's speech."""
        return round(lag * bands.HOP * self.rate / bands.RATE - self.offsets[question])

    def lag(self, question: int, start: int) -> int:
        return round((start + self.offsets[question]) * bands.RATE / (bands.HOP * self.rate))


def find_occurrences(mic: np.ndarray, rate: int, questions: Sequence[PlayedQuestion]) -> list[Occurrence]:
    """Every question's occurrences in ``mic`` (at ``rate``) that score above ``FREE_SCORE``, in time order."""
    if not len(mic) or not questions:
        return []
    scored = _Scores(mic, rate, questions)
    found = [
        Occurrence(i, scored.start(i, lag), score)
        for i, s in enumerate(scored.scores)
        for lag, score in _peaks(s, scored.lengths[i], FREE_SCORE)
    ]
    kept = _without_overlaps(found, questions, rate)
    mic = np.asarray(mic, dtype=np.float64)
    return sorted((_placed(o, mic, rate, questions[o.question]) for o in kept), key=lambda o: o.start)


def find_played(
    mic: np.ndarray, rate: int, questions: Sequence[PlayedQuestion], schedule: Sequence[int]
) -> list[Occurrence | Missed]:
    """One entry per question played, in ``schedule``'s order (indices into ``questions``): where it was found, or
    ``Missed``."""
    if not len(mic) or not schedule:
        return [Missed(q, 0, 0.0, PLAYED_SCORE) for q in schedule]
    scored = _Scores(mic, rate, questions)
    plays = Counter(schedule)
    candidates = [
        Occurrence(i, scored.start(i, lag), score)
        for i in sorted(plays)
        for lag, score in _peaks(scored.scores[i], scored.lengths[i], PLAYED_SCORE, MOST_PER_PLAYING * plays[i] + 1)
    ]
    slots = [
        Slot(c.question, c.start, c.start + _speech_samples(questions[c.question], rate), c.score) for c in candidates
    ]
    picks, bar = _typical(chosen(schedule, slots), candidates)
    mic = np.asarray(mic, dtype=np.float64)
    out: list[Occurrence | Missed] = []
    before: Occurrence | None = None  # the last question found so far
    for k, pick in enumerate(picks):
        if pick is not None:
            before = _placed(candidates[pick], mic, rate, questions[schedule[k]])
            out.append(before)
            continue
        after = next((candidates[p] for p in picks[k + 1 :] if p is not None), None)
        out.append(_missed(scored, schedule[k], before, after, questions, rate, bar))
    return out


def _typical(picks: list[int | None], candidates: Sequence[Occurrence]) -> tuple[list[int | None], float]:
    """The picks that score at least ``RELATIVE_SCORE`` of the recording's median pick (one room, one voice: its
    questions score alike), the others dropped, and the bar they had to reach. Another utterance of about the
    same length, said where a question was expected, is taken by the order but scores far under the rest."""
    scores = [candidates[p].score for p in picks if p is not None]
    if len(scores) < TYPICAL_FROM:
        return picks, PLAYED_SCORE
    bar = max(PLAYED_SCORE, RELATIVE_SCORE * float(np.median(scores)))
    return [p if p is not None and candidates[p].score >= bar else None for p in picks], bar


def _missed(
    scored: _Scores,
    question: int,
    before: Occurrence | None,
    after: Occurrence | None,
    questions: Sequence[PlayedQuestion],
    rate: int,
    bar: float,
) -> Missed:
    """Where a question not found most likely was: its best score after the previous occurrence's speech and
    before the next one's start."""
    s = scored.scores[question]
    lo = 0 if before is None else scored.lag(question, before.start + _speech_samples(questions[before.question], rate))
    hi = len(s) if after is None else scored.lag(question, after.start - _speech_samples(questions[question], rate))
    lo, hi = max(0, min(lo, len(s))), max(0, min(hi, len(s)))
    if hi <= lo:  # no room between its neighbours: it lies where the previous one's speech ended
        return Missed(question, scored.start(question, lo), 0.0, bar)
    best = lo + int(np.argmax(s[lo:hi]))
    return Missed(question, scored.start(question, best), max(0.0, float(s[best])), bar)


def spoken_part(q: PlayedQuestion) -> tuple[int, int]:
    """The clip's samples from its first audible one to its end of speech: what is matched. Its silences are
    left out: in a room the answer may already play during the clip's trailing silence, and would only
    lower the match."""
    end = min(len(q.pcm), round(q.speech_end_s * q.sample_rate))
    loud = np.nonzero(np.abs(q.pcm[:end]) > AUDIBLE)[0]
    return (int(loud[0]), end) if len(loud) else (0, end)


def _speech_samples(q: PlayedQuestion, rate: int) -> int:
    return round(q.speech_end_s * rate)


def _peaks(scores: np.ndarray, length: int, least: float, most: int | None = None) -> list[tuple[int, float]]:
    """Lags scoring at least ``least``, strongest first (``most`` of them at most), each at least half a clip
    from a stronger one."""
    scores = scores.copy()
    peaks: list[tuple[int, float]] = []
    half = max(1, length // 2)
    while len(scores) and (most is None or len(peaks) < most):
        lag = int(np.argmax(scores))
        if scores[lag] < least:
            break
        peaks.append((lag, float(scores[lag])))
        scores[max(0, lag - half) : lag + half] = -np.inf
    return peaks


def _without_overlaps(found: list[Occurrence], questions: Sequence[PlayedQuestion], rate: int) -> list[Occurrence]:
    """The strongest matches whose speech does not overlap a stronger match's."""
    kept: list[tuple[int, int, Occurrence]] = []
    for o in sorted(found, key=lambda o: -o.score):
        begin, end = o.start, o.start + _speech_samples(questions[o.question], rate)
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
        own = resampled(q.pcm, q.sample_rate, rate)[round(k * frame * rate / q.sample_rate) :][
            : round(len(own) * rate / q.sample_rate)
        ]
    predicted = o.start + round(k * FRAME_MS * rate / 1000)
    reach = round(FRAME_JITTER_MS * rate / 1000)
    scores = local_ncc(mic, own, predicted - reach, predicted + reach + 1)
    best = int(np.argmax(scores))
    if scores[best] < EXACT_COPY:
        return fallback
    return predicted - reach + best + round((end_ms - k * FRAME_MS) * rate / 1000)


def _placed(o: Occurrence, mic: np.ndarray, rate: int, q: PlayedQuestion) -> Occurrence:
    """The band pattern's lag made exact at the recording's rate: the clip's direct sound near it
    (``direct_sound``). The score stays the band pattern's."""
    lo_s, hi_s = spoken_part(q)
    at_rate = resampled(q.pcm, q.sample_rate, rate) if rate != q.sample_rate else q.pcm.astype(np.float64)
    offset = round(lo_s * rate / q.sample_rate)
    clip = at_rate[offset : round(hi_s * rate / q.sample_rate)]
    return Occurrence(o.question, direct_sound(mic, rate, clip, o.start + offset) - offset, o.score)


def direct_sound(mic: np.ndarray, rate: int, clip: np.ndarray, near: int) -> int:
    """Where ``clip`` begins in ``mic`` within ``REACH_MS`` of ``near``: the peak of their phase-transform
    correlation, or an earlier peak nearly as high (up to ``EARLIEST_MS`` before; in a room a reflection can
    match as well as the direct sound, which comes first)."""
    reach, early = round(REACH_MS * rate / 1000), round(EARLIEST_MS * rate / 1000)
    lo = near - reach - early
    lags = early + 2 * reach + 1
    segment = mic[max(0, lo) : lo + lags + len(clip)]
    scores = whitened(segment, clip, min(lo, 0), min(lo, 0) + lags)
    best = early + int(np.argmax(scores[early:]))
    inner = scores[1:-1]
    peaks = np.nonzero((inner >= scores[:-2]) & (inner >= scores[2:]) & (inner >= EARLY_SHARE * scores[best]))[0] + 1
    return lo + (int(peaks[0]) if len(peaks) and peaks[0] < best else best)


def whitened(mic: np.ndarray, clip: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """The phase-transform correlation (GCC-PHAT) of ``clip`` with ``mic`` at lags ``lo..hi-1`` (zeros outside the
    recording): every frequency where the clip has sound weighs the same, so a room's strong low notes and its
    reflections' smeared copies of them do not pull the peak off the direct sound."""
    segment = _padded(mic, len(clip), lo, hi)
    size = 1 << int(np.ceil(np.log2(len(segment) + len(clip))))
    own = np.fft.rfft(clip, size)
    cross = np.fft.rfft(segment, size) * np.conj(own)
    power = np.square(np.abs(own))
    sounding = power > CLIP_FLOOR * power.max()
    return np.fft.irfft(sounding * cross / np.maximum(np.abs(cross), 1e-12 * np.abs(cross).max()), size)[: hi - lo]


def _padded(mic: np.ndarray, length: int, lo: int, hi: int) -> np.ndarray:
    """``mic`` from ``lo`` to ``hi - 1 + length``, zeros where that lies outside it."""
    pad = max(0, -lo)
    segment = mic[max(0, lo) : max(0, hi - 1 + length)]
    return np.concatenate((np.zeros(pad), segment, np.zeros(max(0, hi - lo - 1 + length - pad - len(segment)))))


def local_ncc(mic: np.ndarray, clip: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """Normalised correlation of ``clip`` with ``mic`` at lags ``lo..hi-1`` (zeros outside the recording)."""
    segment = _padded(mic, len(clip), lo, hi)
    lags = hi - lo
    size = 1 << int(np.ceil(np.log2(len(segment) + len(clip))))
    corr = np.fft.irfft(np.fft.rfft(segment, size) * np.conj(np.fft.rfft(clip, size)), size)[:lags]
    cumulative = np.concatenate(([0.0], np.cumsum(np.square(segment))))
    window = cumulative[np.arange(lags) + len(clip)] - cumulative[:lags]
    norm = float(np.sqrt(np.square(clip).sum()))
    return np.where(window > 0, corr / (norm * np.sqrt(np.maximum(window, 1e-300))), 0.0)


def resampled(x: np.ndarray, rate: int, to: int) -> np.ndarray:
    """``x`` at ``to`` Hz (as floats; itself where it is at that rate already)."""
    if rate == to:
        return np.asarray(x, dtype=np.float64)
    return np.asarray(soxr.resample(np.asarray(x, dtype=np.float64), rate, to, quality="HQ"), dtype=np.float64)
