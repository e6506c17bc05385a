"""Why do estimators differ? Per-batch diagnostics computed from rewards and advantages.

:func:`diagnostics` describes one method's advantages (correlations, shares, denominators,
sign flips against GRPO). The shadow section compares the method in use with other methods on
the same batch: :func:`sign_agreement`, :func:`rank_correlation` (Spearman per group),
:func:`resolution` (distinct advantages per distinct reward vector) and their batch summary
:func:`shadow_diagnostics`.
"""

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


# ----------------------------------------------------------------------------- shadow estimators
#
# How would the other estimators have judged the batch a run trains on? The trainer computes
# their advantages on the same rewards ("shadows") and compares each with the method in use:
# same direction (sign agreement), same order within the group (Spearman rank correlation),
# and how many distinct reward vectors each keeps apart (resolution: GRPO maps reward vectors
# with the same weighted total to one advantage, GDPO's argument for per-component scores).
# Only the rollouts that enter the estimators' statistics count (:func:`kept_rollouts`).

RESOLUTION_RTOL = 1e-6
"""Advantages closer than this × the group's largest |advantage| count as one value. Float32
advantages carry rounding of ~6e-8 relative, so mathematically equal values (equal totals summed
in another order) still compare equal, while any real difference in rewards survives."""


def kept_rollouts(rewards: Tensor) -> Tensor:
    """``[P, G]`` bool: the rollouts that enter the estimators' statistics.

    A rollout is kept when one of its components is finite and its group has ≥ 2 such rollouts
    (the rules of :mod:`mrbench.methods._stats`; NaN/±inf = unscorable).

    Args:
        rewards: ``[P, G, K]`` rewards.

    >>> nan = float("nan")
    >>> kept_rollouts(torch.tensor([[[1.0], [nan], [2.0]], [[1.0], [nan], [nan]]])).tolist()
    [[True, False, True], [False, False, False]]
    """
    scorable = torch.isfinite(rewards).any(dim=-1)
    return scorable & (scorable.sum(dim=1, keepdim=True) >= 2)


def sign_agreement(advantages: Tensor, other: Tensor, keep: Tensor) -> Tensor:
    """Pooled fraction of rollouts whose two advantages push the same way.

    Args:
        advantages, other: ``[P, G]`` advantages of two methods on one batch (NaN counts as 0).
        keep: ``[P, G]`` bool, the rollouts to compare (:func:`kept_rollouts`).

    Returns:
        0-d float64: among kept rollouts where both advantages are nonzero, the fraction with the
        same sign; NaN when there are none (a zero advantage has no direction to agree with). With
        ``other`` = GRPO's advantages this is ``1 − sign_flip_vs_grpo`` of :func:`diagnostics`.

    >>> a, b = torch.tensor([[1.0, -2.0, 0.0, 3.0]]), torch.tensor([[2.0, 1.0, -1.0, 0.5]])
    >>> round(float(sign_agreement(a, b, torch.ones(1, 4, dtype=torch.bool))), 4)
    0.6667
    """
    a = torch.nan_to_num(advantages.to(torch.float64))
    b = torch.nan_to_num(other.to(torch.float64))
    both = keep & (a != 0) & (b != 0)
    compared = both.sum().to(torch.float64)
    same = (both & ((a > 0) == (b > 0))).sum().to(torch.float64)
    return torch.where(compared > 0, same / compared.clamp_min(1), math.nan)


