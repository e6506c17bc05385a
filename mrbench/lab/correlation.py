"""The nearest correlation matrix, and printing one so that it stays a correlation matrix.

A correlation matrix averaged over runs, or measured with components that are exact copies of each
other, can sit on the edge of the positive semi-definite cone (smallest eigenvalue 0): rounding it
to a few decimals then easily pushes it outside (no set of components can have those correlations,
and :class:`~mrbench.lab.scenarios.Scenario` refuses it). :func:`nearest_correlation` moves such a
matrix to the nearest one (Frobenius norm) with unit diagonal and every eigenvalue at least a
floor; :func:`printable_decimals` finds how many decimals keep it positive semi-definite.
"""

from __future__ import annotations

import numpy as np

EIGEN_FLOOR = 1e-3
"""Smallest eigenvalue the lab's measured correlation matrices are given: far enough from 0 that
rounding to a few decimals cannot make them indefinite (see :func:`printable_decimals`)."""


def _floor_eigenvalues(matrix: np.ndarray, floor: float) -> np.ndarray:
    """The nearest symmetric matrix to ``matrix [K, K]`` whose eigenvalues are all ≥ ``floor``:
    the same eigenvectors with the eigenvalues clipped from below."""
    values, vectors = np.linalg.eigh(matrix)
    return (vectors * np.maximum(values, floor)) @ vectors.T


def nearest_correlation(
    matrix: np.ndarray, *, floor: float = EIGEN_FLOOR, tol: float = 1e-12, max_iter: int = 10_000
) -> np.ndarray:
    """The correlation matrix nearest to ``matrix [K, K]`` (symmetric, finite) in the Frobenius norm
    among those with unit diagonal and every eigenvalue ≥ ``floor``.

    Alternating projections with Dykstra's correction (Higham, "Computing the nearest correlation
    matrix", 2002): the two sets (eigenvalues ≥ floor; unit diagonal) are convex, projecting onto
    each alone is easy (clip the eigenvalues; set the diagonal to 1), and the correction makes the
    alternation converge to the nearest point of their intersection rather than to any point of it.
    A last eigenvalue clip and diagonal rescaling make the result exact: unit diagonal, symmetric,
    eigenvalues ≥ ``floor / max(diagonal)`` ≈ ``floor``. A matrix already in the set is returned as is.
    """
    a = np.asarray(matrix, dtype=float)
    a = (a + a.T) / 2
    if np.allclose(np.diag(a), 1.0) and np.linalg.eigvalsh(a).min() >= floor:
        return a
    y = a.copy()
    correction = np.zeros_like(a)
    for _ in range(max_iter):
        r = y - correction
        x = _floor_eigenvalues(r, floor)
        correction = x - r
        y_next = x.copy()
        np.fill_diagonal(y_next, 1.0)
        done = np.linalg.norm(y_next - y) <= tol * max(1.0, np.linalg.norm(y))
        y = y_next
        if done:
            break
    x = _floor_eigenvalues((y + y.T) / 2, floor)
    scale = np.sqrt(np.diag(x))
    out = x / np.outer(scale, scale)
    np.fill_diagonal(out, 1.0)
    return out


def printable_decimals(matrix: np.ndarray, *, fewest: int = 2, most: int = 8) -> int:
    """The fewest decimals (from ``fewest``) at which ``matrix [K, K]`` rounded is still positive
    semi-definite; ``most`` if none fewer is (a matrix with eigenvalues ≥ f > 0 is safe from about
    log10(K / f) decimals on: rounding moves its eigenvalues by at most K · 10^−d / 2)."""
    arr = np.asarray(matrix, dtype=float)
    for decimals in range(fewest, most):
        if np.linalg.eigvalsh(np.round(arr, decimals)).min() >= 0.0:
            return decimals
    return most
