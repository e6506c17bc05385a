"""Masked, NaN-aware statistics over groups of rollouts, shared by the estimators.

Conventions (shared by every method, see ``methods/__init__.py``):

* Inputs are ``rewards[P, G, K]`` (prompts × rollouts × components) and ``weights[K]``.
  ±inf is treated as NaN (an unscorable value).
* A rollout is *scorable* when at least one component is not NaN. Unscorable rollouts get
  advantage 0 and never enter a statistic (TRL 1.16 semantics).
* A group with fewer than 2 scorable rollouts carries no comparison: all its advantages are 0 and
  it never enters a statistic either. ``Prepared.keep`` marks the rollouts that do.
* In a weighted total a NaN component counts as 0 (TRL's ``nansum``); per-component statistics
  only use the rollouts where that component is present (TRL's ``nanmean``/``nanstd``).
* Work is done in float64 so that squares of rewards at 1e8 (or sums of seven of them) neither
  overflow nor lose the small differences that matter; :func:`finish` casts back.
* Sample statistics use n − 1. A set of values that are all equal is centred to exactly 0 (see
  :func:`center`), so constant groups and components give exact zeros, not rounding noise that
  would turn into spurious ±1 correlations or z-scores.

Speed (CPU): masks are float 0/1 tensors and missing values are stored as 0, so masking is a
multiply; per-component statistics work on a component-major copy ``[P, K, G]`` so that group
reductions run over the contiguous last axis and broadcasts have a long inner loop (3× faster
than reducing the middle axis of ``[P, G, K]``). Boolean ``where``/``any`` and ``isfinite`` on the
full tensor are avoided: they are several times slower than float arithmetic here.
"""

from __future__ import annotations

import functools

import torch
from torch import Tensor

F64 = torch.float64


class Prepared:
    """Float64 views of one batch of rewards, with the masks every method needs.

    Attributes:
        keep: ``[P, G]`` bool, rollout is scorable and its group has ≥ 2 scorable rollouts.
        keepf: ``keep`` as float64 1.0/0.0.
        weights: ``[K]`` float64 weights.
        total: ``[P, G]`` weighted total ``Σ_k w_k r_k`` (missing components count 0; 0 off
            ``keep``).
        values_t: ``[P, K, G]`` (component-major) rewards; 0 where missing and off ``keep``.
        mask_t: ``[P, K, G]`` 1.0 where the component is present and the rollout kept, else 0.0.

    ``component_major=True`` lays the data out as ``[P, K, G]`` (needed for ``values_t`` and
    ``mask_t``); GRPO and Dr. GRPO only need ``total`` and skip the transpose.
    """

    def __init__(self, rewards: Tensor, weights: Tensor, *, component_major: bool = False) -> None:
        self.component_major = component_major
        if component_major:
            p, g, k = rewards.shape
            # Transpose and cast in one pass.
            raw = torch.empty((p, k, g), dtype=F64, device=rewards.device).copy_(rewards.transpose(1, 2))
        else:
            raw = rewards.to(F64)
        self.weights = weights.to(device=raw.device, dtype=F64)
        # 1.0 where missing: x − x is 0 for finite x and NaN for NaN/±inf.
        self._missing = torch.nan_to_num(raw - raw, nan=1.0)
        k = rewards.shape[-1]
        if component_major:
            n_missing = self._missing.sum(dim=1)  # [P, G]
        else:  # a matrix-vector product beats a reduction over the short last axis
            n_missing = self._missing @ torch.ones(k, dtype=F64, device=raw.device)
        scorable = n_missing < k
        self.keep = scorable & (scorable.sum(dim=1, keepdim=True) >= 2)
        self.keepf = self.keep.to(F64)
        self._all_kept = bool(self.keep.all())
        self._values = torch.nan_to_num(raw, nan=0.0, posinf=0.0, neginf=0.0)

    @functools.cached_property
    def total(self) -> Tensor:
        if self.component_major:
            total = (self._values * self.weights.unsqueeze(-1)).sum(dim=1)
        else:
            total = self._values @ self.weights
        # Masking the [P, G] total is cheaper than masking the [P, G, K] values first.
        return total * self.keepf

    def _masked(self, x: Tensor) -> Tensor:
        if not self.component_major:
            raise ValueError("component-major views need prepare(..., component_major=True)")
        return x if self._all_kept else x * self.keepf.unsqueeze(1)

    @functools.cached_property
    def values_t(self) -> Tensor:
        return self._masked(self._values)

    @functools.cached_property
    def mask_t(self) -> Tensor:
        return self._masked(1.0 - self._missing)


def prepare(rewards: Tensor, weights: Tensor, *, component_major: bool = False) -> Prepared:
    """Cast to float64, zero the missing values and build the masks of the module docstring."""
    return Prepared(rewards, weights, component_major=component_major)