def value_ranks(values: Tensor, keep: Tensor, *, rtol: float = RESOLUTION_RTOL) -> tuple[Tensor, Tensor]:
    """Within-group ranks of ``values`` with ties, and the number of distinct values per group.

    Values of a group are sorted; neighbours closer than ``rtol`` × the group's largest |value|
    belong to one tie (a chain of such neighbours too), and every member of a tie gets the tie's
    average rank (1-based), as in Spearman's correlation with ties.

    Args:
        values: ``[P, G]``; NaN counts as 0.
        keep: ``[P, G]`` bool; other rollouts are left out (rank 0, not counted).

    Returns:
        ``ranks`` ``[P, G]`` float64 (0 off ``keep``) and ``distinct`` ``[P]`` int64 (0 for a
        group with nothing kept).

    >>> keep = torch.ones(1, 4, dtype=torch.bool)
    >>> ranks, distinct = value_ranks(torch.tensor([[0.5, -1.0, 0.5, 2.0]]), keep)
    >>> ranks.tolist(), distinct.tolist()
    ([[2.5, 1.0, 2.5, 4.0]], [3])
    """
    p, g = values.shape
    x = torch.nan_to_num(values.to(torch.float64))
    if g == 0:
        return x, torch.zeros(p, dtype=torch.int64, device=x.device)
    kept = torch.where(keep, x, math.inf)  # kept values sort first
    ordered, order = kept.sort(dim=1, stable=True)
    n = keep.sum(dim=1, keepdim=True)  # [P, 1]
    position = torch.arange(g, device=values.device)
    valid = position < n  # [P, G]: sorted slots holding a kept value
    tol = rtol * torch.where(keep, x.abs(), 0.0).amax(dim=1, keepdim=True)  # [P, 1]
    gap = (ordered[:, 1:] - ordered[:, :-1] > tol) & valid[:, 1:]
    starts = torch.cat([valid[:, :1], gap], dim=1)  # first slot of each tie
    tie = (starts.cumsum(dim=1) - 1).clamp_min(0)  # [P, G] tie index of each sorted slot
    validf = valid.to(torch.float64)
    rank_sum = torch.zeros(p, g, dtype=torch.float64, device=values.device)
    rank_sum.scatter_add_(1, tie, (position + 1).to(torch.float64) * validf)
    tie_size = torch.zeros_like(rank_sum).scatter_add_(1, tie, validf)
    sorted_ranks = (rank_sum / tie_size.clamp_min(1)).gather(1, tie) * validf
    ranks = torch.zeros_like(rank_sum).scatter_(1, order, sorted_ranks)
    return ranks, starts.sum(dim=1)


def _spearman(
    ranks_a: Tensor, distinct_a: Tensor, ranks_b: Tensor, distinct_b: Tensor, keep: Tensor
) -> Tensor:
    """Pearson correlation of two rank tensors per group (``[P]``; NaN where either is constant)."""
    keepf = keep.to(torch.float64)
    a, _ = center(ranks_a, keepf, dim=1)
    b, _ = center(ranks_b, keepf, dim=1)
    defined = (distinct_a >= 2) & (distinct_b >= 2)
    denom = torch.sqrt((a * a).sum(dim=1) * (b * b).sum(dim=1))
    rho = (a * b).sum(dim=1) / torch.where(defined, denom, 1.0)
    return torch.where(defined, rho.clamp(-1.0, 1.0), math.nan)


def rank_correlation(
    advantages: Tensor, other: Tensor, keep: Tensor, *, rtol: float = RESOLUTION_RTOL
) -> Tensor:
    """Spearman rank correlation of two methods' advantages within each group.

    Args:
        advantages, other: ``[P, G]`` advantages on one batch (NaN counts as 0).
        keep: ``[P, G]`` bool, the rollouts to compare (:func:`kept_rollouts`).
        rtol: tie tolerance of :func:`value_ranks`.

    Returns:
        ``[P]`` float64 in [−1, 1]; NaN for a group where either method has < 2 distinct values.

    >>> a = torch.tensor([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0]])
    >>> b = torch.tensor([[10.0, 30.0, 20.0], [1.0, 2.0, 3.0]])
    >>> rank_correlation(a, b, torch.ones(2, 3, dtype=torch.bool)).tolist()
    [0.5, nan]
    """
    ranks_a, distinct_a = value_ranks(advantages, keep, rtol=rtol)
    ranks_b, distinct_b = value_ranks(other, keep, rtol=rtol)
    return _spearman(ranks_a, distinct_a, ranks_b, distinct_b, keep)


def reward_vector_counts(rewards: Tensor, keep: Tensor) -> Tensor:
    """Number of distinct reward vectors among the kept rollouts of each group.

    Two rollouts have the same vector when every component is equal or missing in both
    (NaN/±inf all count as "missing").

    Args:
        rewards: ``[P, G, K]``.
        keep: ``[P, G]`` bool (:func:`kept_rollouts`).

    Returns:
        ``[P]`` int64.

    >>> r = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [1.0, 0.0], [0.0, float("nan")]]])
    >>> reward_vector_counts(r, torch.ones(1, 4, dtype=torch.bool)).tolist()
    [3]
    """
    g = rewards.shape[1]
    missing = ~torch.isfinite(rewards)
    equal = (rewards.unsqueeze(2) == rewards.unsqueeze(1)) | (missing.unsqueeze(2) & missing.unsqueeze(1))
    same = equal.all(dim=-1)  # [P, G, G]: rollouts i and j have the same vector
    earlier = torch.ones(g, g, dtype=torch.bool, device=rewards.device).tril(-1)  # j < i
    repeated = (same & earlier & keep.unsqueeze(1)).any(dim=-1)  # an earlier kept rollout has it
    return (keep & ~repeated).sum(dim=1)


