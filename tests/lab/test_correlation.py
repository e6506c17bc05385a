"""The nearest correlation matrix (Higham's alternating projections) and the decimals that keep a
rounded matrix positive semi-definite."""

from __future__ import annotations

import numpy as np
import pytest

from mrbench.lab.correlation import EIGEN_FLOOR, nearest_correlation, printable_decimals


def _random_correlation(rng: np.random.Generator, k: int) -> np.ndarray:
    factors = rng.normal(size=(k, k + 2))
    cov = factors @ factors.T
    scale = np.sqrt(np.diag(cov))
    return cov / np.outer(scale, scale)


@pytest.mark.parametrize("floor", [0.0, EIGEN_FLOOR])
def test_the_result_is_the_nearest_point_of_the_convex_set(floor: float) -> None:
    # Not a correlation matrix: a, b, c pairwise 0.9 / 0.9 / −0.9 cannot coexist.
    a = np.array([[1.0, 0.9, -0.9], [0.9, 1.0, 0.9], [-0.9, 0.9, 1.0]])
    assert np.linalg.eigvalsh(a).min() < 0
    x = nearest_correlation(a, floor=floor)
    assert np.allclose(x, x.T) and np.allclose(np.diag(x), 1.0)
    assert np.linalg.eigvalsh(x).min() >= floor * (1 - 1e-6) - 1e-12
    # Projection onto a convex set K: <A − X, C − X> ≤ 0 for every C in K.
    rng = np.random.default_rng(0)
    for _ in range(200):
        c = _random_correlation(rng, 3)
        c = (1 - floor) * c + floor * np.eye(3)  # eigenvalues ≥ floor, unit diagonal
        assert np.sum((a - x) * (c - x)) <= 1e-6


def test_a_matrix_with_margin_is_left_as_it_is() -> None:
    a = np.array([[1.0, 0.5, 0.2], [0.5, 1.0, 0.3], [0.2, 0.3, 1.0]])
    assert np.array_equal(nearest_correlation(a), a)


def test_exact_copies_move_off_the_edge_by_little() -> None:
    a = np.array([[1.0, 1.0, 0.7], [1.0, 1.0, 0.7], [0.7, 0.7, 1.0]])
    x = nearest_correlation(a)
    assert np.linalg.eigvalsh(x).min() >= EIGEN_FLOOR * 0.999
    assert np.abs(x - a).max() < 2 * EIGEN_FLOOR


def test_printable_decimals_are_the_fewest_that_stay_positive_semi_definite() -> None:
    assert printable_decimals(np.array([[1.0, 0.3], [0.3, 1.0]])) == 2
    # Two near-copies: rounding their 0.999 to 1.00 would make the matrix indefinite.
    a = nearest_correlation(np.array([[1.0, 1.0, 0.744], [1.0, 1.0, 0.746], [0.744, 0.746, 1.0]]))
    d = printable_decimals(a)
    assert np.linalg.eigvalsh(np.round(a, d)).min() >= 0
    assert d == 2 or np.linalg.eigvalsh(np.round(a, d - 1)).min() < 0
