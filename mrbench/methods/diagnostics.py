"""Why do estimators differ? Per-batch diagnostics computed from rewards and advantages.

:func:`diagnostics` describes one method's advantages (correlations, shares, denominators,
sign flips against GRPO). The shadow section compares the method in use with other methods on
the same batch: :func:`sign_agreement`, :func:`rank_correlation` (Spearman per group),
:func:`resolution` (distinct advantages per distinct reward vector) and their batch summary
:func:`shadow_diagnostics`.

These are the one implementation of each concept: the estimator lab (:mod:`mrbench.lab`)
measures advantage resolution and opposite signs with the same functions
(:func:`resolution`, :func:`opposite_signs`).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from mrbench.core.records import BatchDiagnostics, ShadowComparison, ShadowStats
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
) -> BatchDiagnostics:
    """Summary statistics of one batch (:class:`~mrbench.core.records.BatchDiagnostics`).

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

    Returns (the record's fields):
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
        ``abs_mean``, ``std`` (n − 1), ``max_abs``: of the advantages over scorable rollouts.
    """
    prep = prepare(rewards, weights)
    keepf = prep.keepf  # [P, G] 1.0 for rollouts that enter the statistics
    adv = torch.nan_to_num(advantages.to(torch.float64)) * keepf
    components = prep.weighted_()  # w_k r_k: [P, K, G]
    total = components.sum(dim=1)  # [P, G], 0 off keep
    u, comp_std, dof = _standardised(components, keepf)
    mean_offdiag, corr_matrix = _component_correlations(u, comp_std, dof)
    share, a_std = _advantage_shares(u, dof, adv, keepf)
    frac_zero, denominator_mean, denominator_median = _denominators(total, keepf, a_std)
    if grpo_advantages is None:
        from mrbench.methods.grpo import grpo

        grpo_advantages = grpo(rewards, weights)
    return BatchDiagnostics(
        _float_or_none(mean_offdiag),
        corr_matrix,
        share,
        frac_zero,
        denominator_mean,
        denominator_median,
        _sign_flip(advantages, grpo_advantages, prep.keep),
        *_magnitudes(rewards, advantages),
    )


def _standardised(components: Tensor, keepf: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Standardise each weighted component within its group.

    Args:
        components: ``[P, K, G]`` weighted components, 0 off keep.
        keepf: ``[P, G]`` 1.0 for kept rollouts.

    Returns:
        ``u`` ``[P, K, G]`` (centred / σ over kept rollouts; 0 where a component is constant),
        ``comp_std`` ``[P, K, 1]`` (σ, n − 1) and ``dof`` ``[P, 1]`` (kept count − 1, at least 1).
    """
    comp_centered, count = center(components, keepf.unsqueeze(1), dim=-1)
    comp_std = std_from_centered(comp_centered, count, dim=-1)  # [P, K, 1]
    u = comp_centered * reciprocal(comp_std)  # [P, K, G]
    dof = (count - 1).clamp_min(1).reshape(-1, 1)  # [P, 1]
    return u, comp_std, dof


def _component_correlations(
    u: Tensor, comp_std: Tensor, dof: Tensor
) -> tuple[Tensor | float, list[list[float | None]]]:
    """Per-group component correlations, summarised.

    Args:
        u, comp_std, dof: of :func:`_standardised` (``[P, K, G]``, ``[P, K, 1]``, ``[P, 1]``).

    Returns:
        The mean over groups of each group's mean defined off-diagonal correlation (NaN when no
        group has one), and the ``K × K`` mean over groups where a pair is defined (None where never).
    """
    k = u.shape[1]
    corr = (u @ u.transpose(1, 2)) / dof.unsqueeze(-1)  # [P, K, K]
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
    return mean_offdiag, corr_matrix


def _advantage_shares(
    u: Tensor, dof: Tensor, adv: Tensor, keepf: Tensor
) -> tuple[list[float | None], Tensor]:
    """Share of the advantage: ``|corr(A, w_k r_k)|`` normalised per group, mean over groups.

    Args:
        u, dof: of :func:`_standardised` (``[P, K, G]``, ``[P, 1]``).
        adv: ``[P, G]`` advantages, 0 off keep.
        keepf: ``[P, G]`` 1.0 for kept rollouts.

    Returns:
        K shares (all None when no group has a varying advantage and component), and the
        advantages' within-group σ ``[P, 1]``.
    """
    a_centered, a_count = center(adv, keepf, dim=1)  # [P, G], [P, 1]
    a_std = std_from_centered(a_centered, a_count, dim=1)  # [P, 1]
    a_u = a_centered * reciprocal(a_std)
    corr_a = (u @ a_u.unsqueeze(-1)).squeeze(-1).abs() / dof  # [P, K]
    corr_total = corr_a.sum(dim=-1, keepdim=True)
    has_share = corr_total.squeeze(-1) > 0
    if not bool(has_share.any()):
        return [None] * u.shape[1], a_std
    share_t = (corr_a[has_share] / corr_total[has_share]).mean(dim=0)
    return [float(x) for x in share_t], a_std


def _denominators(total: Tensor, keepf: Tensor, a_std: Tensor) -> tuple[float, float | None, float | None]:
    """Zero-variance groups and effective denominators, from the weighted total.

    Args:
        total: ``[P, G]`` weighted totals, 0 off keep.
        keepf: ``[P, G]`` 1.0 for kept rollouts.
        a_std: ``[P, 1]`` the advantages' within-group σ.

    Returns:
        The fraction of groups whose total has zero variance, and the mean and median of
        ``std_g(R) / std_g(A)`` over groups where both are > 0 (None if there are none).
    """
    r_centered, r_count = center(total, keepf, dim=1)
    r_std = std_from_centered(r_centered, r_count, dim=1).squeeze(1)  # [P]
    frac_zero = float((r_std == 0).double().mean()) if r_std.numel() else 0.0
    both = (r_std > 0) & (a_std.squeeze(1) > 0)
    if not bool(both.any()):
        return frac_zero, None, None
    denoms = r_std[both] / a_std.squeeze(1)[both]
    return frac_zero, float(denoms.mean()), float(torch.quantile(denoms, 0.5))


def _sign_flip(advantages: Tensor, grpo_advantages: Tensor, keep: Tensor) -> float:
    """Among kept rollouts where both advantages are nonzero (``[P, G]`` each), the fraction of
    opposite signs; 0.0 when there are none."""
    both, opposite = opposite_signs(advantages, grpo_advantages, keep)
    n_both = int(both.sum())
    return float(opposite.sum()) / n_both if n_both else 0.0


def _magnitudes(rewards: Tensor, advantages: Tensor) -> tuple[float, float, float]:
    """Mean |A|, std (n − 1) and max |A| of ``advantages [P, G]`` over the scorable rollouts of
    ``rewards [P, G, K]`` (0.0 where there are too few)."""
    scorable = torch.isfinite(rewards).any(dim=-1)
    a_sc = torch.nan_to_num(advantages.to(torch.float64))[scorable]
    n_sc = a_sc.numel()
    abs_mean = float(a_sc.abs().mean()) if n_sc else 0.0
    std = float(a_sc.std()) if n_sc > 1 else 0.0
    max_abs = float(a_sc.abs().max()) if n_sc else 0.0
    return abs_mean, std, max_abs


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


def _directions(values: Tensor, keep: Tensor, zero_rtol: float) -> Tensor:
    """``[P, G]`` float64 −1, 0 or +1: the sign of each kept value (NaN and rollouts off ``keep``
    count as 0; so does |value| ≤ ``zero_rtol`` × the group's largest kept |value|)."""
    x = torch.where(keep, torch.nan_to_num(values.to(torch.float64)), 0.0)
    if zero_rtol > 0 and x.numel():
        magnitude = x.abs()
        x = torch.where(magnitude > zero_rtol * magnitude.amax(dim=1, keepdim=True), x, 0.0)
    return torch.sign(x)


def opposite_signs(
    advantages: Tensor, other: Tensor, keep: Tensor, *, zero_rtol: float = 0.0
) -> tuple[Tensor, Tensor]:
    """Per rollout: whether both advantages push the policy, and whether they push opposite ways.

    The one comparison of directions behind :func:`sign_agreement`, ``sign_flip_vs_grpo`` of
    :func:`diagnostics` and the lab's ``sign_disagree`` (groups with an opposite sign); they
    aggregate it differently (pooled over rollouts, or "any rollout of the group").

    Args:
        advantages, other: ``[P, G]`` advantages of two methods on one batch (NaN counts as 0).
        keep: ``[P, G]`` bool, the rollouts to compare (:func:`kept_rollouts`).
        zero_rtol: a value within this fraction of its group's largest |value| has no direction.
            0 (the trainer's rule) takes only exact zeros as directionless; the lab, whose float64
            advantages of a rollout at its group's mean come out as ±1e-17, passes 1e-9.

    Returns:
        ``both`` and ``opposite``, ``[P, G]`` bool: kept rollouts where both advantages have a
        direction, and those of them where the directions differ.

    >>> a, b = torch.tensor([[1.0, -2.0, 0.0, 3.0]]), torch.tensor([[2.0, 1.0, -1.0, 1e-12]])
    >>> both, opposite = opposite_signs(a, b, torch.ones(1, 4, dtype=torch.bool))
    >>> both.tolist(), opposite.tolist()
    ([[True, True, False, True]], [[False, True, False, False]])
    >>> opposite_signs(a, b, torch.ones(1, 4, dtype=torch.bool), zero_rtol=1e-9)[0].tolist()
    [[True, True, False, False]]
    """
    a = _directions(advantages, keep, zero_rtol)
    b = _directions(other, keep, zero_rtol)
    both = (a != 0) & (b != 0)
    return both, both & (a != b)


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
    both, opposite = opposite_signs(advantages, other, keep)
    compared = both.sum().to(torch.float64)
    same = compared - opposite.sum().to(torch.float64)
    return torch.where(compared > 0, same / compared.clamp_min(1), math.nan)


def _ties(values: Tensor, keep: Tensor, rtol: float) -> tuple[Tensor, Tensor, Tensor]:
    """Sort each group's kept values and mark where a new value (tie) starts.

    Args:
        values: ``[P, G]`` with ``G ≥ 1``; NaN counts as 0.
        keep: ``[P, G]`` bool.
        rtol: neighbours closer than ``rtol`` × the group's largest kept |value| are one value.

    Returns:
        ``order`` ``[P, G]`` (the sorting permutation, kept values first), ``valid`` ``[P, G]``
        bool (sorted slots holding a kept value) and ``starts`` ``[P, G]`` bool (first slot of
        each tie).
    """
    x = torch.nan_to_num(values.to(torch.float64))
    kept = torch.where(keep, x, math.inf)  # kept values (finite after nan_to_num) sort first
    ordered, order = kept.sort(dim=1, stable=True)
    valid = ordered != math.inf  # [P, G]
    tol = rtol * torch.where(keep, x.abs(), 0.0).amax(dim=1, keepdim=True)  # [P, 1]
    gap = (ordered[:, 1:] - ordered[:, :-1] > tol) & valid[:, 1:]
    return order, valid, torch.cat([valid[:, :1], gap], dim=1)


def distinct_values(values: Tensor, keep: Tensor, *, rtol: float = RESOLUTION_RTOL) -> Tensor:
    """Number of distinct kept values per group: the ties of :func:`value_ranks`.

    Args:
        values: ``[P, G]``; NaN counts as 0.
        keep: ``[P, G]`` bool; other rollouts are not counted.
        rtol: neighbours closer than ``rtol`` × the group's largest kept |value| are one value
            (a chain of such neighbours too).

    Returns:
        ``[P]`` int64 (0 for a group with nothing kept).

    >>> keep = torch.tensor([[True, True, True, False]])
    >>> distinct_values(torch.tensor([[1.0, 1.0 + 1e-9, 2.0, 5.0]]), keep).tolist()
    [2]
    """
    if values.shape[1] == 0:
        return torch.zeros(values.shape[0], dtype=torch.int64, device=values.device)
    return _ties(values, keep, rtol)[2].sum(dim=1)


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
        group with nothing kept; :func:`distinct_values`).

    >>> keep = torch.ones(1, 4, dtype=torch.bool)
    >>> ranks, distinct = value_ranks(torch.tensor([[0.5, -1.0, 0.5, 2.0]]), keep)
    >>> ranks.tolist(), distinct.tolist()
    ([[2.5, 1.0, 2.5, 4.0]], [3])
    """
    p, g = values.shape
    if g == 0:
        return torch.zeros(p, 0, dtype=torch.float64, device=values.device), distinct_values(values, keep)
    order, valid, starts = _ties(values, keep, rtol)
    position = torch.arange(g, device=values.device)
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
    g, k = rewards.shape[1:]
    # Missing → +inf, which equals only itself; + 0.0 turns −0.0 into 0.0 (they compare equal anyway).
    canon = (torch.where(torch.isfinite(rewards), rewards, math.inf) + 0.0).transpose(1, 2).contiguous()
    earlier = torch.ones(g, g, dtype=torch.bool, device=rewards.device).tril(-1)  # j < i
    same = earlier & keep.unsqueeze(1)  # [P, G, G]: j < i is kept and, so far, i's vector
    equal = torch.empty_like(same)
    for c in range(k):  # one [P, G, G] comparison per component: cheaper than one [P, G, G, K]
        values = canon[:, c]  # [P, G]
        same &= torch.eq(values.unsqueeze(2), values.unsqueeze(1), out=equal)
    return (keep & ~same.any(dim=-1)).sum(dim=1)


def _resolution(distinct_adv: Tensor, vectors: Tensor) -> Tensor:
    ratio = distinct_adv.to(torch.float64) / vectors.clamp_min(1)
    return torch.where(vectors >= 2, ratio, math.nan)


def resolution(
    advantages: Tensor, rewards: Tensor, keep: Tensor | None = None, *, rtol: float = RESOLUTION_RTOL
) -> Tensor:
    """Advantage resolution per group: distinct advantages / distinct reward vectors.

    1 means the method gives every distinct reward vector of the group its own advantage; GRPO
    gives one value to all vectors with the same weighted total (e.g. [1, 0] and [0, 1]). This is
    the one definition: the trainer's ``adv/resolution`` and shadow resolutions and the lab's
    ``resolution`` score all call it. Its rules, and why:

    - Only the rollouts that enter the estimators' statistics count (:func:`kept_rollouts`): a
      rollout the estimators leave out gets advantage 0 whatever its rewards, which says nothing
      about how the method tells reward vectors apart.
    - Reward vectors are compared exactly (:func:`reward_vector_counts`): they are the tasks'
      outputs, not computed by the method, so any difference is one the method could act on.
      A missing component (NaN/±inf, as the estimators read it) is a value of its own: (1, NaN)
      and (1, 0) are different outcomes, and the per-component estimators treat them differently.
    - Advantages are compared with a relative tolerance (:func:`distinct_values`, ``rtol`` × the
      group's largest |advantage|): they are computed in floating point, and mathematically equal
      advantages (equal totals summed in another order) must count as one value, whatever the
      reward scale. Ties chain, as the ranks of :func:`rank_correlation` do.
    - Undefined (NaN) for a group with < 2 distinct reward vectors: there is nothing to keep apart.

    Args:
        advantages: ``[P, G]`` one method's advantages (NaN counts as 0).
        rewards: ``[P, G, K]`` the rewards they came from.
        keep: ``[P, G]`` bool, the rollouts to count (default :func:`kept_rollouts` of ``rewards``).
        rtol: tie tolerance of :func:`distinct_values`.

    Returns:
        ``[P]`` float64 in (0, 1] for a deterministic method; NaN for a group with < 2 distinct
        reward vectors (nothing to keep apart: every method scores 1 there).

    >>> r = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [0.0, 0.0], [1.0, 1.0]]])
    >>> resolution(r.sum(-1) - 1.0, r).tolist()  # totals 1, 1, 0, 2: three values for four vectors
    [0.75]
    """
    if keep is None:
        keep = kept_rollouts(rewards)
    distinct = distinct_values(advantages, keep, rtol=rtol)
    return _resolution(distinct, reward_vector_counts(rewards, keep))


def _nanmean(x: Tensor) -> float | None:
    return _float_or_none(x.nanmean()) if x.numel() else None


def shadow_diagnostics(
    rewards: Tensor,
    advantages: Tensor,
    shadows: dict[str, Tensor],
    *,
    rtol: float = RESOLUTION_RTOL,
) -> ShadowComparison:
    """Compare the method in use with shadow methods on one batch.

    Args:
        rewards: ``[P, G, K]`` rewards; NaN/±inf = unscorable.
        advantages: ``[P, G]`` advantages of the method in use.
        shadows: method name → ``[P, G]`` advantages of that method on the same rewards.
        rtol: tie tolerance of :func:`value_ranks`.

    Returns:
        :class:`~mrbench.core.records.ShadowComparison`: the method in use's resolution, and per
        shadow its :class:`~mrbench.core.records.ShadowStats`: ``sign_agree`` is
        :func:`sign_agreement` (pooled over rollouts), ``rank_corr`` the mean over groups of
        :func:`rank_correlation` where defined, ``resolution`` the mean over groups of
        :func:`resolution` where defined; None where undefined for the whole batch.

    >>> r = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [0.0, 1.0], [0.0, 0.0]]])
    >>> d = shadow_diagnostics(r, r.sum(-1), {"per-component": r[..., 0] + 2 * r[..., 1]})
    >>> round(d.resolution, 4), d.shadow["per-component"].resolution
    (0.6667, 1.0)
    """
    keep = kept_rollouts(rewards)
    vectors = reward_vector_counts(rewards, keep)
    ranks, distinct = value_ranks(advantages, keep, rtol=rtol)
    compared: dict[str, ShadowStats] = {}
    for name, other in shadows.items():
        other_ranks, other_distinct = value_ranks(other, keep, rtol=rtol)
        compared[name] = ShadowStats(
            sign_agree=_float_or_none(sign_agreement(advantages, other, keep)),
            rank_corr=_nanmean(_spearman(ranks, distinct, other_ranks, other_distinct, keep)),
            resolution=_nanmean(_resolution(other_distinct, vectors)),
        )
    return ShadowComparison(_nanmean(_resolution(distinct, vectors)), compared)