def center(x: Tensor, mask: Tensor, dim: int | tuple[int, ...]) -> tuple[Tensor, Tensor]:
    """Centre ``x`` over ``dim`` using the entries where the float ``mask`` is 1.

    ``x`` must be finite and already 0 where ``mask`` is 0 (``mask`` may broadcast against it).
    Returns ``(centered, count)``: ``centered`` is 0 off the mask; ``count`` keeps ``dim``
    (size 1). One refinement step of the mean makes a set of equal values centre to exactly 0:
    the first mean of n copies of c is within a few ulps of c, so ``c − mean`` is exact and
    ``mean + mean(c − mean)`` rounds back to c.
    """
    count = mask.sum(dim=dim, keepdim=True)
    n = count.clamp_min(1)
    mean = x.sum(dim=dim, keepdim=True) / n
    # (x − mean)·mask = x − mean·mask because x is 0 off the mask: one fused op instead of two.
    centered = torch.addcmul(x, mean, mask, value=-1.0)
    mean = mean + centered.sum(dim=dim, keepdim=True) / n
    return torch.addcmul(x, mean, mask, value=-1.0), count


def std_from_centered(centered: Tensor, count: Tensor, dim: int | tuple[int, ...]) -> Tensor:
    """Sample standard deviation (n − 1) from :func:`center`'s output; 0 where ``count < 2``.

    The result keeps ``dim`` (size 1) so it broadcasts against ``centered``.
    """
    norm = torch.linalg.vector_norm(centered, dim=dim, keepdim=True)  # sqrt(Σ c²) in one pass
    return norm * (count - 1).clamp_min(1).rsqrt() * (count >= 2)


def reciprocal(x: Tensor) -> Tensor:
    """``1 / x`` where ``x > 0``, else 0 (a zero scale contributes nothing instead of NaN)."""
    positive = x > 0
    return torch.where(positive, 1.0 / torch.where(positive, x, 1.0), 0.0)


def group_zscores(prep: Prepared, eps: float) -> Tensor:
    """GDPO's per-group, per-component z-scores, component-major ``[P, K, G]`` (float64).

    ``z_k = (r_k − mean r_k) / (std r_k + eps)`` over the kept rollouts of the group where
    component k is present; 0 where the component is absent, where fewer than 2 kept rollouts
    have it (TRL's ``nanstd`` is NaN there and its ``nansum`` drops it) and off ``keep``.
    """
    centered, count = center(prep.values_t, prep.mask_t, dim=-1)
    std = std_from_centered(centered, count, dim=-1)  # [P, K, 1]
    return centered * (reciprocal(std + eps) * (count >= 2))


def corr_sum(components: Tensor, mask: Tensor, dim: int | tuple[int, ...]) -> tuple[Tensor, Tensor]:
    """Σ_kl ρ_kl of the components' Pearson correlations over the sample axes ``dim``.

    ``components`` is component-major ``[P, K, G]`` with K on axis 1: ``dim=-1`` gives one value
    per group, ``dim=(0, 2)`` one for the whole batch. It must be 0 where the float ``mask``
    (``[P, 1, G]``) is 0. A constant component gets 1/σ = 0, so its row and column of ρ (diagonal
    included) count 0.

    Σ_kl ρ_kl = Σ_kl Σ_i u_ik u_il / (n − 1) = Σ_i (Σ_k u_ik)² / (n − 1) with u = centred / σ,
    i.e. the sample variance of the sum of standardised components: O(N·K), no K×K matrix, and
    never negative.

    Returns ``(rho_sum, count)``, both shaped like ``mask`` reduced over ``dim`` (kept, size 1).
    """
    centered, count = center(components, mask, dim=dim)
    inv = reciprocal(std_from_centered(centered, count, dim=dim))  # σ_k per group (or batch)
    u = (centered * inv).sum(dim=1, keepdim=True)  # [P, 1, G]
    rho_sum = (u * u).sum(dim=dim, keepdim=True) / (count - 1).clamp_min(1)
    return rho_sum, count


def finish(adv: Tensor, keep: Tensor, like: Tensor) -> Tensor:
    """Zero the advantages off ``keep``, make them finite and cast to ``like``'s floating dtype."""
    dtype = like.dtype if like.is_floating_point() else torch.get_default_dtype()
    big = torch.finfo(dtype).max
    adv = torch.where(keep, adv, 0.0)
    # Guard against overflow when casting back (e.g. float32 rewards near 3e38 summed over K).
    adv = torch.nan_to_num(adv, nan=0.0, posinf=big, neginf=-big).clamp(-big, big)
    return adv.to(dtype)
