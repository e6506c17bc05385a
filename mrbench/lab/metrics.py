"""What the lab measures: per-step advantage diagnostics, per-seed scores, statistics over seeds.

Per step (:func:`step_diagnostics`, vectorised over the ``B = S·P`` groups of a batch), with the
trainer's own implementations (:mod:`mrbench.methods.diagnostics`), so a lab figure and a
training run's ``adv/...`` metric mean the same thing:

- ``sign_disagree`` — groups where some rollout's advantage has the opposite sign of GRPO's for
  the same rewards (:func:`~mrbench.methods.diagnostics.opposite_signs`, with rounding-level
  values taken as directionless). The trainer pools the same per-rollout comparison over
  rollouts (``sign_flip_vs_grpo``, ``sign_agree``): "how many rollouts are pushed the other
  way". The lab asks "how often does a group's update push some rollout the other way", a
  different statistic of the one comparison, so its aggregation stays here. Its zero rule
  differs too: the lab's float64 advantages of a rollout at its group's mean come out as
  ±1e-17, which the trainer's exact-zero rule would count as a direction (the trainer keeps
  that rule so that its logged metrics do not change);
- ``resolution`` — distinct advantage values over distinct reward vectors, per group
  (:func:`~mrbench.methods.diagnostics.resolution`): 1 when every distinct reward combination
  gets its own advantage, lower when the method maps distinct combinations to one value (GRPO
  does for equal weighted totals: GDPO's argument);
- ``max_abs_adv`` — the largest |A| of the step.

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

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

from mrbench.methods.diagnostics import kept_rollouts, opposite_signs, resolution
from mrbench.reporting.stats import (
    DEFAULT_REPS,
    Interval,
    iqm,
    probability_of_improvement,
    stratified_bootstrap_ci,
)

SIGN_RTOL = 1e-9
"""|A| below this fraction of the group's largest |A| counts as 0 (no sign): rounding, not signal."""
REACH = 0.9
"""The normalised objective that ``steps_to_90`` waits for."""


def opposite_sign_groups(adv: Tensor, reference: Tensor, keep: Tensor) -> Tensor:
    """``[B]`` bool: some kept rollout of the group has ``adv`` and ``reference`` ``[B, G]`` of
    strictly opposite signs (values within :data:`SIGN_RTOL` of the group's largest |A| have no
    sign). ``keep`` ``[B, G]`` bool (:func:`~mrbench.methods.diagnostics.kept_rollouts`)."""
    return opposite_signs(adv, reference, keep, zero_rtol=SIGN_RTOL)[1].any(dim=1)


def per_seed_mean(values: Tensor, seeds: int) -> Tensor:
    """``[S]`` mean over each seed's groups of ``values [B]`` (``B = S·P``, seed-major), leaving
    NaN (undefined) groups out; NaN for a seed with no defined group."""
    by_seed = values.reshape(seeds, -1)
    defined = ~torch.isnan(by_seed)
    counted = defined.sum(dim=1)
    mean = torch.where(defined, by_seed, 0.0).sum(dim=1) / counted.clamp_min(1)
    return mean.masked_fill(counted == 0, torch.nan)


def step_diagnostics(rewards: Tensor, adv: Tensor, reference: Tensor, seeds: int) -> dict[str, Tensor]:
    """One step's diagnostics per seed (names in the module docstring).

    Args:
        rewards: ``[B, G, K]`` the step's rewards (NaN = missing; an all-NaN row is unscorable).
        adv: ``[B, G]`` the method's advantages; ``reference``: ``[B, G]`` GRPO's.
        seeds: ``S``; the ``B = S·P`` groups are seed-major.

    Returns:
        ``sign_disagree`` (fraction of the seed's groups), ``resolution`` (mean over the seed's
        groups where it is defined; NaN if none) and ``max_abs_adv``, each ``[S]`` float64.
    """
    keep = kept_rollouts(rewards)
    disagree = opposite_sign_groups(adv, reference, keep).reshape(seeds, -1).to(torch.float64)
    return {
        "sign_disagree": disagree.mean(dim=1),
        "resolution": per_seed_mean(resolution(adv, rewards, keep), seeds),
        "max_abs_adv": adv.abs().reshape(seeds, -1).amax(dim=1).to(torch.float64),
    }


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
