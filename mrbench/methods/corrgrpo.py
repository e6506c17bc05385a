"""CorrGRPO and relatives: normalise by the components' correlation structure instead of the std.

Why: GRPO divides by std(R), and Var(R) = Σ_kl Cov(r_k, r_l) is dominated by large-scale,
correlated components. CorrGRPO keeps GRPO's centred total but divides by sqrt(Σ_kl ρ_kl), which
depends on how the components co-vary, not on their scales.
"""

from __future__ import annotations

from typing import Annotated

import torch
from torch import Tensor

from mrbench.core.registry import Range
from mrbench.methods._registry import register_method
from mrbench.methods._stats import center_, corr_sum_, finish_, group_zscores_, prepare


def _corrgrpo(rewards: Tensor, weights: Tensor, eps: float, floor: float) -> Tensor:
    prep = prepare(rewards, weights)
    components = prep.weighted_()  # w_k r_k: [P, K, G]
    # Numerator: Σ_k w_k (r_k − mean r_k) = R − mean R, centred like GRPO's numerator so that
    # ordering and ties inside a group are identical to GRPO's.
    centered = components.sum(dim=1)
    center_(centered, prep.keepf, dim=1)
    rho_sum = corr_sum_(components, prep.keepf.unsqueeze(1), dim=-1)  # [P, 1, 1]
    denom = torch.sqrt(rho_sum.squeeze(-1).clamp_min(floor) + eps)  # [P, 1]
    return finish_(centered.div_(denom), prep.keep, rewards, unit=prep.unit)  # reward units


@register_method("corrgrpo")
def corrgrpo(rewards: Tensor, weights: Tensor, *, eps: Annotated[float, Range(gt=0)] = 1e-6) -> Tensor:
    """CorrGRPO (faithful): A = (R − mean_g R) / sqrt(max(0, Σ_kl ρ_kl) + eps), per group.

    ρ is the within-group Pearson correlation matrix of the weighted components ``w_k r_k``; a
    constant component has 1/σ = 0 so its row and column (diagonal included) count 0. Same sign
    and ordering as GRPO inside a group; advantages stay in reward units. With anti-correlated
    components Σρ → 0 and the advantages blow up: R2 = −2·R1 gives Σρ = 0, so
    A = 1000·(R − mean R) at eps = 1e-6 (±500 for binary R1); ``corrgrpo-guarded`` prevents that.

    Args:
        rewards: ``[P, G, K]`` rewards; NaN/±inf = unscorable (missing components count 0 both in
            R and in the correlations).
        weights: ``[K]`` component weights.
        eps: added under the square root; > 0, as Σρ can be exactly 0.

    Returns:
        ``[P, G]`` advantages; 0 for unscorable rollouts and groups with < 2 scorable rollouts.
    """
    return _corrgrpo(rewards, weights, eps, 0.0)


@register_method("corrgrpo-guarded")
def corrgrpo_guarded(
    rewards: Tensor,
    weights: Tensor,
    *,
    eps: Annotated[float, Range(gt=0)] = 1e-6,
    min_corr_sum: Annotated[float, Range(ge=0)] = 1.0,
) -> Tensor:
    """CorrGRPO with a floored denominator: A = (R − mean_g R) / sqrt(max(min_corr_sum, Σ_kl ρ_kl) + eps).

    Design: Σ_kl ρ_kl is K² for K perfectly correlated components, K for uncorrelated ones and
    exactly 1 for a single varying component (where CorrGRPO reduces to Dr. GRPO). Values below
    1 only arise from anti-correlation, where components cancel in R; dividing by
    sqrt(Σρ) < 1 then *amplifies* the residual, up to 1/sqrt(eps) = 1000× when they cancel
    exactly. Flooring Σρ at 1 means the method never amplifies beyond Dr. GRPO, so
    |A| ≤ |R − mean_g R| ≤ the range of R in the group: bounded by the reward scale whatever the
    correlations. Wherever Σρ ≥ 1 (the usual case) it equals faithful ``corrgrpo``.

    Args:
        rewards: ``[P, G, K]`` rewards; NaN/±inf = unscorable.
        weights: ``[K]`` component weights.
        eps: added under the square root; > 0.
        min_corr_sum: floor on Σ_kl ρ_kl (1.0 = never amplify; 0.0 = faithful ``corrgrpo``).

    Returns:
        ``[P, G]`` advantages; 0 for unscorable rollouts and groups with < 2 scorable rollouts.
    """
    return _corrgrpo(rewards, weights, eps, max(0.0, float(min_corr_sum)))


@register_method("gdpo-corr")
def gdpo_corr(rewards: Tensor, weights: Tensor, *, eps: Annotated[float, Range(gt=0)] = 1e-6) -> Tensor:
    """GDPO z-scores, then batch correlation normalisation: A = (S − mean_B S)/sqrt(max(0, Σρ_B) + eps).

    S = Σ_k w_k z_k with z_k GDPO's per-group z-scores (std + eps, n − 1, NaN-aware); ρ_B is the
    Pearson correlation of the weighted z-scored components ``w_k z_k`` over the batch B (every
    scorable rollout of a group with ≥ 2 scorable rollouts), constant ones counting 0.

    Args:
        rewards: ``[P, G, K]`` rewards; NaN/±inf = unscorable.
        weights: ``[K]`` component weights.
        eps: added to the per-group component std and under the square root; > 0.

    Returns:
        ``[P, G]`` advantages; 0 off B.
    """
    prep = prepare(rewards, weights, nan_missing=True)
    u = group_zscores_(prep, eps).mul_(prep.weights.unsqueeze(-1))  # w_k z_k: [P, K, G]
    centered = u.sum(dim=1)
    center_(centered, prep.keepf, dim=(0, 1))
    rho_sum = corr_sum_(u, prep.keepf.unsqueeze(1), dim=(0, 2))  # [1, 1, 1]
    denom = torch.sqrt(rho_sum.reshape(()).clamp_min(0.0) + eps)
    return finish_(centered.div_(denom), prep.keep, rewards)
