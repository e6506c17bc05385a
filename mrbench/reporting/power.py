"""How many seeds a difference needs: a bootstrap power estimate, pure and vectorised numpy.

The report's findings resolve a comparison when the bootstrap CI of the probability of
improvement (:func:`mrbench.reporting.stats.probability_of_improvement`) lies away from 0.5. For a
comparison it could not resolve — or to say how solid a resolved one is — :func:`seeds_needed`
estimates the fewest seeds per method (from a small grid) at which a difference of the observed size
would be resolved in at least 80 % of repeated sweeps:

- each simulated sweep draws, in each of the task's models (strata), ``n`` baseline seeds from
  ``N(0, s²)`` and ``n`` method seeds from ``N(d, s²)``, with ``d`` the observed mean difference
  and ``s`` the pooled per-seed spread (:func:`pooled_spread`) — a normal model of seed-to-seed
  variation;
- each sweep gets the report's interval: its seeds resampled with replacement within each method
  and model, P(improvement) per resample averaged over models, the central 95 % of the resamples;
- the power at ``n`` is the fraction of sweeps whose interval excludes 0.5.

P(improvement) depends on the seeds' ranks only, so the simulation runs in units of ``s`` (effect
size ``|d| / s``). Everything is seeded (numpy seed per grid size, so a size's estimate does not
depend on which sizes were tried before) and deterministic; one comparison in one model costs
about 0.1 s at most (200 sweeps × 200 resamples, each resample's P from a win matrix weighted by
draw counts), proportionally more over several models.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence

import numpy as np

from mrbench.reporting.stats import DEFAULT_CONFIDENCE, DEFAULT_SEED

POWER_GRID = (3, 5, 10, 20, 50)
"""Seeds per method the estimate tries, smallest first; beyond the last the report says "≥ 50"."""
POWER_TARGET = 0.8
"""The fraction of simulated sweeps that must resolve the comparison."""
SIMULATED_SWEEPS = 200
POWER_REPS = 200
"""Bootstrap resamples per simulated sweep (the report itself uses more; the percentiles of 200
are close enough to decide resolved or not)."""


def _counts(picks: np.ndarray, size: int) -> np.ndarray:
    """How often each of ``size`` seeds was drawn: picks ``[..., k]`` (indices) → ``[..., size]``
    (float32: counts and win sums stay far below its exact-integer range)."""
    rows = picks.reshape(-1, picks.shape[-1])
    flat = (np.arange(len(rows))[:, None] * size + rows).ravel()
    counts = np.bincount(flat, minlength=len(rows) * size)
    return counts.reshape(*picks.shape[:-1], size).astype(np.float32)


def resampled_poi(x: np.ndarray, y: np.ndarray, picks_x: np.ndarray, picks_y: np.ndarray) -> np.ndarray:
    """P(X > Y) + ½ P(X = Y) of bootstrap resamples of seeds.

    ``x`` ``[..., n]``, ``y`` ``[..., m]``: the seeds (leading axes: sweeps, strata);
    ``picks_x`` ``[..., reps, k]`` and ``picks_y`` ``[..., reps, l]``: the seed indices each
    resample draws (leading axes broadcast against the seeds') → ``[..., reps]``. A resample's P is
    the Mann-Whitney ``U / (k l)`` of the drawn seeds, computed from the win matrix ``[..., n, m]``
    weighted by how often each seed was drawn: two matrix products instead of ``k l`` comparisons
    per resample.
    """
    n, m = x.shape[-1], y.shape[-1]
    wins = (x[..., :, None] > y[..., None, :]) + 0.5 * (x[..., :, None] == y[..., None, :])  # [..., n, m]
    drawn_x, drawn_y = _counts(picks_x, n), _counts(picks_y, m)  # [..., reps, n], [..., reps, m]
    u = np.einsum("...rm,...rm->...r", drawn_x @ wins.astype(np.float32), drawn_y)  # exact: integers / 2
    return u.astype(np.float64) / (picks_x.shape[-1] * picks_y.shape[-1])


def _resolved_chunks(
    x: np.ndarray, y: np.ndarray, *, reps: int, confidence: float, rng: np.random.Generator
) -> Iterator[tuple[int, int]]:
    """``(resolved, done)`` per chunk of sweeps ``x [sweeps, strata, n]``, ``y [sweeps, strata, m]``:
    how many of the chunk's sweeps have a percentile bootstrap CI of P(X > Y) that excludes 0.5
    (``reps`` resamples, seeds resampled within each method and stratum, P averaged over strata
    as the report pools a task's models), and how many sweeps the chunk held.

    Every sweep uses the same ``reps`` resampling patterns (common random numbers): each sweep's
    interval is exactly the bootstrap's, the patterns being independent of its seeds; sharing them
    only couples the sweeps' Monte-Carlo noise, and saves drawing them per sweep.
    """
    sweeps, strata, n = x.shape
    m = y.shape[-1]
    tail = (1.0 - confidence) / 2.0 * 100.0
    picks_x = rng.integers(0, n, size=(strata, reps, n))
    picks_y = rng.integers(0, m, size=(strata, reps, m))
    # Chunks of sweeps keep the [chunk, strata, reps, seeds] products around 8 MB.
    chunk = max(1, 2_000_000 // (strata * reps * max(n, m)))
    for start in range(0, sweeps, chunk):
        xs, ys = x[start : start + chunk], y[start : start + chunk]
        p = resampled_poi(xs, ys, picks_x, picks_y).mean(axis=1)  # [chunk, reps]
        low, high = np.percentile(p, [tail, 100.0 - tail], axis=-1)
        yield int(np.sum((low > 0.5) | (high < 0.5))), len(xs)


def resolved_fraction(
    x: np.ndarray,
    y: np.ndarray,
    *,
    reps: int = POWER_REPS,
    confidence: float = DEFAULT_CONFIDENCE,
    rng: np.random.Generator,
) -> float:
    """The fraction of sweeps ``x [sweeps, strata, n]``, ``y [sweeps, strata, m]`` whose percentile
    bootstrap CI of P(X > Y) excludes 0.5 (see :func:`_resolved_chunks`)."""
    counts = list(_resolved_chunks(x, y, reps=reps, confidence=confidence, rng=rng))
    return sum(r for r, _ in counts) / x.shape[0]


def reaches(
    x: np.ndarray,
    y: np.ndarray,
    power: float,
    *,
    reps: int = POWER_REPS,
    confidence: float = DEFAULT_CONFIDENCE,
    rng: np.random.Generator,
) -> bool:
    """``resolved_fraction(x, y, ...) >= power``, deciding as soon as the remaining sweeps can no
    longer change the answer (the same answer, at a fraction of the work for clear cases)."""
    need, left, resolved = power * x.shape[0], x.shape[0], 0
    for got, done in _resolved_chunks(x, y, reps=reps, confidence=confidence, rng=rng):
        resolved, left = resolved + got, left - done
        if resolved >= need or resolved + left < need:
            break
    return resolved >= need


def seeds_needed(
    diff: float,
    spread: float,
    *,
    strata: int = 1,
    grid: Sequence[int] = POWER_GRID,
    power: float = POWER_TARGET,
    sweeps: int = SIMULATED_SWEEPS,
    reps: int = POWER_REPS,
    confidence: float = DEFAULT_CONFIDENCE,
    seed: int = DEFAULT_SEED,
) -> int | None:
    """The smallest seeds-per-method ``n`` in ``grid`` at which a mean difference ``diff`` with
    per-seed standard deviation ``spread``, in each of ``strata`` cells (a task's models), is
    resolved (P(improvement) CI away from 0.5) in at least ``power`` of ``sweeps`` simulated
    sweeps; None when no ``n`` in the grid is enough (or ``diff`` is 0 or not finite). A zero
    spread resolves any nonzero difference at the smallest ``n``.

    >>> seeds_needed(1.0, 0.0), seeds_needed(0.0, 1.0), seeds_needed(3.0, 1.0)
    (3, None, 3)
    """
    if not (math.isfinite(diff) and math.isfinite(spread)) or diff == 0.0 or spread < 0.0:
        return None
    if spread == 0.0:
        return grid[0]
    effect = abs(diff) / spread  # ranks only: work in units of the spread, sign-symmetric
    for n in grid:
        rng = np.random.default_rng([seed, strata, n])
        x = rng.normal(effect, 1.0, size=(sweeps, strata, n))
        y = rng.normal(0.0, 1.0, size=(sweeps, strata, n))
        if reaches(x, y, power, reps=reps, confidence=confidence, rng=rng):
            return n
    return None


def pooled_spread(groups: Sequence[Sequence[float]]) -> float:
    """The pooled per-seed standard deviation of several groups of seed values (each group one
    method in one task × model: its own mean removed); NaN without two values in some group.

    >>> pooled_spread([[1.0, 3.0], [10.0, 12.0]])
    1.4142135623730951
    """
    squares, dof = 0.0, 0
    for group in groups:
        values = np.array([v for v in group if math.isfinite(v)], dtype=float)
        if len(values) >= 2:
            squares += float(np.sum((values - values.mean()) ** 2))
            dof += len(values) - 1
    return math.sqrt(squares / dof) if dof else math.nan
