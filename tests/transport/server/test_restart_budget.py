"""The supervisor's restart limit on given times: at most R restarts in any W seconds, every process's together."""

from __future__ import annotations

import math

import pytest

from pipeline.transport.server.restart_budget import RestartBudget, RestartLimit


def test_at_most_r_restarts_in_any_window_of_w_seconds() -> None:
    budget = RestartBudget(RestartLimit(restarts=3, window_s=10.0))
    assert [budget.take(t) for t in (0.0, 1.0, 2.0)] == [True, True, True]
    assert budget.take(9.999) is False  # a fourth inside the window is refused, and not counted
    assert budget.in_window(9.999) == 3
    # the restart at 0.0 counts until 10.0, that instant excluded: one place frees then, and only one
    assert budget.take(10.0) is True
    assert budget.take(10.5) is False
    assert budget.in_window(11.0) == 2  # 1.0 has left; 2.0 and 10.0 remain
    assert [budget.take(t) for t in (11.0, 11.5)] == [True, False]


def test_a_refused_restart_does_not_extend_the_wait() -> None:
    # refusals are not taken: a process dying in a loop is given up on, not pushed ever later
    budget = RestartBudget(RestartLimit(restarts=1, window_s=5.0))
    assert budget.take(100.0) is True
    assert [budget.take(t) for t in (101.0, 102.0, 104.9)] == [False, False, False]
    assert budget.take(105.0) is True


def test_no_restarts_refuses_the_first() -> None:
    assert RestartBudget(RestartLimit(restarts=0, window_s=60.0)).take(0.0) is False


def test_the_defaults_and_what_is_refused() -> None:
    assert RestartLimit() == RestartLimit(restarts=5, window_s=300.0)
    with pytest.raises(ValueError, match="--max-restarts -1: 0 or more"):
        RestartLimit(restarts=-1)
    for bad in (0.0, -1.0, math.inf, math.nan):
        with pytest.raises(ValueError, match="--restart-window-s"):
            RestartLimit(window_s=bad)
