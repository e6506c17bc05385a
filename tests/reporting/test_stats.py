"""rliable-style statistics against hand-computed values and brute-force references."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from mrbench.reporting import stats


def test_iqm_cuts_a_quarter_from_each_end() -> None:
    # 8 scores: floor(8/4) = 2 cut from each end -> mean(3, 4, 5, 6) = 4.5; the outlier 100 is ignored.
    scores = np.array([[7.0], [1.0], [100.0], [3.0], [5.0], [2.0], [6.0], [4.0]])
    assert float(stats.iqm(scores)) == pytest.approx(4.5)


def test_iqm_pools_runs_and_tasks_and_ignores_nan() -> None:
    # 2 tasks × 4 runs = 8 scores (one NaN pad -> 7 valid: cut 1 each end -> mean of middle 5).
    scores = np.array([[1.0, 10.0], [2.0, 20.0], [3.0, 30.0], [4.0, np.nan]])
    valid = sorted([1.0, 2.0, 3.0, 4.0, 10.0, 20.0, 30.0])
    assert float(stats.iqm(scores)) == pytest.approx(np.mean(valid[1:-1]))


def test_iqm_of_few_scores_is_the_mean_and_batches_over_leading_axes() -> None:
    assert float(stats.iqm(np.array([[1.0], [2.0], [6.0]]))) == pytest.approx(3.0)
    batch = np.stack([np.arange(8.0)[:, None], 2 * np.arange(8.0)[:, None]])  # [2, 8, 1]
    np.testing.assert_allclose(stats.iqm(batch), [3.5, 7.0])


def test_mean_score_ignores_nan_padding() -> None:
    assert float(stats.mean_score(np.array([[1.0, 4.0], [3.0, np.nan]]))) == pytest.approx(8.0 / 3.0)


def test_bootstrap_ci_contains_the_mean_and_is_reproducible() -> None:
    rng = np.random.default_rng(1)
    scores = rng.normal(0.5, 0.1, size=(10, 3))
    a = stats.stratified_bootstrap_ci(scores, seed=7)
    b = stats.stratified_bootstrap_ci(scores, seed=7)
    c = stats.stratified_bootstrap_ci(scores, seed=8)
    assert a == b
    assert a.low <= a.point <= a.high
    assert a.point == pytest.approx(scores.mean())
    assert (c.low, c.high) != (a.low, a.high)
    # The IQM interval brackets the IQM point estimate too.
    q = stats.stratified_bootstrap_ci(scores, stats.iqm, seed=7)
    assert q.low <= q.point <= q.high


def test_bootstrap_ci_narrows_with_confidence_and_is_degenerate_for_one_run() -> None:
    scores = np.arange(20.0)
    wide = stats.stratified_bootstrap_ci(scores, confidence=0.99)
    narrow = stats.stratified_bootstrap_ci(scores, confidence=0.5)
    assert wide.low < narrow.low < narrow.high < wide.high
    one = stats.stratified_bootstrap_ci([0.3])
    assert one.low == one.point == one.high == pytest.approx(0.3)
    with pytest.raises(ValueError, match="confidence"):
        stats.stratified_bootstrap_ci(scores, confidence=1.5)


def test_stratified_resample_keeps_each_task_column_to_its_own_runs() -> None:
    scores = np.array([[1.0, 100.0], [2.0, 200.0], [3.0, np.nan]])
    draws = stats.stratified_resample(scores, 500, np.random.default_rng(0))
    assert draws.shape == (500, 3, 2)
    assert set(np.unique(draws[:, :, 0])) <= {1.0, 2.0, 3.0}
    # Column 1 has two valid runs: resamples draw only those and keep its NaN padding.
    assert set(np.unique(draws[:, :2, 1])) <= {100.0, 200.0}
    assert np.isnan(draws[:, 2, 1]).all()


def test_probability_of_improvement_hand_computed() -> None:
    # Pairs: 3>1, 3<3.5, 4>1, 4>3.5 -> 3 of 4 wins.
    assert stats.probability_of_improvement([3.0, 4.0], [1.0, 3.5]).point == pytest.approx(0.75)
    # Ties count one half.
    assert stats.probability_of_improvement([2.0], [2.0]).point == pytest.approx(0.5)
    # Averaged over tasks: task 1 always wins, task 2 always loses.
    p = stats.probability_of_improvement([[1.0, 0.0], [1.0, 0.0]], [[0.0, 1.0], [0.0, 1.0]])
    assert p.point == pytest.approx(0.5)


def test_probability_of_improvement_identical_inputs_is_one_half_with_ci() -> None:
    x = np.random.default_rng(3).normal(size=(6, 2))
    p = stats.probability_of_improvement(x, x.copy(), seed=0)
    assert p.point == pytest.approx(0.5)
    assert p.low <= 0.5 <= p.high


def test_probability_of_improvement_dominance_and_reproducibility() -> None:
    p = stats.probability_of_improvement([5.0, 6.0, 7.0], [1.0, 2.0])
    assert (p.point, p.low, p.high) == (1.0, 1.0, 1.0)
    x, y = np.arange(5.0), np.arange(5.0) + 0.5
    assert stats.probability_of_improvement(x, y, seed=4) == stats.probability_of_improvement(x, y, seed=4)


def test_probability_of_improvement_matches_a_pairwise_loop() -> None:
    rng = np.random.default_rng(11)
    x = rng.integers(0, 4, size=(5, 3)).astype(float)  # integers: plenty of ties
    y = rng.integers(0, 4, size=(4, 3)).astype(float)
    per_task = []
    for t in range(3):
        wins = [1.0 if a > b else 0.5 if a == b else 0.0 for a, b in itertools.product(x[:, t], y[:, t])]
        per_task.append(sum(wins) / len(wins))
    assert stats.probability_of_improvement(x, y).point == pytest.approx(np.mean(per_task))


def test_per_task_poi_by_sorting_equals_the_pairwise_count_with_nans_ties_and_batches() -> None:
    # The sort-based count against the pairwise definition on [batch, runs, tasks] arrays with
    # ties, -0.0 against 0.0, infinities, NaN runs and a task with no valid pair.
    rng = np.random.default_rng(2)
    x = rng.integers(-2, 3, size=(4, 6, 5)).astype(float)
    y = rng.integers(-2, 3, size=(4, 7, 5)).astype(float)
    x[rng.random(x.shape) < 0.2] = np.nan
    y[rng.random(y.shape) < 0.2] = np.nan
    x[0, :, 0], y[0, :, 0] = -0.0, 0.0
    x[1, 0, 1], y[1, 0, 1] = np.inf, -np.inf
    y[2, :, 2] = np.nan
    got = stats._poi_per_task(x, y)  # [4, 5]
    assert got.shape == (4, 5)
    for b, t in itertools.product(range(4), range(5)):
        xs, ys = x[b, :, t], y[b, :, t]
        xs, ys = xs[~np.isnan(xs)], ys[~np.isnan(ys)]
        pairs = [1.0 if a > c else 0.5 if a == c else 0.0 for a, c in itertools.product(xs, ys)]
        if pairs:
            assert got[b, t] == np.mean(pairs), (b, t)
        else:
            assert np.isnan(got[b, t]), (b, t)
    assert got[0, 0] == 0.5 and np.isnan(got[2, 2])


def test_probability_of_improvement_rejects_mismatched_tasks() -> None:
    with pytest.raises(ValueError, match="same tasks"):
        stats.probability_of_improvement(np.zeros((3, 2)), np.zeros((3, 1)))


def test_curve_band_brackets_the_mean_curve() -> None:
    curves = np.array([[0.0, 1.0, 2.0], [1.0, 2.0, 3.0], [2.0, 3.0, np.nan]])
    mean, low, high = stats.curve_band(curves, seed=0)
    np.testing.assert_allclose(mean, [1.0, 2.0, 2.5])
    assert np.all(low <= mean + 1e-12) and np.all(mean <= high + 1e-12)
    single_mean, single_low, single_high = stats.curve_band(curves[:1])
    np.testing.assert_array_equal(single_mean, single_low)
    np.testing.assert_array_equal(single_mean, single_high)


def test_separated_winner_respects_direction_and_overlap() -> None:
    good = stats.Interval(0.9, 0.85, 0.95)
    bad = stats.Interval(0.2, 0.1, 0.3)
    assert stats.separated_winner({"a": good, "b": bad}) == "a"
    assert stats.separated_winner({"a": good, "b": bad}, lower_is_better=True) == "b"
    assert stats.separated_winner({"a": good, "b": stats.Interval(0.8, 0.5, 0.9)}) is None
    assert stats.separated_winner({"a": good}) is None
    missing = stats.Interval(float("nan"), float("nan"), float("nan"))
    assert stats.separated_winner({"a": good, "b": missing}) is None


def test_align_curves_thins_long_curves_keeping_both_ends() -> None:
    steps = np.arange(1, 1001)
    aligned, values = stats.align_curves([(steps, steps * 2.0), (steps[::2], steps[::2] * 3.0)], 300)
    assert len(aligned) == 300 and aligned[0] == 1 and aligned[-1] == 1000
    assert np.array_equal(values[0], aligned * 2.0)
    odd = aligned % 2 == 1  # the second run logged odd steps only
    assert np.array_equal(values[1][odd], aligned[odd] * 3.0) and np.isnan(values[1][~odd]).all()


def test_curve_ends_and_cell_interval_without_values() -> None:
    assert math.isnan(stats.head_mean(None)) and math.isnan(stats.tail_mean(np.array([])))
    assert stats.tail_mean(np.arange(100.0)) == np.mean(np.arange(90.0, 100.0))  # 10 % = 10 steps
    empty = stats.finite_mean_ci([math.nan])
    assert math.isnan(empty.point) and math.isnan(empty.low) and math.isnan(empty.high)
    assert math.isnan(stats.finite_iqm([]))
