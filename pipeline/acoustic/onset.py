"""Where an answer is audible: its first and last audible sample between the end of speech and the next question.

Two ways, one per kind of channel:

- ``clean_span``: a channel that holds the answer alone (the emulator's speaker channel). Audible is the
  lab's own threshold (``recording.AUDIBLE``: |x| > 64 of int16), sample by sample, so the figure is
  exact and the trace side's "first audible sample" is the same sample.
- ``room_span``: a room microphone, where noise is always there and the question's own reverberation
  is still dying away after its speech ends. Audible is then relative to the recording's noise floor
  (``noise_floor``, measured after ``without_rumble`` takes out a DC offset or infrasonic drift that the
  floor is made of) plus the
  question's own predicted sound (``tail.question_tail``): the envelope (power in ``ENVELOPE_MS`` windows,
  one per millisecond) first waits until it is near that (``QUIET_DB`` above it), then finds where sound
  rises ``ONSET_DB`` above it, stays above ``EDGE_DB`` for ``HOLD_MS`` (a click is not an answer) and has
  risen ``RISE_DB`` over the quietest it has been since the end of speech (in ``SMOOTH_MS`` windows: a
  dying tail's bumps never do, whatever the prediction missed). Where that sound began is a change point:
  walking back over 1 ms blocks, never past that quietest moment, the block from which the summed excess
  power (less ``CHANGE_BIAS``) is within ``CHANGE_SLACK`` of its largest (a CUSUM): the answer's quiet start,
  a little above the noise, still adds to the sum, noise alone takes from it. The answer's end is found the
  same way forwards from its last loud moment, so it includes the room's reverberation of the answer, which
  a listener there hears. Where the sound at that change point is still soft (a breath, a fricative: under
  ``SOFT_DB`` over the floor), a second walk with a lower bias finds where that soft sound began, 1-2 dB over
  the noise; a first sound wholly under the noise is found only when it rises out of it (``Span.rise``
  says where it rose ``ONSET_DB`` over it).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pipeline.acoustic.recording import AUDIBLE

ENVELOPE_MS = 4.0  # short enough to place an edge within a few ms, long enough to average noise (64 samples at 16 kHz)
QUIET_DB = 6.0  # the question's tail has died once the envelope is this close to the floor
# an answer's sound: this far above the floor and the tail (white noise's 4 ms envelope: sd about 0.8 dB, estimated);
# measured on the acoustic bench (scripts/bench_acoustic.py), 6 dB against 10 dB: at SNR 10 dB, RT60 0.8 s and 3 m the
# median error fell from 84 to 28 ms; at SNR 30 dB nothing was taken early
ONSET_DB = 6.0
EDGE_DB = 3.0  # an onset's sound stays this far above the floor for HOLD_MS
CHANGE_BIAS = 0.3  # a block counts towards the answer when its power is over 1.3x the floor's (about 1.1 dB)
# estimated, not measured: white noise's 1 ms blocks at 16 kHz (power sd 0.35 of the floor) drift down by the bias,
# so a chance run of noise adds this much to the sum less than once in a hundred (exp(-2 * 0.3 * 1.0 / 0.35**2))
CHANGE_SLACK = 1.0
# A soft start (espeak-ng's Chinese answers begin with some 40 ms of breath-like sound 1-2 dB over a 20 dB SNR
# room's noise, power 0.3-0.6x the floor's) lies under CHANGE_BIAS, so the walk stops where the voice rises. Where
# the sound just after that point is still soft (under SOFT_DB over the floor for SOFT_MS), a second walk with a
# lower bias and a wider slack looks for that start. Only there: before a sharp onset, a chance run of louder noise
# would be taken for it (estimated: with 1 ms blocks' power sd 0.35 of the floor, a run adds FINE_SLACK to the
# sum about once in 26 walks, exp(-2 * 0.1 * 2.0 / 0.35**2)).
SOFT_DB = 6.0
SOFT_MS = 10.0
FINE_BIAS = 0.1  # a block counts towards a soft start when its power is over 1.1x the floor's (about 0.4 dB)
FINE_SLACK = 2.0
CHANGE_REACH_MS = 150.0  # how far before its loud part an answer's quiet start is looked for (and after, its end)
HOLD_MS = 15.0  # an onset's sound lasts at least this long above EDGE_DB
RISE_DB = 6.0  # an answer's sound rises this far above the quietest since the end of speech
SMOOTH_MS = 20.0  # the windows that rise is seen in: a tail's noise-like swings average out
FLOOR_PERCENTILE = 10.0  # the recording's quietest tenth is noise: between turns, before the first question
FLOOR_BLOCK_MS = 20.0
RUMBLE_DB = 3.0  # the rumble is taken out where it is at least half the noise floor's power
RUMBLE_MS = 16.0  # the high-pass's moving average: its first null at 62.5 Hz, under any voice's pitch


@dataclass(frozen=True, slots=True)
class Span:
    """An answer's first and last audible sample (recording samples, inclusive), and where it rose above the
    noise (``ONSET_DB`` over the floor and the question's tail, held: the rise a level meter sees; on a clean
    channel the first audible sample itself)."""

    first: int
    last: int
    rise: int


def clean_span(x: np.ndarray, begin: int, end: int) -> Span | None:
    """The first and last sample in ``[begin, end)`` above the audibility threshold; None when none is."""
    begin, end = max(0, begin), min(len(x), end)
    if end <= begin:
        return None
    loud = np.nonzero(np.abs(x[begin:end]) > AUDIBLE)[0]
    if not len(loud):
        return None
    return Span(begin + int(loud[0]), begin + int(loud[-1]), begin + int(loud[0]))


def noise_floor(x: np.ndarray, rate: int) -> float:
    """The recording's noise power, never below the audibility threshold's: the mean of its quietest blocks
    (within 3 dB of the tenth percentile: noise alone, between turns and before the first question)."""
    block = max(1, int(rate * FLOOR_BLOCK_MS / 1000))
    usable = len(x) // block * block
    if not usable:
        return AUDIBLE**2
    powers = np.mean(np.square(x[:usable].astype(np.float64)).reshape(-1, block), axis=1)
    quiet = powers[powers <= 2 * np.percentile(powers, FLOOR_PERCENTILE)]
    return max(float(np.mean(quiet)), AUDIBLE**2)


def rumble_removed(x: np.ndarray, rate: int) -> np.ndarray:
    """``x`` less its moving average over the ``RUMBLE_MS`` before each sample: a high-pass that takes out a
    microphone's DC offset and a room's infrasonic drift (nothing of speech is that low), which would otherwise
    sit in the noise floor's power and swing the envelope. The average is of the past only, so a sharp onset
    leaves nothing before itself (a centred one would put a faint copy of it up to 8 ms early)."""
    y = np.asarray(x, dtype=np.float64)
    if not len(y):
        return y
    width = max(1, int(rate * RUMBLE_MS / 1000))
    cumulative = np.concatenate(([0.0], np.cumsum(y)))
    n = np.arange(len(y))
    lo = np.maximum(n - width, 0)
    past = np.where(n > 0, (cumulative[n] - cumulative[lo]) / np.maximum(n - lo, 1), 0.0)
    return np.asarray(y - past)


def without_rumble(x: np.ndarray, rate: int) -> tuple[np.ndarray, bool]:
    """The recording less its DC offset or infrasonic drift (``rumble_removed``) where that is what its noise
    floor is made of (the floor falls by more than ``RUMBLE_DB``), and whether it was taken out. Otherwise the
    recording as it is: the high-pass also thins an answer's last, quiet low notes, which end it earlier."""
    filtered = rumble_removed(x, rate)
    if noise_floor(x, rate) > 10 ** (RUMBLE_DB / 10) * noise_floor(filtered, rate):
        return filtered, True
    return np.asarray(x, dtype=np.float64), False


