"""What was played, in order, and which matches in the recording it was.

The replay plays each device's questions in its own order (``pipeline.fleet.arrivals.rotated``: the fixtures
started at the device's index), round after round (``played_order``); the lab's recording of device N
(``N.wav``) holds them in that order. Knowing it, a match is taken for a question only where the order
allows it (after the question before it, before the one after it), so a reverberant room's weak but
rightly placed match is kept and a stronger match in the wrong place is not: ``chosen`` picks, among the
candidate matches, the set that keeps the order, does not overlap in speech, and has the largest summed
score (a longest-path over the candidates); a question no candidate explains is left out, for the caller
to report as missed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np


class Slot(NamedTuple):
    """A candidate match: the question's index, the recording samples its speech spans, its score."""

    question: int
    begin: int
    end: int
    score: float


def played_order(questions: int, rounds: int, device: int = 0) -> list[int]:
    """The indices of ``questions`` questions as the replay's device ``device`` plays them over ``rounds``: the
    fixtures started at the device's own place (``pipeline.fleet.arrivals.rotated``, which the run uses)."""
    if not questions:
        return []
    k = device % questions
    return [*range(k, questions), *range(k)] * rounds


def chosen(schedule: Sequence[int], candidates: Sequence[Slot]) -> list[int | None]:
    """Per played question (``schedule``: question indices in order), the index of the candidate taken for it,
    or None: the order-keeping, non-overlapping choice with the largest summed score."""
    pairs = [(k, c) for k, q in enumerate(schedule) for c, slot in enumerate(candidates) if slot.question == q]
    if not pairs:
        return [None] * len(schedule)
    slot_of = np.array([k for k, _ in pairs])
    end = np.array([candidates[c].end for _, c in pairs])
    value = np.zeros(len(pairs))
    back = np.full(len(pairs), -1)
    for p, (k, c) in enumerate(pairs):  # pairs are in schedule order: every earlier slot's pairs come first
        before = np.nonzero((slot_of[:p] < k) & (end[:p] <= candidates[c].begin))[0]
        if len(before):
            best = int(before[np.argmax(value[before])])
            value[p], back[p] = value[best], best
        value[p] += candidates[c].score
    picks: list[int | None] = [None] * len(schedule)
    p = int(np.argmax(value))
    while p >= 0:
        picks[int(slot_of[p])] = pairs[p][1]
        p = int(back[p])
    return picks
