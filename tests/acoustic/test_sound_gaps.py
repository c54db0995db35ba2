"""A recorder's lost sound from its blocks' time info: a lasting step in sample 0's time is audio lost,
one block's late time info is jitter and loses nothing (no sound server needed: the anchors are given)."""

from __future__ import annotations

import pytest

from pipeline.acoustic.sound import lost_s

STEADY = [100.0] * 40


def test_a_steady_clock_loses_nothing() -> None:
    assert lost_s(STEADY) == 0.0


def test_one_late_block_is_jitter_not_loss() -> None:
    zeros = list(STEADY)
    zeros[17] += 0.0031  # the spike that failed CI when the raw steps between blocks were summed
    assert lost_s(zeros) == 0.0


def test_a_lasting_step_is_the_sound_lost() -> None:
    zeros = STEADY[:23] + [100.05] * 17  # 50 ms lost between blocks 22 and 23
    assert lost_s(zeros) == pytest.approx(0.05)


def test_two_losses_add_up() -> None:
    zeros = STEADY[:10] + [100.01] * 15 + [100.04] * 15
    assert lost_s(zeros) == pytest.approx(0.04)


def test_too_few_blocks_to_judge_lose_nothing() -> None:
    assert lost_s([100.0, 100.5]) == 0.0


def test_a_run_of_late_blocks_that_comes_back_is_jitter_not_loss() -> None:
    zeros = list(STEADY)
    for k in range(10, 13):  # three of run 2's five blocks late: its median moves, the next run's is back
        zeros[k] += 0.004
    assert lost_s(zeros) == 0.0


def test_the_clocks_drifting_apart_is_no_loss() -> None:
    zeros = [100.0 + k * 0.05 * 100e-6 for k in range(1200)]  # 100 ppm over a minute of 50 ms blocks: 6 ms
    assert lost_s(zeros) == 0.0
