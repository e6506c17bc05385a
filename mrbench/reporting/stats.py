"""rliable-style statistics over a ``runs × tasks`` score matrix.

The unit of replication is the training seed: a row of the matrix is one seed's run, a column
is one task (here: one task × model cell, or a single column for a per-cell table). All
functions are pure, take numpy arrays, and are vectorised over bootstrap replicates.

- :func:`iqm` — interquartile mean (mean of the middle 50 % of all scores), robust to outlier seeds.
- :func:`stratified_bootstrap_ci` — percentile confidence interval, resampling runs with
  replacement *independently within each task* (stratified), as in Agarwal et al. 2021.
- :func:`probability_of_improvement` — P(X > Y) averaged over tasks (Mann-Whitney U / (n m),
  ties count ½), with a stratified bootstrap CI.

Shapes: ``scores`` is ``[runs, tasks]`` (a 1-D array is read as ``[runs, 1]``). A task column
may have NaN padding where it has fewer runs than others; NaN entries are ignored.

Report-level aggregation, also pure: :func:`head_mean` / :func:`tail_mean` (the start and end of
a learning curve), :func:`align_curves` (runs' curves on common steps, for :func:`curve_band`),
:func:`finite_mean_ci` / :func:`finite_iqm` (one cell's seeds), :func:`padded` (cells of different
seed counts as one matrix) and :func:`nanmean`.
"""

from __future__ import annotations

import itertools
import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

DEFAULT_REPS = 2000
DEFAULT_CONFIDENCE = 0.95
DEFAULT_SEED = 0
CI_METHOD = "percentile"

Statistic = Callable[[np.ndarray], np.ndarray]
"""Maps scores ``[..., runs, tasks]`` to ``[...]``: one value per leading (replicate) index."""


def as_matrix(scores: np.ndarray | list[float] | list[list[float]]) -> np.ndarray:
    """``scores`` as a float ``[runs, tasks]`` array; a 1-D input becomes one task column.

    >>> as_matrix([1, 2, 3]).shape
    (3, 1)
    """
    arr = np.asarray(scores, dtype=float)
    if arr.ndim == 1:
        arr = arr[:, None]
    if arr.ndim != 2:
        raise ValueError(f"scores must be [runs, tasks] (2-D), got shape {arr.shape}")
    return arr


def mean_score(scores: np.ndarray) -> np.ndarray:
    """Mean over the last two axes ``[..., runs, tasks] -> [...]``, NaN entries ignored.

    >>> float(mean_score(np.array([[1.0], [2.0], [6.0]])))
    3.0
    """
    return np.nanmean(scores, axis=(-2, -1))


