"""What the lab measures: per-step advantage diagnostics, per-seed scores, statistics over seeds.

Per step (vectorised over the ``B = S·P`` groups of a batch):

- :func:`opposite_sign_groups` — groups where some rollout's advantage has the opposite sign of
  GRPO's for the same rewards;
- :func:`resolution` — distinct advantage values over distinct reward vectors, per group: 1 when
  every distinct reward combination gets its own advantage, lower when the method maps distinct
  combinations to one value (GRPO does for equal weighted totals: GDPO's argument).

Per seed (:func:`seed_scores`, names used by the summary, MLflow and the tests): ``final/<c>``
(component c's expected reward at the end, normalised so that 0 = the worst and 1 = the best
response of each prompt, mean over prompts), ``objective`` (the weighted total Σ_k w_k E[r_k],
normalised the same way), ``steps_to_90`` (first step where the normalised objective ≥ 0.9;
``steps + 1`` when never reached), ``sign_disagree`` (fraction of all groups of all steps),
``max_abs_adv`` (largest |A| of the run) and ``resolution`` (mean over steps).

Over seeds (:func:`summarise`): IQM with a percentile stratified-bootstrap CI and the probability
of improvement over a reference method with its CI, from :mod:`mrbench.reporting.stats`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

from mrbench.reporting.stats import (
    DEFAULT_REPS,
    Interval,
    iqm,
    probability_of_improvement,
    stratified_bootstrap_ci,
)

SIGN_RTOL = 1e-9
"""|A| below this fraction of the group's largest |A| counts as 0 (no sign): rounding, not signal."""
VALUE_RTOL = 1e-6
"""Advantages closer than this fraction of the group's largest |A| count as one value."""
REACH = 0.9
"""The normalised objective that ``steps_to_90`` waits for."""


def _signs(adv: Tensor) -> Tensor:
    magnitude = adv.abs()
    return torch.sign(adv) * (magnitude > SIGN_RTOL * magnitude.amax(dim=1, keepdim=True))


def opposite_sign_groups(adv: Tensor, reference: Tensor) -> Tensor:
    """``[B]`` bool: some rollout of the group has ``adv`` and ``reference`` ``[B, G]`` of
    strictly opposite signs (values within rounding of 0 have no sign)."""
    return (_signs(adv) * _signs(reference) < 0).any(dim=1)


def distinct_counts(values: Tensor, atol: Tensor | float) -> Tensor:
    """Number of distinct values per group among the non-NaN ones.

    ``values [B, G]`` (NaN = left out), ``atol`` a float or ``[B, 1]``: sorted values more than
    ``atol`` apart start a new value (so values within ``atol`` of a neighbour chain together).
    Returns ``[B]`` int64 (0 for a group of NaN only).
    """
    ordered = values.sort(dim=1).values  # NaN sorts last; comparisons with NaN are False
    gaps = (ordered[:, 1:] - ordered[:, :-1]) > atol
    return gaps.sum(dim=1) + (~torch.isnan(ordered[:, 0])).long()


def _fingerprint(rewards: Tensor) -> Tensor:
    """One number per reward vector ``[B, G, K] → [B, G]``: equal vectors give equal numbers and
    distinct ones (almost surely) distinct numbers; a missing component is a value of its own;
    an all-NaN (unscorable) row gives NaN.

    A projection on fixed irrational-looking weights: two distinct vectors collide only if their
    difference is orthogonal to the weights, which rewards on a grid of simple values never are.
    """
    k = rewards.shape[-1]
    weights = torch.tensor(
        [math.pi ** (-(i + 1) / 2) + math.e * i for i in range(2 * k)], dtype=rewards.dtype
    )
    missing = torch.isnan(rewards)
    prints = rewards.nan_to_num(nan=0.0) @ weights[:k] + missing.to(rewards.dtype) @ weights[k:]
    return prints.masked_fill(missing.all(dim=-1), torch.nan)


