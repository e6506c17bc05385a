"""gdpo and gdpo-corr for many seeds in one call, each seed its own batch.

The lab folds seeds into the prompt axis (``[S·P, G, K]``, seed-major). gdpo and gdpo-corr end
with a *batch* step, so the lab must not let the seeds share it; calling them once per seed costs
S calls of ~20 small tensor operations per step, most of the lab's time. Their group-local part
(masks, per-group z-scores) does not care how many seeds share a call, and their batch step is a
reduction that can keep a seed axis: these functions do the group-local part once over all
``S·P`` groups and the batch step per seed over a ``[S, P, …]`` view, with the same
:mod:`mrbench.methods._stats` operations in the same order as the registered functions.

They are an optimisation of those two functions only, never a second definition: the lab uses
one only after checking, on a probe batch, that it returns bit for bit what the registered
function returns seed by seed (:func:`segmented_for`); otherwise, and for rewards beyond 2**300
(where the registered function rescales each seed's batch by its own power of two), the lab calls
the registered function per seed. Shapes: ``S`` seeds, ``P`` prompts per seed, ``G`` rollouts,
``K`` components.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from mrbench.methods import _stats
from mrbench.methods._stats import center_, finish_, group_zscores_, prepare, reciprocal, std_from_centered

Segmented = Callable[..., Tensor]
"""``fn(rewards [S·P, G, K], weights [K], seeds, **params) -> [S·P, G]``."""

_RESCALE_BOUND = 2.0**_stats._SAFE_EXP
"""Beyond it the registered functions rescale a batch by its own power of two (not per seed)."""


def _within_bound(rewards: Tensor, weights: Tensor) -> bool:
    """True when no finite ``|r|`` or ``|r|·max|w|`` reaches the rescaling bound (the usual case)."""
    finite = rewards.nan_to_num(nan=0.0, posinf=0.0, neginf=0.0)
    peak = float(finite.abs().max()) * max(1.0, float(weights.abs().max())) if finite.numel() else 0.0
    return peak <= _RESCALE_BOUND


def gdpo_segmented(rewards: Tensor, weights: Tensor, seeds: int, *, eps: float = 1e-6) -> Tensor:
    """:func:`mrbench.methods.gdpo.gdpo` on each seed's ``[P, G, K]`` slice of ``rewards [S·P, G, K]``;
    returns ``[S·P, G]``."""
    prep = prepare(rewards, weights, nan_missing=True)
    z = group_zscores_(prep, eps)  # [S·P, K, G]
    s = z.mul_(prep.weights.unsqueeze(-1)).sum(dim=1)  # S = Σ_k w_k z_k: [S·P, G]
    per_seed = s.view(seeds, -1, s.shape[-1])  # [S, P, G]: the batch step per seed
    keepf = prep.keepf.view(per_seed.shape)
    count = center_(per_seed, keepf, dim=(1, 2))
    std = std_from_centered(per_seed, count, dim=(1, 2))
    per_seed.mul_(reciprocal(std + eps))
    return finish_(s, prep.keep, rewards)


def _corr_sum_per_seed(u: Tensor, keepf: Tensor) -> Tensor:
    """``corr_sum_(u, keep, dim=(0, 2))`` of :mod:`mrbench.methods._stats` per seed: Σ_kl ρ_kl over
    each seed's batch. ``u [S, P, K, G]`` (consumed), ``keepf [S, P, 1, G]``; returns ``[S, 1, 1, 1]``."""
    count = center_(u, keepf, dim=(1, 3))
    inv = reciprocal(std_from_centered(u, count, dim=(1, 3)))  # 1/σ_k per seed: [S, 1, K, 1]
    total = u.mul_(inv).sum(dim=2, keepdim=True)  # Σ_k u_ik: [S, P, 1, G]
    return (total * total).sum(dim=(1, 3), keepdim=True) / (count - 1).clamp_min(1)


def gdpo_corr_segmented(rewards: Tensor, weights: Tensor, seeds: int, *, eps: float = 1e-6) -> Tensor:
    """:func:`mrbench.methods.corrgrpo.gdpo_corr` on each seed's ``[P, G, K]`` slice of
    ``rewards [S·P, G, K]``; returns ``[S·P, G]``."""
    prep = prepare(rewards, weights, nan_missing=True)
    u = group_zscores_(prep, eps).mul_(prep.weights.unsqueeze(-1))  # w_k z_k: [S·P, K, G]
    centered = u.sum(dim=1)  # [S·P, G]
    per_seed = centered.view(seeds, -1, centered.shape[-1])  # [S, P, G]
    keepf = prep.keepf.view(per_seed.shape)
    center_(per_seed, keepf, dim=(1, 2))
    rho_sum = _corr_sum_per_seed(u.view(seeds, -1, *u.shape[1:]), keepf.unsqueeze(2))  # [S, 1, 1, 1]
    denom = torch.sqrt(rho_sum.view(seeds, 1, 1).clamp_min(0.0) + eps)  # [S, 1, 1]
    per_seed.div_(denom)
    return finish_(centered, prep.keep, rewards)


def _registered() -> dict[Any, Segmented]:
    """Registered function → its segmented version (imported on use: methods register on import)."""
    from mrbench.methods.corrgrpo import gdpo_corr
    from mrbench.methods.gdpo import gdpo

    return {gdpo: gdpo_segmented, gdpo_corr: gdpo_corr_segmented}


PROBE_SHAPE = (3, 4, 6)
"""Seeds × prompts × rollouts of the probe batch of :func:`segmented_for`."""


def _probe_rewards(k: int) -> Tensor:
    """A probe batch ``[S·P, G, K]``: seeds of different scales, a constant component in one group,
    a missing value, an unscorable rollout and a group with one scorable rollout."""
    seeds, prompts, rollouts = PROBE_SHAPE
    gen = torch.Generator().manual_seed(0)
    rewards = torch.randn(seeds * prompts, rollouts, k, generator=gen, dtype=torch.float64)
    rewards[prompts : 2 * prompts] *= 7.0
    rewards[1, :, 0] = 0.5  # a constant component
    rewards[2, 1, -1] = torch.nan  # a missing value
    rewards[prompts + 1, 2] = torch.nan  # an unscorable rollout
    rewards[2 * prompts, 1:] = torch.nan  # a group with one scorable rollout
    return rewards


def segmented_for(fn: Any, params: dict[str, Any], weights: Tensor) -> Segmented | None:
    """The segmented version of the registered function ``fn`` with ``params``, when there is one
    and it returns exactly (bit for bit) what ``fn`` returns seed by seed on a probe batch;
    else None (the lab then calls ``fn`` once per seed)."""
    segmented = _registered().get(fn)
    if segmented is None:
        return None
    seeds = PROBE_SHAPE[0]
    rewards = _probe_rewards(weights.shape[0])
    expected = torch.cat([fn(chunk, weights, **params) for chunk in rewards.chunk(seeds)])
    if not torch.equal(segmented(rewards, weights, seeds, **params), expected):
        return None
    return segmented


def call_segmented(
    segmented: Segmented, fn: Any, rewards: Tensor, weights: Tensor, seeds: int, params: dict[str, Any]
) -> Tensor:
    """``segmented`` on ``rewards [S·P, G, K]``, or ``fn`` per seed where rewards reach the
    rescaling bound (see the module docstring); returns ``[S·P, G]``."""
    if _within_bound(rewards, weights):
        return segmented(rewards, weights, seeds, **params)
    return torch.cat([fn(chunk, weights, **params) for chunk in rewards.chunk(seeds)])