def iqm(scores: np.ndarray) -> np.ndarray:
    """Interquartile mean over the last two axes ``[..., runs, tasks] -> [...]``.

    All runs × tasks scores are pooled, sorted, ``floor(n / 4)`` are cut from each end and the
    rest averaged (``scipy.stats.trim_mean(x, 0.25)``; rliable's definition). With fewer than
    4 scores nothing is cut, so the IQM equals the mean. NaN entries are ignored.

    >>> float(iqm(np.array([[1.0], [2.0], [3.0], [4.0], [5.0], [6.0], [7.0], [100.0]])))
    4.5
    """
    arr = np.asarray(scores, dtype=float)
    flat = arr.reshape(*arr.shape[:-2], -1)
    n_valid = np.sum(~np.isnan(flat), axis=-1)
    # NaN sorts last, so valid values occupy the first n_valid slots of each row.
    ordered = np.sort(flat, axis=-1)
    cut = n_valid // 4
    positions = np.arange(ordered.shape[-1])
    keep = (positions >= cut[..., None]) & (positions < (n_valid - cut)[..., None])
    total = np.where(keep, ordered, 0.0).sum(axis=-1)
    count = keep.sum(axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(count > 0, total / np.maximum(count, 1), np.nan)


def _valid_rows(column: np.ndarray) -> np.ndarray:
    return np.flatnonzero(~np.isnan(column))


def stratified_resample(scores: np.ndarray, reps: int, rng: np.random.Generator) -> np.ndarray:
    """``reps`` stratified bootstrap resamples of ``scores [runs, tasks]`` → ``[reps, runs, tasks]``.

    Within each task column the valid (non-NaN) runs are drawn with replacement, keeping that
    column's run count; NaN padding stays NaN.
    """
    arr = as_matrix(scores)
    runs, tasks = arr.shape
    out = np.full((reps, runs, tasks), np.nan)
    for t in range(tasks):
        rows = _valid_rows(arr[:, t])
        if rows.size == 0:
            continue
        picks = rng.integers(0, rows.size, size=(reps, rows.size))
        out[:, : rows.size, t] = arr[rows[picks], t]
    return out


@dataclass(frozen=True)
class Interval:
    """A point estimate with its confidence interval ``[low, high]``."""

    point: float
    low: float
    high: float

    def separated_above(self, other: Interval) -> bool:
        """True when this interval lies strictly above ``other`` (no overlap)."""
        return self.low > other.high


def stratified_bootstrap_ci(
    scores: np.ndarray | list[float],
    statistic: Statistic = mean_score,
    *,
    reps: int = DEFAULT_REPS,
    confidence: float = DEFAULT_CONFIDENCE,
    seed: int = DEFAULT_SEED,
) -> Interval:
    """Point estimate of ``statistic`` and its percentile stratified bootstrap CI.

    ``scores``: ``[runs, tasks]``. Runs are resampled with replacement within each task;
    the interval holds the central ``confidence`` mass of the ``reps`` replicate statistics.
    Deterministic for a given ``seed``. A single run gives a zero-width interval (there is no
    spread to resample — the report warns about too few seeds separately).

    >>> ci = stratified_bootstrap_ci([1.0, 2.0, 3.0], seed=0)
    >>> ci.low <= ci.point <= ci.high
    True
    """
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    arr = as_matrix(scores)
    point = float(statistic(arr))
    if np.all(np.isnan(arr)):
        return Interval(point, float("nan"), float("nan"))
    rng = np.random.default_rng(seed)
    replicates = statistic(stratified_resample(arr, reps, rng))
    tail = (1.0 - confidence) / 2.0 * 100.0
    low, high = np.nanpercentile(replicates, [tail, 100.0 - tail])
    return Interval(point, float(low), float(high))


def _poi_per_task(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """P(X > Y) + ½ P(X = Y) per task over the non-NaN runs: x ``[..., n, T]``, y ``[..., m, T]`` →
    ``[..., T]`` (NaN where a task has no pair).

    Counted by sorting, not from the ``n × m`` differences: per x value, the y values below it plus
    half those equal to it are ``(searchsorted left + searchsorted right) / 2`` in the sorted y. All
    rows (every leading index and task) are searched at once: values become integer codes (their rank
    among the distinct values, exact ties kept, NaN the largest) shifted by row, so one sorted array
    holds every row's y values in its own range.
    """
    n, m = x.shape[-2], y.shape[-2]
    xs = np.moveaxis(x, -1, -2).reshape(-1, n)  # [B, n], B = prod(...) * T
    ys = np.moveaxis(y, -1, -2).reshape(-1, m)  # [B, m]
    both = np.concatenate([xs.ravel(), ys.ravel()])
    distinct = np.unique(both[~np.isnan(both)])
    nan_code = len(distinct)  # above every value's code: never below or equal to a number

    def codes(a: np.ndarray) -> np.ndarray:
        return np.where(np.isnan(a), nan_code, np.searchsorted(distinct, a))

    rows = np.arange(xs.shape[0])[:, None]  # [B, 1]
    shift = rows * (nan_code + 1)
    sorted_y = np.sort(codes(ys) + shift, axis=None)  # row r's values at [r m, (r + 1) m)
    x_codes = codes(xs) + shift
    below = np.searchsorted(sorted_y, x_codes, side="left") - rows * m
    at_or_below = np.searchsorted(sorted_y, x_codes, side="right") - rows * m
    x_valid = ~np.isnan(xs)
    wins = np.where(x_valid, (below + at_or_below) / 2.0, 0.0).sum(axis=-1)  # [B]
    count = x_valid.sum(axis=-1) * (~np.isnan(ys)).sum(axis=-1)  # [B]
    with np.errstate(invalid="ignore", divide="ignore"):
        poi = np.where(count > 0, wins / np.maximum(count, 1), np.nan)
    return poi.reshape(*x.shape[:-2], x.shape[-1])


def probability_of_improvement(
    x: np.ndarray | list[float],
    y: np.ndarray | list[float],
    *,
    reps: int = DEFAULT_REPS,
    confidence: float = DEFAULT_CONFIDENCE,
    seed: int = DEFAULT_SEED,
) -> Interval:
    """Probability that a run of X scores higher than a run of Y, averaged over tasks, with CI.

    ``x``: ``[runs_x, tasks]``, ``y``: ``[runs_y, tasks]`` (same tasks, any run counts). Per task
    it is the Mann-Whitney statistic ``U / (n m)`` with ties counted ½; the CI resamples X and Y
    independently and stratified by task. For a lower-is-better metric pass negated scores.

    >>> probability_of_improvement([1.0, 2.0], [1.0, 2.0]).point
    0.5
    """
    xa, ya = as_matrix(x), as_matrix(y)
    if xa.shape[1] != ya.shape[1]:
        raise ValueError(f"x and y must cover the same tasks: {xa.shape[1]} vs {ya.shape[1]} columns")
    point = float(np.nanmean(_poi_per_task(xa, ya)))
    rng = np.random.default_rng(seed)
    # Replicates drawn in chunks as when they were counted pairwise (a [reps, n, m, T] array kept
    # small): the same random stream, so the same intervals as the reports made then.
    chunk = max(1, 2_000_000 // max(1, xa.shape[0] * ya.shape[0] * xa.shape[1]))
    values = []
    for start in range(0, reps, chunk):
        n = min(chunk, reps - start)
        xs = stratified_resample(xa, n, rng)
        ys = stratified_resample(ya, n, rng)
        values.append(np.nanmean(_poi_per_task(xs, ys), axis=-1))
    replicates = np.concatenate(values)
    tail = (1.0 - confidence) / 2.0 * 100.0
    low, high = np.nanpercentile(replicates, [tail, 100.0 - tail])
    return Interval(point, float(low), float(high))


def curve_band(
    curves: np.ndarray,
    *,
    reps: int = 1000,
    confidence: float = DEFAULT_CONFIDENCE,
    seed: int = DEFAULT_SEED,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean learning curve across seeds with a pointwise bootstrap CI band.

    ``curves``: ``[runs, steps]`` (NaN where a run has no value at a step). Returns
    ``(mean, low, high)``, each ``[steps]``; seeds are resampled jointly across steps, all
    ``runs ** runs`` resamples when that is at most ``reps`` (exact), else ``reps`` random ones.
    """
    arr = np.asarray(curves, dtype=float)
    if arr.ndim != 2:
        raise ValueError(f"curves must be [runs, steps], got shape {arr.shape}")
    # All-NaN steps (no run logged there) legitimately give NaN; silence numpy's warning for them.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        mean = np.nanmean(arr, axis=0)
        if arr.shape[0] < 2:
            return mean, mean.copy(), mean.copy()
        n = arr.shape[0]
        if n**n <= reps:
            # Few runs: enumerate every equally likely resample (the exact bootstrap
            # distribution) instead of drawing ``reps`` of them: cheaper and noise-free.
            picks = np.array(list(itertools.product(range(n), repeat=n)))
        else:
            picks = np.random.default_rng(seed).integers(0, n, size=(reps, n))
        replicate_means = np.nanmean(arr[picks], axis=1)  # [reps, steps]
        tail = (1.0 - confidence) / 2.0 * 100.0
        # np.nanpercentile loops over steps in Python (~100× slower); only use it when needed.
        pct = np.nanpercentile if np.isnan(replicate_means).any() else np.percentile
        low, high = pct(replicate_means, [tail, 100.0 - tail], axis=0)
    return mean, low, high


def separated_winner(intervals: dict[str, Interval], *, lower_is_better: bool = False) -> str | None:
    """The name whose CI is strictly better than every other's, or None when intervals overlap.

    >>> separated_winner({"a": Interval(1, 0.9, 1.1), "b": Interval(0, -0.1, 0.1)})
    'a'
    >>> separated_winner({"a": Interval(1, 0.0, 1.1), "b": Interval(0, -0.1, 0.1)}) is None
    True
    """
    finite = {k: v for k, v in intervals.items() if np.isfinite(v.low) and np.isfinite(v.high)}
    if len(finite) < 2 or len(finite) < len(intervals):
        return None
    for name, ci in finite.items():
        others = [o for k, o in finite.items() if k != name]
        if lower_is_better:
            if all(ci.high < o.low for o in others):
                return name
        elif all(ci.separated_above(o) for o in others):
            return name
    return None


# ------------------------------------------------------------------------------ report aggregation

WINDOW_MIN_STEPS = 10
"""Fewest logged steps averaged at either end of a curve: in a 30-step CPU run, 10 % would be 3
steps (96 rollouts), noisy enough to call a rising reward falling."""


def window(n_values: int, fraction: float) -> int:
    """How many of ``n_values`` logged values :func:`head_mean` / :func:`tail_mean` average.

    >>> window(30, 0.1), window(400, 0.1), window(4, 0.1)
    (10, 40, 4)
    """
    return min(n_values, max(math.ceil(n_values * fraction), WINDOW_MIN_STEPS))


def head_mean(values: np.ndarray | None, fraction: float = 0.1) -> float:
    """Mean of the first ``fraction`` of a curve's values ``[S]`` (in step order; at least
    :data:`WINDOW_MIN_STEPS`); NaN for a missing or empty curve."""
    if values is None or len(values) == 0:
        return math.nan
    return float(np.nanmean(values[: window(len(values), fraction)]))


def tail_mean(values: np.ndarray | None, fraction: float = 0.1) -> float:
    """Mean of the last ``fraction`` of a curve's values ``[S]`` (same window as :func:`head_mean`).

    >>> tail_mean(np.arange(20.0)), head_mean(np.arange(20.0))
    (14.5, 4.5)
    """
    if values is None or len(values) == 0:
        return math.nan
    return float(np.nanmean(values[-window(len(values), fraction) :]))


def nanmean(values: Sequence[float]) -> float:
    """Mean of the finite values (NaN when there are none).

    >>> nanmean([1.0, float("nan"), 3.0])
    2.0
    """
    finite = [v for v in values if math.isfinite(v)]
    return sum(finite) / len(finite) if finite else math.nan


def padded(columns: Sequence[Sequence[float]]) -> np.ndarray:
    """Columns of different lengths → ``[max_len, n_columns]`` with NaN padding.

    >>> padded([[1.0, 2.0], [3.0]]).tolist()
    [[1.0, 3.0], [2.0, nan]]
    """
    rows = max((len(c) for c in columns), default=0)
    out = np.full((rows, len(columns)), np.nan)
    for j, col in enumerate(columns):
        out[: len(col), j] = col
    return out


def align_curves(
    curves: Sequence[tuple[np.ndarray, np.ndarray]], max_points: int
) -> tuple[np.ndarray, np.ndarray]:
    """Runs' curves ``(steps [S_i], values [S_i])`` on the union of their steps →
    ``(steps [S], values [runs, S])``, NaN where a run logged nothing at a step.

    Over ``max_points`` steps, ``max_points`` of them evenly spaced are kept (first and last included).

    >>> steps, values = align_curves([(np.array([1, 2]), np.array([5.0, 6.0])),
    ...                               (np.array([2, 3]), np.array([7.0, 8.0]))], 10)
    >>> steps.tolist(), values.tolist()
    ([1, 2, 3], [[5.0, 6.0, nan], [nan, 7.0, 8.0]])
    """
    steps = np.unique(np.concatenate([s for s, _ in curves]))
    if len(steps) > max_points:
        steps = steps[np.unique(np.linspace(0, len(steps) - 1, max_points).astype(int))]
    matrix = np.full((len(curves), len(steps)), np.nan)
    for i, (s, v) in enumerate(curves):
        idx = np.searchsorted(s, steps)
        ok = (idx < len(s)) & (s[np.minimum(idx, len(s) - 1)] == steps)
        matrix[i, ok] = v[idx[ok]]
    return steps, matrix


def finite_mean_ci(
    values: Sequence[float], *, reps: int = DEFAULT_REPS, seed: int = DEFAULT_SEED
) -> Interval:
    """Mean of one cell's finite seed values ``[runs]`` with its bootstrap CI; all NaN without any."""
    clean = [v for v in values if math.isfinite(v)]
    if not clean:
        return Interval(math.nan, math.nan, math.nan)
    return stratified_bootstrap_ci(clean, mean_score, reps=reps, seed=seed)


def finite_iqm(values: Sequence[float]) -> float:
    """Interquartile mean of the finite values ``[runs]`` (NaN without any).

    >>> finite_iqm([1.0, float("nan"), 3.0])
    2.0
    """
    finite = np.array([v for v in values if math.isfinite(v)])
    return float(iqm(as_matrix(finite))) if len(finite) else math.nan
