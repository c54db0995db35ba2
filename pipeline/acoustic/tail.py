"""What the question itself still sounds like after its end of speech: its clip through the room's decay.

In a room a question does not stop when its speech ends: its reverberation dies away for as long as the
room's RT60, and whatever the clip holds after the words (a breath, background noise) is played and
reverberates too. None of that is the answer. The lab has the clip, so it predicts that sound from the
clip's power envelope where it was found (``E``, the clip high-passed as the recording is): ``d * E`` (the
direct sound) + ``e * E`` spread over ``EARLY_MS`` (early reflections, which carry a word's end on at nearly its
level) + ``r * E`` smeared by an exponential decay falling 60 dB in ``T`` (the diffuse tail) + the noise floor.
``T`` is the room's, one for the recording (``room_decay``: the one of ``DECAYS_S`` that fits every question
best); the gains are each question's own, by non-negative least squares on the error relative to the model
(reweighted: relative to what was heard, the noise's dips would pull the fit low), over its speech and the
first ``AFTER_MS`` after it, which weigh as much together as the speech (the tail decides what is predicted
after); both from the question's envelopes, made once (``question_sound``). After the end of speech the
prediction less the floor (the clip's own trailing sound and the room's tail of all of it) is what
``onset.room_span`` adds to the noise floor: an answer must rise above both.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import soxr

from pipeline.acoustic.onset import envelope, rumble_removed
from pipeline.acoustic.questions import PlayedQuestion
from pipeline.acoustic.recording import AUDIBLE

DECAYS_S = tuple(float(t) for t in np.geomspace(0.05, 1.6, 24))  # the RT60s tried: from a dry booth to a hall
AFTER_MS = 100.0  # after the end of speech, only the question's tail: no device answers this soon (estimated)
EARLY_MS = 50.0  # early reflections: the first 50 ms after the direct sound (the C50 boundary)
FIT_ROUNDS = 3  # reweighted least squares: the first relative to what was heard, the rest to the fit before
SPAN_RT60 = 2.0  # the decay's kernel runs this many RT60s (120 dB: nothing of it is left)


@dataclass(frozen=True, slots=True)
class Placed:
    """A question where it was found: its clip, the recording sample of the clip's first sample, its end of
    speech, and where the next sound to measure begins (the tail is predicted up to there)."""

    question: PlayedQuestion
    start: int
    end: int
    stop: int
    high_passed: bool = False  # the recording's rumble was taken out (onset.without_rumble): the clip's is too


@dataclass(frozen=True, slots=True)
class QuestionSound:
    """A placed question's power envelopes, made once for both the room's decay and its own tail: the
    recording's and the clip's from the clip's start to ``placed.stop`` (a millisecond a value), the part to fit
    on (from the clip's first audible sample to ``AFTER_MS`` past its end of speech), and the recording's
    length."""

    placed: Placed
    heard: np.ndarray
    own: np.ndarray
    fit: slice
    length: int


def question_sound(mic: np.ndarray, rate: int, p: Placed) -> QuestionSound:
    """``p``'s envelopes in ``mic``."""
    hop = max(1, rate // 1000)
    stop = min(p.stop, len(mic))
    fit_to = min(p.stop, p.end + round(AFTER_MS * rate / 1000))
    clip = np.asarray(p.question.pcm, dtype=np.float64)
    if rate != p.question.sample_rate:
        clip = np.asarray(soxr.resample(clip, p.question.sample_rate, rate, quality="HQ"), dtype=np.float64)
    if p.high_passed:  # as the recording it is compared with was
        clip = rumble_removed(clip, rate)
    lo = max(0, p.start)
    played = np.zeros(max(0, stop - lo))
    part = clip[lo - p.start : lo - p.start + len(played)]
    played[: len(part)] = part
    recorded = envelope(np.asarray(mic[lo:stop], dtype=np.float64), rate, hop)
    own = envelope(played, rate, hop)
    loud = np.nonzero(np.abs(part) > AUDIBLE)[0]
    first = int(loud[0]) // hop if len(loud) else 0
    fit = slice(first, min(len(own), max(first + 1, (fit_to - lo) // hop)))
    return QuestionSound(p, recorded, own, fit, len(mic))


def room_decay(sounds: Sequence[QuestionSound], rate: int, floor: float) -> float:
    """The room's RT60 as the recording shows it: the one of ``DECAYS_S`` that best explains every question's
    sound together, while it speaks and for ``AFTER_MS`` after (its reverberation dying before any answer)."""
    errors = np.zeros(len(DECAYS_S))
    for h in sounds:
        if h.fit.stop - h.fit.start < 2:
            continue
        for n, t60 in enumerate(DECAYS_S):
            errors[n] += _fit(h.own, h.heard, h.fit, t60, max(1, rate // 1000) / rate, floor)[0]
    return DECAYS_S[int(np.argmin(errors))]


def question_tail(h: QuestionSound, rate: int, floor: float, t60: float) -> np.ndarray:
    """The question's predicted power (no noise) at every millisecond's sample ``end, end + hop, ...`` before
    ``stop``, in a room whose RT60 is ``t60`` (``room_decay``)."""
    hop, p = max(1, rate // 1000), h.placed
    if p.stop <= p.end or p.end <= p.start:
        return np.zeros(max(0, -(-(p.stop - p.end) // hop)))
    _, prediction = _fit(h.own, h.heard, h.fit, t60, hop / rate, floor, (max(0, p.end - max(0, p.start)) // hop))
    at = (p.end - max(0, p.start)) / hop + np.arange(-(-(min(p.stop, h.length) - p.end) // hop))
    return np.asarray(np.interp(at, np.arange(len(prediction)), prediction))


def _fit(
    own: np.ndarray, heard: np.ndarray, fit: slice, t60: float, step_s: float, floor: float, ended: int | None = None
) -> tuple[float, np.ndarray]:
    """How far (mean squared log ratio, over ``fit``) ``d * own + e * own's early reflections + r * own smeared by
    a ``t60`` decay + floor`` is from ``heard`` at its best gains, and that prediction without the floor over the
    whole span. From ``ended`` (the end of speech) on, the values weigh as much together as the speech before
    it: the few milliseconds of tail decide what is predicted after it."""
    observed = np.maximum(heard[fit], floor)
    bases = np.stack((own, _early(own, step_s), _smeared(own, t60, step_s)), axis=1)
    weights = np.ones(len(observed))
    if ended is not None and fit.start < ended < fit.stop:
        weights[ended - fit.start :] = np.sqrt((ended - fit.start) / (fit.stop - ended))
    scale = observed
    for _ in range(FIT_ROUNDS):  # relative to the model, not the noisy observation, which would pull the fit low
        parts = bases[fit] / scale[:, None] * weights[:, None]
        gains = _non_negative(parts, (observed - floor) / scale * weights)
        model = bases[fit] @ gains + floor
        scale = model
    return float(np.mean(np.square(np.log(model / observed)))), np.asarray(bases @ gains)


def _early(own: np.ndarray, step_s: float) -> np.ndarray:
    """``own`` smeared evenly over ``EARLY_MS``: the early reflections, which arrive within it at nearly the
    direct sound's level (near a wall, the floor, the desk), so a word's end is heard that much longer."""
    n = max(1, round(EARLY_MS / 1000 / step_s))
    return np.asarray(np.convolve(own, np.full(n, 1.0 / n))[: len(own)])


def _smeared(own: np.ndarray, t60: float, step_s: float) -> np.ndarray:
    """``own`` convolved with a decay falling 60 dB in ``t60`` (unit area), causal, as long as ``own``."""
    n = min(len(own), max(2, int(SPAN_RT60 * t60 / step_s)))
    kernel = 10 ** (-6.0 * np.arange(n) * step_s / t60)
    kernel /= kernel.sum()
    size = 1 << int(np.ceil(np.log2(len(own) + n)))
    return np.asarray(np.fft.irfft(np.fft.rfft(own, size) * np.fft.rfft(kernel, size), size)[: len(own)])


def _non_negative(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Least squares ``a @ x = b`` with ``x >= 0`` for a few unknowns: the best of the solutions over every subset
    of them whose gains all come out non-negative."""
    best: tuple[float, np.ndarray] = (float(b @ b), np.zeros(a.shape[1]))
    for subset in itertools.chain.from_iterable(itertools.combinations(range(a.shape[1]), k) for k in (1, 2, 3)):
        cols = list(subset)
        x, *_ = np.linalg.lstsq(a[:, cols], b, rcond=None)
        if np.all(x >= 0):
            full = np.zeros(a.shape[1])
            full[cols] = x
            residual = float(np.sum(np.square(a @ full - b)))
            if residual < best[0]:
                best = (residual, full)
    return best[1]
