"""Where a known answer came out in a room: what the device's speaker was fed, found in the room microphone by
its waveform.

A room microphone alone hears an answer once it rises out of the noise (``onset.room_span``); an answer that
begins softly (a breath, a fricative) under a noisy room's level is found only where it rises, tens of
milliseconds late: until then a detector that does not know the answer has nothing to tell it from the noise by.
Where the recording also holds what the speaker was fed (layout ``room-feed``: a tap of the speaker's line, or the
emulator's own speaker channel; clean, its noise under the audibility threshold, so the feed's own first audible
sample is the answer's), the answer is known: its first ``CLIP_MS`` from its first audible sample, correlated
with the room (``align.direct_sound``: the direct sound, not a reflection), says where that first sample arrived,
however far under the noise it lies (the correlation sums the whole clip). The feed's timing is not trusted, only its
waveform: its lag to the room (an output's buffering, the air) is estimated once per recording (``feed_lag``,
a phase-transform correlation of the whole recording at ``LAG_RATE``), only to tell which of the feed's sounds
is which turn's answer, and each answer is then placed on its own, within ``align.REACH_MS`` of that.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pipeline.acoustic.align import direct_sound, local_ncc, resampled, whitened
from pipeline.acoustic.onset import clean_span

LAG_RATE = 8000  # the recording-wide lag is rough (a sample at 8 kHz): each answer is placed at the full rate
MOST_LAG_MS = 2000.0  # how far the room may lag the feed, or lead it (an output's buffering is under a second)
# how much of an answer, from its first audible sample, is looked for in the room: at 3 m, RT60 0.8 s and SNR 10 dB
# (the bench's hardest room), 250 ms placed 10 of 32 answers up to 80 ms off, 500 ms and more every one within
# 0.06 ms; four times that, for answers and rooms harder than the bench's
CLIP_MS = 2000.0
# an answer's clip where it came out scored 0.095-0.67 in the bench's 34 rooms (the lowest at 3 m, RT60 0.8 s, SNR
# 10 dB, soft onsets), a synthetic voice's (tests/acoustic/test_feed.py: harmonics, 3 m, RT60 0.6 s, SNR 10 dB)
# 0.059-0.078; the same clips where the speaker played nothing (each room rendered without it) at most 0.038 (speech,
# at 8 kHz) and 0.008 (the synthetic voice): the bar lies between
HEARD_SCORE = 0.05
# the score is taken at this rate where the recording's is higher: a room's noise above 8 kHz, where a voice has little,
# would otherwise lower it
SCORE_RATE = 16000
PRE_EMPHASIS = 0.95
REFLECTED_MS = 30.0  # how long after the direct sound a reflection's match is still the answer heard


@dataclass(frozen=True, slots=True)
class Fed:
    """An answer of the feed found in the room: its first and last audible sample there (room samples), where
    the feed held it, and how well its waveform matched."""

    first: int
    last: int
    fed_at: int
    score: float


@dataclass(frozen=True, slots=True)
class Unheard:
    """An answer the feed holds that the room did not: where the feed held it, and its best match there."""

    fed_at: int
    near: int
    score: float


def feed_lag(room: np.ndarray, feed: np.ndarray, rate: int) -> int | None:
    """How many samples after the feed the room hears it (negative: before): the peak of the two channels'
    phase-transform correlation (``align.whitened``) within ``MOST_LAG_MS``, at ``LAG_RATE``. None when the feed
    is silent."""
    if not len(feed) or not np.any(feed):
        return None
    most = round(MOST_LAG_MS * LAG_RATE / 1000)
    scores = whitened(resampled(room, rate, LAG_RATE), resampled(feed, rate, LAG_RATE), -most, most + 1)
    return round((int(np.argmax(scores)) - most) * rate / LAG_RATE)


def answer_heard(
    room: np.ndarray, feed: np.ndarray, rate: int, lag: int, begin: int, stop: int
) -> Fed | Unheard | None:
    """The answer the feed holds for the room's ``[begin, stop)`` (after a question's end of speech, before the
    next question), found in the room; None when the feed holds no sound there."""
    span = clean_span(feed, begin - lag, stop - lag)
    if span is None:
        return None
    clip = feed[span.first : min(span.last + 1, span.first + round(CLIP_MS * rate / 1000))]
    at = direct_sound(room, rate, clip, span.first + lag)
    score = _heard_score(room, emphasised(clip), rate, at)
    if score < HEARD_SCORE:
        return Unheard(span.first, span.first + lag, score)
    return Fed(at, span.last + at - span.first, span.first, score)


def _heard_score(room: np.ndarray, clip: np.ndarray, rate: int, at: int) -> float:
    """How well the room holds ``clip`` (pre-emphasised) from its direct sound at ``at`` on: the best normalised
    correlation over the next ``REFLECTED_MS`` (in a far, reverberant room a reflection can match better than the
    direct sound), both at ``SCORE_RATE`` or below."""
    to = min(rate, SCORE_RATE)
    after = round(REFLECTED_MS * rate / 1000)
    heard = resampled(emphasised(room[max(0, at) : at + after + len(clip)]), rate, to)
    clip = resampled(clip, rate, to)
    return float(np.max(local_ncc(heard, clip, 0, max(1, len(heard) - len(clip) + 1))))


def emphasised(x: np.ndarray) -> np.ndarray:
    """Pre-emphasis (a first difference): speech's strong low frequencies, which a room's reverberation holds
    longest, made to weigh less in the score, so what it measures is the answer's own sound."""
    x = np.asarray(x, dtype=np.float64)
    return np.concatenate((x[:1], x[1:] - PRE_EMPHASIS * x[:-1])) if len(x) else x
