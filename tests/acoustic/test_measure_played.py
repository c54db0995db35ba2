"""A recording measured in the order its questions were played (``schedule``): every question played is exactly
one row; one that cannot be found is a failed row with its best score, and the turn before it ends where it
most likely began, never running over it and its answer."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import soundfile

from pipeline.acoustic.measure import measure_recording
from pipeline.acoustic.schedule import played_order
from tests.acoustic_synth import build, of_language

PLAN = [(0, 0.9, 1.2), (1, 1.1, 1.0), (2, 0.8, 1.4), (3, 1.0, 1.1)]


def unheard(tmp_path: Path, hidden: int) -> tuple[Path, list[int]]:
    """A single microphone (the stereo recording mixed, quiet noise) in which the ``hidden``-th question was never
    heard (its speech gone: a microphone that dropped out), its answer still there; the clips' first samples."""
    asked = of_language("en", 4)
    built = build(asked, PLAN, seed=4)
    samples = built.samples.astype(np.float64)
    turn = built.turns[hidden]
    start = turn.speech_end - round(asked[hidden].speech_end_s * built.rate)
    samples[start : turn.speech_end, 0] = 0.0
    mono = samples.sum(axis=1) / 32768 + np.random.default_rng(9).standard_normal(len(samples)) * 0.0005
    path = tmp_path / "unheard.wav"
    soundfile.write(str(path), np.clip(mono, -1, 1), built.rate, subtype="PCM_16")
    return path, [
        t.speech_end - round(asked[i].speech_end_s * built.rate) for (i, _, _), t in zip(PLAN, built.turns, strict=True)
    ]


def test_every_question_played_is_one_row_and_a_missed_one_fails_with_its_best_score(tmp_path: Path) -> None:
    path, starts = unheard(tmp_path, 2)
    rows = measure_recording(path, of_language("en", 4), layout="mono", schedule=played_order(4, 1))
    assert [(r.question_id, r.round) for r in rows] == [(q.question_id, 1) for q in of_language("en", 4)]
    assert [r.ok for r in rows] == [True, True, False, True]
    assert "'en03' (round 1) was played but not found: its best match scored 0." in rows[2].error
    assert str(path) in rows[2].error
    # the turn before it: its silence measured, its end not (it cannot be told from the missed question's), and
    # its note says so
    before = rows[1]
    assert "where the next question ('en03', not found) most likely began; its end not measured" in before.note
    assert before.first_audible_s is not None and before.first_audible_s * 16000 < starts[2]
    assert before.last_audible_s is None and before.whole_turn_ms is None
    assert rows[3].speech_end_s is not None and rows[3].ok


def test_without_the_order_a_missed_question_is_not_seen(tmp_path: Path) -> None:
    """What ``--rounds`` is for: measured without the order, the question never heard has no row at all and the
    turn before it runs on over its answer."""
    path, starts = unheard(tmp_path, 2)
    rows = measure_recording(path, of_language("en", 4), layout="mono")
    assert [r.question_id for r in rows] == ["en01", "en02", "en04"]
    assert rows[1].last_audible_s is not None and rows[1].last_audible_s * 16000 > starts[2]


def swapped(tmp_path: Path, hidden: int) -> tuple[Path, list[int]]:
    """A single microphone in which the ``hidden``-th question was never said: a Chinese question took its place
    (the person said something else). The answers' first audible samples."""
    asked = [*of_language("en", 4), *of_language("zh", 1)]
    plan = list(PLAN)
    plan[hidden] = (4, *PLAN[hidden][1:])
    built = build(asked, plan, seed=4)
    mono = built.samples.astype(np.float64).sum(axis=1) / 32768
    mono += np.random.default_rng(9).standard_normal(len(mono)) * 0.0005
    path = tmp_path / "swapped.wav"
    soundfile.write(str(path), np.clip(mono, -1, 1), built.rate, subtype="PCM_16")
    return path, [t.first_audible for t in built.turns]


def test_another_utterance_where_a_question_was_expected_is_not_taken_for_it(tmp_path: Path) -> None:
    """The order alone would take it (it scores 0.39, over the 0.3 the worst room's questions need); the recording's
    own questions score near 1.0, so it is a missed question, and the turn before it keeps its silence."""
    path, firsts = swapped(tmp_path, 2)
    rows = measure_recording(path, of_language("en", 4), layout="mono", schedule=played_order(4, 1))
    assert [r.ok for r in rows] == [True, True, False, True]
    assert "'en03' (round 1) was played but not found" in rows[2].error
    assert "a match in this recording needs 0.5" in rows[2].error
    before = rows[1]
    assert before.first_audible_s is not None and abs(before.first_audible_s * 16000 - firsts[1]) <= 16 * 20
    assert before.whole_turn_ms is None
