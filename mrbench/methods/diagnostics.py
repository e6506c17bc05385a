"""Why do estimators differ? Per-batch diagnostics computed from rewards and advantages."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from mrbench.methods._stats import center, prepare, reciprocal, std_from_centered


def _float_or_none(x: Tensor | float) -> float | None:
    value = float(x)
    return value if math.isfinite(value) else None


def diagnostics(
    rewards: Tensor,
    weights: Tensor,
    advantages: Tensor,
    *,
    grpo_advantages: Tensor | None = None,
) -> dict[str, Any]:
    """Summary statistics of one batch, as JSON-serialisable Python values.

    All statistics use the rollouts that enter the estimators' statistics: scorable rollouts of
    groups with ≥ 2 scorable rollouts, missing components counted as 0 (see ``mrbench.methods._stats``).
    Correlations are Pearson, per group, of the *weighted* components ``w_k r_k``; a pair is
    undefined in a group where either component is constant.

    Args:
        rewards: ``[P, G, K]`` rewards; NaN/±inf = unscorable.
        weights: ``[K]`` component weights.
        advantages: ``[P, G]`` advantages of the method being diagnosed.
        grpo_advantages: ``[P, G]`` GRPO's advantages for the same batch (computed with
            ``grpo``'s defaults when omitted).

    Returns:
        ``mean_offdiag_corr``: mean over groups of the mean defined off-diagonal correlation
        (None if no group has one).
        ``corr_matrix``: ``K × K`` mean per-group correlation, None where never defined.
        ``share``: K floats summing to 1; ``share_k`` = mean over groups of
        ``|corr_g(A, w_k r_k)| / Σ_l |corr_g(A, w_l r_l)|``, a scale-free measure of how strongly
        each component drives the advantage's ordering within the group (groups where A or
        every component is constant are skipped; all None if none is left).
        ``frac_zero_var_groups``: fraction of groups whose weighted total R has zero variance
        (a group with < 2 scorable rollouts counts as zero variance: it has no signal).
        ``denominator_mean`` / ``denominator_median``: effective normalisation scale
        ``std_g(R) / std_g(A)`` over groups where both are > 0 (method-agnostic; None if none).
        ``sign_flip_vs_grpo``: among scorable rollouts where both advantages are nonzero, the
        fraction whose sign differs from GRPO's (0.0 if there are none).
        ``adv_abs_mean``, ``adv_std`` (n − 1), ``adv_max_abs``: over scorable rollouts.
    """
    prep = prepare(rewards, weights)
    keepf = prep.keepf  # [P, G] 1.0 for rollouts that enter the statistics
    k = rewards.shape[-1]
    adv = torch.nan_to_num(advantages.to(torch.float64)) * keepf

    # Standardised weighted components per group: u[p, k, g] = centred / σ (0 where constant).
    components = prep.weighted_()  # w_k r_k: [P, K, G]
    total = components.sum(dim=1)  # [P, G], 0 off keep
    comp_centered, count = center(components, keepf.unsqueeze(1), dim=-1)
    comp_std = std_from_centered(comp_centered, count, dim=-1)  # [P, K, 1]
    u = comp_centered * reciprocal(comp_std)  # [P, K, G]
    dof = (count - 1).clamp_min(1).reshape(-1, 1)  # [P, 1]

    # Per-group correlation matrix [P, K, K], defined where both components vary.
    corr = (u @ u.transpose(1, 2)) / dof.unsqueeze(-1)
    v = comp_std.squeeze(-1) > 0  # [P, K]
    defined = v.unsqueeze(-1) & v.unsqueeze(-2)
    offdiag = defined & ~torch.eye(k, dtype=torch.bool, device=defined.device)
    n_off = offdiag.sum(dim=(1, 2))
    group_off = torch.where(offdiag, corr, 0.0).sum(dim=(1, 2)) / n_off.clamp_min(1)
    has_off = n_off > 0
    mean_offdiag = group_off[has_off].mean() if bool(has_off.any()) else math.nan
    n_def = defined.sum(dim=0)
    corr_mean = torch.where(defined, corr, 0.0).sum(dim=0) / n_def.clamp_min(1)
    corr_matrix = [
        [float(corr_mean[i, j]) if int(n_def[i, j]) > 0 else None for j in range(k)] for i in range(k)
    ]

    # Share of the advantage: |corr(A, w_k r_k)| normalised per group.
    a_centered, a_count = center(adv, keepf, dim=1)  # [P, G], [P, 1]
    a_std = std_from_centered(a_centered, a_count, dim=1)  # [P, 1]
    a_u = a_centered * reciprocal(a_std)
    corr_a = (u @ a_u.unsqueeze(-1)).squeeze(-1).abs() / dof  # [P, K]
    corr_total = corr_a.sum(dim=-1, keepdim=True)
    has_share = corr_total.squeeze(-1) > 0
    if bool(has_share.any()):
        share_t = (corr_a[has_share] / corr_total[has_share]).mean(dim=0)
        share: list[float | None] = [float(x) for x in share_t]
    else:
        share = [None] * k

    # Zero-variance groups and effective denominators, from the weighted total.
    r_centered, r_count = center(total, keepf, dim=1)
    r_std = std_from_centered(r_centered, r_count, dim=1).squeeze(1)  # [P]
    frac_zero = float((r_std == 0).double().mean()) if r_std.numel() else 0.0
    both = (r_std > 0) & (a_std.squeeze(1) > 0)
    if bool(both.any()):
        denoms = r_std[both] / a_std.squeeze(1)[both]
        denominator_mean: float | None = float(denoms.mean())
        denominator_median: float | None = float(torch.quantile(denoms, 0.5))
    else:
        denominator_mean = denominator_median = None

    if grpo_advantages is None:
        from mrbench.methods.grpo import grpo

        grpo_advantages = grpo(rewards, weights)
    g_adv = torch.nan_to_num(grpo_advantages.to(torch.float64)) * keepf
    nonzero = (adv != 0) & (g_adv != 0)
    n_nonzero = int(nonzero.sum())
    flips = (torch.sign(adv) != torch.sign(g_adv)) & nonzero
    sign_flip = float(flips.sum()) / n_nonzero if n_nonzero else 0.0

    scorable = torch.isfinite(rewards).any(dim=-1)
    a_sc = torch.nan_to_num(advantages.to(torch.float64))[scorable]
    n_sc = a_sc.numel()
    return {
        "mean_offdiag_corr": _float_or_none(mean_offdiag),
        "corr_matrix": corr_matrix,
        "share": share,
        "frac_zero_var_groups": frac_zero,
        "denominator_mean": denominator_mean,
        "denominator_median": denominator_median,
        "sign_flip_vs_grpo": sign_flip,
        "adv_abs_mean": float(a_sc.abs().mean()) if n_sc else 0.0,
        "adv_std": float(a_sc.std()) if n_sc > 1 else 0.0,
        "adv_max_abs": float(a_sc.abs().max()) if n_sc else 0.0,
    }
