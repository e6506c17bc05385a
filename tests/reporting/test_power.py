"""The bootstrap power estimate: resampled P(improvement) against a pairwise loop, resolved
fractions on clear-cut cases, and seeds needed that shrink as the effect grows, deterministically."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from mrbench.reporting import power, stats


def test_resampled_poi_is_the_pairwise_statistic_of_the_drawn_seeds() -> None:
    rng = np.random.default_rng(5)
    x = rng.integers(0, 4, size=(3, 5)).astype(float)  # [sweeps, n]; integers: plenty of ties
    y = rng.integers(0, 4, size=(3, 4)).astype(float)
    picks_x, picks_y = rng.integers(0, 5, size=(3, 7, 5)), rng.integers(0, 4, size=(3, 7, 4))
    got = power.resampled_poi(x, y, picks_x, picks_y)  # [sweeps, reps]
    assert got.shape == (3, 7)
    for s, r in itertools.product(range(3), range(7)):
        xs, ys = x[s, picks_x[s, r]], y[s, picks_y[s, r]]
        pairs = [1.0 if a > b else 0.5 if a == b else 0.0 for a, b in itertools.product(xs, ys)]
        assert got[s, r] == pytest.approx(np.mean(pairs))
        assert got[s, r] == pytest.approx(stats.probability_of_improvement(xs, ys, reps=1).point)


def test_resolved_fraction_on_clear_cut_sweeps_and_the_early_decision_agrees() -> None:
    rng = np.random.default_rng(0)
    shape = (50, 2, 5)  # [sweeps, strata, seeds]
    apart = power.resolved_fraction(10.0 + rng.random(shape), rng.random(shape), rng=rng)
    same = power.resolved_fraction(np.ones(shape), np.ones(shape), rng=rng)  # every P is exactly 0.5
    assert apart == 1.0 and same == 0.0
    x, y = rng.normal(0.8, 1.0, (300, 3, 10)), rng.normal(0.0, 1.0, (300, 3, 10))
    fraction = power.resolved_fraction(x, y, rng=np.random.default_rng(1))
    assert 0.0 < fraction < 1.0
    for target in (fraction - 0.01, fraction, fraction + 0.01):
        assert power.reaches(x, y, target, rng=np.random.default_rng(1)) == (fraction >= target)


def test_seeds_needed_shrinks_with_the_effect_and_is_deterministic() -> None:
    needed = [power.seeds_needed(diff, 1.0) for diff in (3.0, 1.5, 1.0, 0.3)]
    assert needed[0] == power.POWER_GRID[0]
    assert needed[-1] is None  # a third of a seed's spread: beyond 50 seeds
    finite = [n for n in needed if n is not None]
    assert finite == sorted(finite) and len(set(finite)) >= 3
    assert power.seeds_needed(1.0, 1.0) == power.seeds_needed(1.0, 1.0)
    assert power.seeds_needed(-1.0, 1.0) == power.seeds_needed(1.0, 1.0)  # direction does not matter
    assert power.seeds_needed(0.5, 0.5) == power.seeds_needed(1.0, 1.0)  # only the effect size does
    # Models pool as strata: the same difference in each of 4 models needs fewer seeds per model.
    assert power.seeds_needed(1.0, 1.0, strata=4) < power.seeds_needed(1.0, 1.0)  # type: ignore[operator]


def test_seeds_needed_edge_cases() -> None:
    assert power.seeds_needed(0.2, 0.0) == power.POWER_GRID[0]  # no spread: any difference is clear
    assert power.seeds_needed(0.0, 1.0) is None
    assert power.seeds_needed(math.nan, 1.0) is None and power.seeds_needed(1.0, math.nan) is None
    assert power.seeds_needed(1.0, 1.0, grid=(3,)) is None  # 80 % power at 1 sd needs more than 3


def test_pooled_spread_removes_each_groups_mean() -> None:
    assert power.pooled_spread([[1.0, 3.0], [10.0, 12.0, math.nan]]) == pytest.approx(math.sqrt(2.0))
    assert power.pooled_spread([[1.0, 2.0, 3.0], [5.0]]) == pytest.approx(1.0)  # one value adds nothing
    assert math.isnan(power.pooled_spread([[1.0], [2.0]]))
