"""The benchmarks' lane-against-lane figures: a shared stage's median difference with its interval, and
the machine's speed followed over interleaved lanes (exact on made-up rows)."""

from __future__ import annotations

from pipeline.analysis.shared_stages import moved, waves
from pipeline.records.turn_row import TurnRow


def rows(asr: list[float], start_s: float = 0.0, step_s: float = 2.0) -> list[TurnRow]:
    return [
        TurnRow(question_id=f"q{i % 2}", round=2, ok=1, asr_ms=a, turn_start_ns=int((start_s + i * step_s) * 1e9))
        for i, a in enumerate(asr)
    ]


def test_a_stage_that_did_not_move_is_inside_its_interval() -> None:
    same = moved("A", rows([500, 510, 490, 505, 495, 500]), "B", rows([502, 508, 492, 500, 497, 501]), "ASR", "asr_ms")
    assert same is not None and not same.beyond and same.difference == -0.5


def test_a_stage_slower_in_one_lane_moved_beyond_its_interval() -> None:
    slow = moved("A", rows([600, 610, 590, 605, 595, 600]), "B", rows([500, 510, 490, 505, 495, 500]), "ASR", "asr_ms")
    assert slow is not None and slow.beyond and slow.difference == 100.0
    assert "MOVED" in slow.line() and "+20.0%" in slow.line()


def test_too_few_values_give_no_figure() -> None:
    assert moved("A", rows([500]), "B", rows([500, 501]), "ASR", "asr_ms") is None


def test_a_slow_spell_on_every_lane_persists_from_turn_to_turn() -> None:
    # two lanes taking turns; the machine runs 30 % slower in the middle third, whichever lane's turn it is
    speed = [1.0] * 10 + [1.3] * 10 + [1.0] * 10
    a = rows([500 * s for s in speed[0::2]], 0.0, 4.0)
    b = rows([500 * s for s in speed[1::2]], 2.0, 4.0)
    w = waves([a, b], "asr_ms")
    assert w is not None and w.turns == 28  # each lane's first turn left out
    assert w.lag1 > w.shuffled_975 and round(w.high / w.low, 2) == 1.3
    assert "persists from turn to turn" in w.line("ASR")


def test_a_steady_machine_does_not_persist() -> None:
    a = rows([500, 520, 480, 510, 490, 505, 495, 515, 485, 500, 525, 475, 500, 510], 0.0, 4.0)
    b = rows([505, 485, 515, 495, 510, 480, 520, 500, 490, 505, 475, 525, 495, 500], 2.0, 4.0)
    w = waves([a, b], "asr_ms")
    assert w is not None and "does not persist" in w.line("ASR")