def _resolution(distinct_adv: Tensor, vectors: Tensor) -> Tensor:
    ratio = distinct_adv.to(torch.float64) / vectors.clamp_min(1)
    return torch.where(vectors >= 2, ratio, math.nan)


def resolution(advantages: Tensor, rewards: Tensor, keep: Tensor, *, rtol: float = RESOLUTION_RTOL) -> Tensor:
    """Advantage resolution per group: distinct advantages / distinct reward vectors.

    1 means the method gives every distinct reward vector of the group its own advantage; GRPO
    gives one value to all vectors with the same weighted total (e.g. [1, 0] and [0, 1]).

    Args:
        advantages: ``[P, G]`` one method's advantages.
        rewards: ``[P, G, K]`` the rewards they came from.
        keep: ``[P, G]`` bool (:func:`kept_rollouts`).
        rtol: tie tolerance of :func:`value_ranks`.

    Returns:
        ``[P]`` float64 in (0, 1] for a deterministic method; NaN for a group with < 2 distinct
        reward vectors (nothing to keep apart: every method scores 1 there).

    >>> r = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [0.0, 0.0], [1.0, 1.0]]])
    >>> keep = torch.ones(1, 4, dtype=torch.bool)
    >>> resolution(r.sum(-1) - 1.0, r, keep).tolist()  # totals 1, 1, 0, 2: three values for four vectors
    [0.75]
    """
    _, distinct = value_ranks(advantages, keep, rtol=rtol)
    return _resolution(distinct, reward_vector_counts(rewards, keep))


def _nanmean(x: Tensor) -> float | None:
    return _float_or_none(x.nanmean()) if x.numel() else None


def shadow_diagnostics(
    rewards: Tensor,
    advantages: Tensor,
    shadows: dict[str, Tensor],
    *,
    rtol: float = RESOLUTION_RTOL,
) -> dict[str, Any]:
    """Compare the method in use with shadow methods on one batch, as JSON-ready values.

    Args:
        rewards: ``[P, G, K]`` rewards; NaN/±inf = unscorable.
        advantages: ``[P, G]`` advantages of the method in use.
        shadows: method name → ``[P, G]`` advantages of that method on the same rewards.
        rtol: tie tolerance of :func:`value_ranks`.

    Returns:
        ``{"resolution": <in use>, "shadow": {name: {"sign_agree", "rank_corr", "resolution"}}}``:
        ``sign_agree`` is :func:`sign_agreement` (pooled over rollouts), ``rank_corr`` the mean
        over groups of :func:`rank_correlation` where defined, ``resolution`` the mean over groups
        of :func:`resolution` where defined; None where undefined for the whole batch.

    >>> r = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [0.0, 1.0], [0.0, 0.0]]])
    >>> d = shadow_diagnostics(r, r.sum(-1), {"per-component": r[..., 0] + 2 * r[..., 1]})
    >>> round(d["resolution"], 4), d["shadow"]["per-component"]["resolution"]
    (0.6667, 1.0)
    """
    keep = kept_rollouts(rewards)
    vectors = reward_vector_counts(rewards, keep)
    ranks, distinct = value_ranks(advantages, keep, rtol=rtol)
    compared: dict[str, dict[str, float | None]] = {}
    for name, other in shadows.items():
        other_ranks, other_distinct = value_ranks(other, keep, rtol=rtol)
        compared[name] = {
            "sign_agree": _float_or_none(sign_agreement(advantages, other, keep)),
            "rank_corr": _nanmean(_spearman(ranks, distinct, other_ranks, other_distinct, keep)),
            "resolution": _nanmean(_resolution(other_distinct, vectors)),
        }
    return {"resolution": _nanmean(_resolution(distinct, vectors)), "shadow": compared}