def resolution(rewards: Tensor, adv: Tensor) -> tuple[Tensor, Tensor]:
    """Distinct advantages over distinct reward vectors per group, and where it is defined.

    ``rewards [B, G, K]`` (NaN = missing; all-NaN rows are unscorable and left out), ``adv
    [B, G]``. Defined for groups with ≥ 2 distinct scorable reward vectors. Returns
    ``(ratio [B], defined [B] bool)``; ``ratio`` is 0 where undefined.
    """
    prints = _fingerprint(rewards)
    n_rewards = distinct_counts(prints, 0.0)
    scorable_adv = adv.masked_fill(torch.isnan(prints), torch.nan)
    atol = VALUE_RTOL * adv.abs().amax(dim=1, keepdim=True)
    n_adv = distinct_counts(scorable_adv, atol)
    defined = n_rewards >= 2
    return torch.where(defined, n_adv / n_rewards.clamp_min(1), 0.0), defined


# ------------------------------------------------------------------------------------ per seed


def normalised(values: np.ndarray, best: np.ndarray, worst: np.ndarray) -> np.ndarray:
    """``(values − worst) / (best − worst)``, NaN where best = worst (a component no response
    can change). ``values [S, T, ...]``, ``best``/``worst`` ``[S, ...]``."""
    span = best - worst
    safe = np.where(span > 1e-12, span, np.nan)
    return (values - worst[:, None]) / safe[:, None]


def first_reach(curve: np.ndarray, level: float = REACH) -> np.ndarray:
    """First index of each row of ``curve [S, T+1]`` at or above ``level``; ``T + 1`` if never."""
    hit = curve >= level
    return np.where(hit.any(axis=1), hit.argmax(axis=1), curve.shape[1]).astype(float)


def seed_scores(
    components: np.ndarray,
    weights: np.ndarray,
    best: np.ndarray,
    worst: np.ndarray,
    best_total: np.ndarray,
    worst_total: np.ndarray,
    diagnostics: dict[str, np.ndarray],
    names: Sequence[str],
) -> dict[str, np.ndarray]:
    """Per-seed scores ``{name: [S]}`` of one method (names in the module docstring).

    ``components [S, T+1, K]`` expected rewards over training; ``weights [K]``; ``best``/``worst``
    ``[S, K]``; ``best_total``/``worst_total`` ``[S]``; ``diagnostics`` ``sign_disagree``,
    ``resolution``, ``max_abs_adv``, each ``[T, S]``.
    """
    comp = normalised(components, best, worst)
    objective = normalised(components @ weights, best_total, worst_total)
    scores = {f"final/{name}": comp[:, -1, i] for i, name in enumerate(names)}
    scores["objective"] = objective[:, -1]
    scores["steps_to_90"] = first_reach(objective)
    scores["sign_disagree"] = diagnostics["sign_disagree"].mean(axis=0)
    with np.errstate(all="ignore"):
        scores["resolution"] = np.nanmean(diagnostics["resolution"], axis=0)
    scores["max_abs_adv"] = diagnostics["max_abs_adv"].max(axis=0)
    return scores


# ----------------------------------------------------------------------------------- over seeds


@dataclass(frozen=True)
class MethodSummary:
    """One method's statistics over seeds: ``iqm`` metric → IQM with its CI; ``poi`` metric →
    P(a seed of this method beats a seed of the reference) with its CI (absent for the reference)."""

    method: str
    iqm: dict[str, Interval]
    poi: dict[str, Interval] = field(default_factory=dict)


HIGHER_IS_BETTER = ("objective",)
"""Scores compared with the reference by probability of improvement, besides ``final/*``."""


def summarise(
    scores: dict[str, dict[str, np.ndarray]],
    *,
    reference: str | None = "grpo",
    reps: int = DEFAULT_REPS,
    seed: int = 0,
) -> dict[str, MethodSummary]:
    """IQM + CI of every score of every method, and probability of improvement over ``reference``
    (when it ran) on the final components and the objective."""
    out = {}
    ref = scores.get(reference) if reference is not None else None
    for method, values in scores.items():
        intervals = {
            name: stratified_bootstrap_ci(v, iqm, reps=reps, seed=seed) for name, v in values.items()
        }
        poi = {}
        if ref is not None and method != reference:
            for name, v in values.items():
                if (name.startswith("final/") or name in HIGHER_IS_BETTER) and not np.isnan(v).all():
                    poi[name] = probability_of_improvement(v, ref[name], reps=reps, seed=seed)
        out[method] = MethodSummary(method, intervals, poi)
    return out
