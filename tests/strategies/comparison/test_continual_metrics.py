"""Accuracy-matrix metrics on hand-made matrices."""
from __future__ import annotations

import math

import numpy as np
import pytest

from cl_graft.strategies.comparison.metrics import (
    average_accuracy,
    average_incremental_accuracy,
    bwt,
    final_accuracy,
    forgetting,
    forgetting_per_task,
    summarize,
)
from cl_graft.errors import UserError

R = np.array([[0.9, 0.1, 0.2],
              [0.7, 0.8, 0.3],
              [0.6, 0.85, 0.9]])


def test_values_on_a_hand_made_matrix():
    assert final_accuracy(R).tolist() == [0.6, 0.85, 0.9]
    assert average_accuracy(R) == pytest.approx((0.6 + 0.85 + 0.9) / 3)
    assert forgetting_per_task(R) == pytest.approx([0.9 - 0.6, 0.8 - 0.85])  # task 1 improved: negative
    assert forgetting(R) == pytest.approx(0.125)
    assert bwt(R) == pytest.approx(((0.6 - 0.9) + (0.85 - 0.8)) / 2)
    # after each experience the tasks seen so far: (0.9), (0.7, 0.8), (0.6, 0.85, 0.9); tasks not yet seen count not
    assert average_incremental_accuracy(R) == pytest.approx((0.9 + 0.75 + (0.6 + 0.85 + 0.9) / 3) / 3)


def test_forgetting_uses_the_best_accuracy_after_learning():
    r = np.array([[0.5, 0.0, 0.0], [0.9, 0.5, 0.0], [0.6, 0.5, 0.5]])
    assert forgetting_per_task(r) == pytest.approx([0.3, 0.0])
    assert bwt(r) == pytest.approx((0.1 + 0.0) / 2)


def test_zero_forgetting_when_columns_are_constant_after_learning():
    r = np.array([[0.8, 0.5], [0.8, 0.9]])
    assert forgetting(r) == 0.0 and bwt(r) == 0.0


def test_one_task_and_one_row_results():
    assert math.isnan(forgetting(np.array([[0.7]]))) and math.isnan(bwt(np.array([[0.7]])))
    s = summarize(np.array([[0.7, 0.8, 0.9]]))                               # joint training: one final row
    assert s["average"] == pytest.approx(0.8) and math.isnan(s["forgetting"]) and math.isnan(s["bwt"])
    assert math.isnan(average_incremental_accuracy(np.array([[0.7, 0.8, 0.9]])))
    assert average_incremental_accuracy(np.array([[0.7]])) == pytest.approx(0.7)


def test_bad_shapes():
    with pytest.raises(UserError):
        forgetting(np.zeros((2, 3)))
    with pytest.raises(UserError):
        final_accuracy(np.zeros((0, 3)))


def test_paired_interval_hand_computed():
    from cl_graft.strategies.comparison.metrics import paired_interval

    # differences 1, 2, 3: mean 2, sd 1, t(2) = 4.303 -> half-width 4.303 / sqrt(3) = 2.4843
    r = paired_interval([11.0, 12.0, 13.0], [10.0, 10.0, 10.0])
    assert r["n"] == 3 and r["mean"] == 2.0 and r["std"] == 1.0
    assert abs(r["low"] - (2 - 4.303 / 3 ** 0.5)) < 1e-12 and abs(r["high"] - (2 + 4.303 / 3 ** 0.5)) < 1e-12
    assert r["ahead"] == 0                                            # the interval contains 0
    tight = paired_interval([2.0, 2.1, 1.9, 2.0, 2.05], [1.0, 1.0, 1.0, 1.0, 1.0])
    assert tight["ahead"] == 1 and tight["low"] > 0
    assert paired_interval([1.0, 1.0, 1.1], [2.0, 2.0, 2.0])["ahead"] == -1
    same = paired_interval([0.5] * 3, [0.502] * 3)                    # one test row on every seed: no spread
    assert same["ahead"] == 0 and same["low"] < 0 <= same["high"]
    assert paired_interval([0.5] * 6, [0.502] * 6)["ahead"] == -1     # the sign test: 2 / 64 <= 0.05
    with pytest.raises(UserError, match="two equal-length"):
        paired_interval([1.0], [2.0])