def room_span(
    x: np.ndarray, rate: int, begin: int, end: int, floor: float, tail: np.ndarray | None = None
) -> Span | None:
    """The answer's first and last audible sample in ``[begin, end)`` of a room microphone whose noise power is
    ``floor``: after the question's tail has died, a sustained rise above the floor. ``tail``, where given, is
    the question's own predicted power at each millisecond from ``begin`` (``tail.question_tail``): the answer
    must rise above the floor and that. None when nothing rises."""
    begin, end = max(0, begin), min(len(x), end)
    hop = max(1, rate // 1000)
    segment = x[begin:end].astype(np.float64)
    env = envelope(segment, rate, hop)
    if not len(env):
        return None
    base = np.full(len(env), floor)
    if tail is not None:
        base[: min(len(tail), len(base))] += tail[: len(base)]
    level = 10 * np.log10(np.maximum(env, 1e-30) / base)
    quiet = np.nonzero(level < QUIET_DB)[0]
    if not len(quiet):
        return None
    hold = max(1, int(HOLD_MS * rate / 1000 / hop))
    smooth = _smoothed_db(segment, rate, hop)
    start = _sustained(level, int(quiet[0]), hold, _risen(smooth, hold))
    if start is None:
        return None
    loud = int(np.nonzero(level[start:] >= ONSET_DB)[0][-1]) + start
    blocks = _block_power(segment, hop) / base[: -(-len(segment) // hop)] - 1.0 - CHANGE_BIAS
    reach = max(1, int(CHANGE_REACH_MS * rate / 1000 / hop))
    # never back past the quietest moment before the rise: what came before it was dying away (the tail)
    trough = int(np.argmin(smooth[: start + 1])) - max(1, int(SMOOTH_MS * rate / 1000 / hop)) // 2
    earliest = max(int(quiet[0]), start - reach, trough)
    first = _change_before(blocks, start, earliest)
    soft = max(1, int(SOFT_MS * rate / 1000 / hop))
    if np.mean(blocks[first : first + soft]) + 1.0 + CHANGE_BIAS < 10 ** (SOFT_DB / 10):
        first = _change_before(blocks + CHANGE_BIAS - FINE_BIAS, first, earliest, FINE_SLACK)
    last = _change_after(blocks, loud, min(len(blocks) - 1, loud + reach))
    return Span(begin + first * hop, min(end - 1, begin + (last + 1) * hop - 1), begin + start * hop)


def _block_power(x: np.ndarray, hop: int) -> np.ndarray:
    """Mean power of each ``hop`` samples (the last block may be shorter)."""
    padded = np.concatenate((np.square(x), np.zeros(-len(x) % hop)))
    counts = np.full(len(padded) // hop, hop, dtype=np.float64)
    if len(x) % hop:
        counts[-1] = len(x) % hop
    return np.asarray(padded.reshape(-1, hop).sum(axis=1) / counts)


def _change_before(excess: np.ndarray, at: int, earliest: int, slack: float = CHANGE_SLACK) -> int:
    """Where the sound found loud at ``at`` began: walking back, the block nearest ``at`` from which the summed
    excess over the floor is within ``CHANGE_SLACK`` of its largest (a CUSUM: noise blocks lower the sum on
    average, the answer's quiet start still raises it; the slack keeps a chance run of louder noise from
    pulling the onset back)."""
    if at <= earliest:
        return at
    sums = np.cumsum(excess[earliest : at + 1][::-1])[::-1]
    near = np.nonzero(sums >= sums.max() - slack)[0]
    return earliest + int(near[-1])


def _change_after(excess: np.ndarray, at: int, latest: int) -> int:
    """Where the sound loud at ``at`` ended: the mirror of ``_change_before``."""
    if latest <= at:
        return at
    sums = np.cumsum(excess[at : latest + 1])
    near = np.nonzero(sums >= sums.max() - CHANGE_SLACK)[0]
    return at + int(near[0])


def envelope(x: np.ndarray, rate: int, hop: int, window_ms: float = ENVELOPE_MS) -> np.ndarray:
    """Mean power in a window of ``window_ms`` centred on every ``hop``-th sample."""
    if not len(x):
        return np.zeros(0)
    width = max(1, int(rate * window_ms / 1000))
    cumulative = np.concatenate(([0.0], np.cumsum(np.square(x.astype(np.float64)))))
    centres = np.arange(0, len(x), hop)
    lo = np.clip(centres - width // 2, 0, len(x))
    hi = np.clip(centres + (width - width // 2), 0, len(x))
    return np.asarray((cumulative[hi] - cumulative[lo]) / np.maximum(hi - lo, 1))


def _sustained(level: np.ndarray, after: int, hold: int, risen: np.ndarray) -> int | None:
    """The first index from ``after`` above ``ONSET_DB`` whose next ``hold`` values stay above ``EDGE_DB``, where
    the sound has ``risen``."""
    above = level >= EDGE_DB
    # runs of `hold` consecutive values above the edge, counted with a cumulative sum
    runs = np.concatenate(([0], np.cumsum(above)))
    for found in np.nonzero(level[after:] >= ONSET_DB)[0]:
        i = int(found) + after
        if i + hold <= len(level) and int(runs[i + hold]) - int(runs[i]) == hold and risen[i]:
            return i
    return None


def _smoothed_db(x: np.ndarray, rate: int, hop: int) -> np.ndarray:
    """The level (dB) in ``SMOOTH_MS`` windows centred every ``hop`` samples: a noise-like tail's swings averaged."""
    return np.asarray(10 * np.log10(np.maximum(envelope(x, rate, hop, SMOOTH_MS), 1e-30)))


def _risen(smooth: np.ndarray, hold: int) -> np.ndarray:
    """Per envelope value: whether the smoothed level over the next ``hold`` values rises ``RISE_DB`` above the
    quietest it has been since the segment began. A reverberant tail only dies away, so however its prediction
    errs, its own bumps are never a rise; an answer, even one starting in the tail, is."""
    quietest = np.minimum.accumulate(smooth)
    padded = np.concatenate((smooth, np.full(hold - 1, -np.inf)))
    ahead = np.lib.stride_tricks.sliding_window_view(padded, hold).max(axis=1) if len(smooth) else smooth
    return np.asarray(ahead - quietest >= RISE_DB)
