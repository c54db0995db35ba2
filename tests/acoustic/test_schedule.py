"""The played order and the order-keeping choice of matches."""

from __future__ import annotations

from pipeline.acoustic.schedule import Slot, chosen, played_order


def test_the_replays_order_starts_each_device_at_its_own_place() -> None:
    assert played_order(3, 2) == [0, 1, 2, 0, 1, 2]
    assert played_order(3, 2, device=1) == [1, 2, 0, 1, 2, 0]


def test_a_stronger_match_in_the_wrong_place_loses_to_the_order() -> None:
    candidates = [Slot(0, 0, 10, 0.9), Slot(1, 5, 15, 0.99), Slot(1, 20, 30, 0.4), Slot(0, 40, 50, 0.5)]
    assert chosen([0, 1, 0], candidates) == [0, 2, 3]


def test_a_question_no_candidate_explains_is_left_out() -> None:
    candidates = [Slot(0, 0, 10, 0.9), Slot(2, 40, 50, 0.8)]
    assert chosen([0, 1, 2], candidates) == [0, None, 1]
    assert chosen([0, 1], []) == [None, None]


def test_the_order_is_the_runs_own() -> None:
    from pipeline.fleet.arrivals import rotated

    for device in range(7):
        assert played_order(5, 1, device) == list(rotated(range(5), device))
