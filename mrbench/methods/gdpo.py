"""GDPO: z-score every reward component within its group, sum, then normalise over the batch."""

from __future__ import annotations

from typing import Annotated

from torch import Tensor

from mrbench.core.registry import Range
from mrbench.methods._registry import register_method
from mrbench.methods._stats import center_, finish_, group_zscores_, prepare, reciprocal, std_from_centered


def _group_sums(rewards: Tensor, weights: Tensor, eps: float) -> tuple[Tensor, Tensor, Tensor]:
    """S = Σ_k w_k z_k ``[P, G]`` (float64), the bool ``keep`` mask and its float version."""
    prep = prepare(rewards, weights, nan_missing=True)
    z = group_zscores_(prep, eps)  # [P, K, G]
    return z.mul_(prep.weights.unsqueeze(-1)).sum(dim=1), prep.keep, prep.keepf


@register_method("gdpo")
def gdpo(rewards: Tensor, weights: Tensor, *, eps: Annotated[float, Range(ge=0)] = 1e-6) -> Tensor:
    """GDPO: S = Σ_k w_k (r_k − mean_g r_k)/(std_g r_k + eps), then A = (S − mean_B S)/(std_B S + eps).

    Args:
        rewards: ``[P, G, K]`` rewards; NaN/±inf = unscorable.
        weights: ``[K]`` component weights.
        eps: added to both the per-group component std and the batch std (n − 1 stds); ≥ 0 (0:
            exact z-scores; a zero std gives 0).

    Returns:
        ``[P, G]`` advantages. Per-component statistics are NaN-aware (a missing component
        contributes 0 to S); the batch B is every scorable rollout of a group with ≥ 2 scorable
        rollouts; everything else gets 0. Equals TRL 1.16's ``normalize_then_sum`` when
        ``eps=1e-4`` except that TRL keeps a lone scorable rollout of a group (S = 0) in the
        batch statistics, where here it is dropped and gets 0.
    """
    s, keep, keepf = _group_sums(rewards, weights, eps)
    count = center_(s, keepf, dim=(0, 1))
    std = std_from_centered(s, count, dim=(0, 1))
    return finish_(s.mul_(reciprocal(std + eps)), keep, rewards)


@register_method("gdpo-nobn")
def gdpo_nobn(rewards: Tensor, weights: Tensor, *, eps: Annotated[float, Range(ge=0)] = 1e-6) -> Tensor:
    """GDPO without the batch step: A = S = Σ_k w_k (r_k − mean_g r_k)/(std_g r_k + eps).

    Args:
        rewards: ``[P, G, K]`` rewards; NaN/±inf = unscorable.
        weights: ``[K]`` component weights.
        eps: added to the per-group component std (n − 1); ≥ 0.

    Returns:
        ``[P, G]`` advantages (same NaN rules as :func:`gdpo`); zero mean per group when no
        component is missing.
    """
    s, keep, _ = _group_sums(rewards, weights, eps)
    return finish_(s, keep, rewards)
