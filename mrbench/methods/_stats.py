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
* Magnitude: rewards and weighted rewards ``w_k r_k`` beyond :data:`SUPPORTED_MAGNITUDE` give one
  :class:`RewardScaleWarning` per process. Beyond 2**300, where squares and sums could overflow
  float64, the working copy is scaled by a power of two (exact), so normalising estimators keep
  their values; ``Prepared.unit`` records the scale and estimators whose advantages are in reward
  units multiply it back in :func:`finish_`.
* Sample statistics use n − 1. A set of values that are all equal is centred to exactly 0 (see
  :func:`center`), so constant groups and components give exact zeros, not rounding noise that
  would turn into spurious ±1 correlations or z-scores.

Speed (CPU): work happens on one component-major float64 copy ``[P, K, G]`` so that group
reductions run over the contiguous last axis and broadcasts have a long inner loop (3× faster
than reducing the middle axis of ``[P, G, K]``); masks over rollouts are float 0/1 tensors, so
masking is a multiply. Intermediates of that size are updated in place (functions with a
trailing ``_`` consume their input) and per-component statistics skip missing values with
``nansum`` instead of a second full-size mask: a second ~1 MB buffer per call makes glibc hand
memory back to the OS and fault it in again on every call, which measured 3-5× the arithmetic.
"""

from __future__ import annotations

import math
import warnings

import torch
from torch import Tensor

F64 = torch.float64

SUPPORTED_MAGNITUDE = 1e6
"""Largest ``|r|`` and ``|w_k r_k|`` the estimators are documented for (see :mod:`mrbench.methods`)."""
_SAFE_EXP = 300  # up to 2**300, squares summed over any batch stay far below float64's 2**1024
_TARGET_EXP = 20  # beyond it, the working copy is scaled to below 2**20
_MAX_SHIFT = 1000  # 2**-1000 is still a normal float64, so the scaling stays exact


class RewardScaleWarning(RuntimeWarning):
    """Rewards beyond :data:`SUPPORTED_MAGNITUDE` (warned once per process)."""


_warned_scale = False


class Prepared:
    """Float64 component-major working copy of one batch of rewards, with its masks.

    Attributes:
        keep: ``[P, G]`` bool, rollout is scorable and its group has ≥ 2 scorable rollouts.
        keepf: ``keep`` as float64 1.0/0.0.
        weights: ``[K]`` float64 weights.
        values_t: ``[P, K, G]`` rewards. Off ``keep`` and where a component is missing it holds
            0, or NaN when prepared with ``nan_missing=True`` (for NaN-aware per-component
            statistics, see :func:`group_zscores_`).
        present: ``[P, K, 1]`` float64 count of kept rollouts where each component is present
            (``nan_missing=True`` only).
        unit: what one unit of ``values_t`` is worth in reward units: 1.0, or a power of two when
            rewards beyond 2**300 were scaled down (see the module docstring).

    ``values_t`` is a private working buffer that callers may modify in place; the caller's
    ``rewards`` is never modified.
    """

    present: Tensor

    def __init__(self, rewards: Tensor, weights: Tensor, *, nan_missing: bool = False) -> None:
        p, g, k = rewards.shape
        # A fresh float64 buffer, transposed and cast in one pass.
        raw = torch.empty((p, k, g), dtype=F64, device=rewards.device).copy_(rewards.transpose(1, 2))
        self.weights = weights.to(device=raw.device, dtype=F64)
        nan = torch.nan
        missing = torch.isnan(raw.nan_to_num_(nan=nan, posinf=nan, neginf=nan))  # ±inf → NaN
        raw.nan_to_num_(nan=0.0)  # (isfinite would be 4 full-size passes)
        self.unit = _guard_magnitude_(raw, self.weights)
        # Reductions of bool tensors go through a full-size int64 copy; uint8 ones do not.
        if k:
            scorable = missing.view(torch.uint8).amin(dim=1) == 0  # [P, G]: some component present
        else:
            scorable = torch.zeros((p, g), dtype=torch.bool, device=raw.device)
        self.keep = scorable & (scorable.sum(dim=1, keepdim=True) >= 2)
        self.keepf = self.keep.to(F64)
        all_kept = bool(self.keep.all())
        if nan_missing:
            if not all_kept:
                missing.logical_or_(~self.keep.unsqueeze(1))
            raw.masked_fill_(missing, nan)
            small = torch.uint8 if g < 256 else torch.int64  # a count that cannot overflow
            self.present = (g - missing.view(torch.uint8).sum(dim=-1, keepdim=True, dtype=small)).to(F64)
        elif not all_kept:
            raw.mul_(self.keepf.unsqueeze(1))
        self.values_t = raw

    def weighted_(self) -> Tensor:
        """``w_k r_k`` ``[P, K, G]``, computed in place in ``values_t`` (which it then holds)."""
        return self.values_t.mul_(self.weights.unsqueeze(-1))


def _guard_magnitude_(raw: Tensor, weights: Tensor) -> float:
    """Warn (once per process) when some ``|r|`` or ``|w_k r_k|`` of the finite ``raw``
    ``[P, K, G]`` exceeds :data:`SUPPORTED_MAGNITUDE`; beyond 2**300 scale ``raw`` in place by a
    power of two to below 2**20 and return that power (else 1.0)."""
    if raw.numel() == 0:
        return 1.0
    # A bound from two contiguous reductions first; per component only when it is exceeded.
    bound = max(float(raw.amax()), -float(raw.amin())) * max(1.0, float(weights.abs().max()))
    if bound <= SUPPORTED_MAGNITUDE:
        return 1.0
    largest = torch.maximum(raw.amax(dim=(0, 2)), raw.amin(dim=(0, 2)).neg_())  # [K] max |r_k|
    peak = float((largest * weights.abs().clamp_min(1.0)).max())  # max(|r|, |w_k r_k|)
    if peak > SUPPORTED_MAGNITUDE:
        _warn_scale(peak)
    if peak <= 2.0**_SAFE_EXP:
        return 1.0
    shift = min(math.frexp(peak)[1] - _TARGET_EXP, _MAX_SHIFT) if math.isfinite(peak) else _MAX_SHIFT
    raw.mul_(2.0**-shift)
    return 2.0**shift


def _warn_scale(peak: float) -> None:
    global _warned_scale
    if _warned_scale:
        return
    _warned_scale = True
    warnings.warn(
        f"rewards reach {peak:.3g} (largest |r| or |w·r|), beyond the supported magnitude "
        f"{SUPPORTED_MAGNITUDE:g}: normalising methods (grpo, gdpo, ...) stay meaningful, but "
        "advantages in reward units (dr-grpo, corrgrpo) grow with the rewards; rescale the task's "
        "rewards or weights. Warned once per process.",
        RewardScaleWarning,
        stacklevel=6,  # the estimator's caller
    )


def prepare(rewards: Tensor, weights: Tensor, *, nan_missing: bool = False) -> Prepared:
    """Cast to float64 component-major and build the masks of the module docstring."""
    return Prepared(rewards, weights, nan_missing=nan_missing)


def center_(x: Tensor, mask: Tensor, dim: int | tuple[int, ...]) -> Tensor:
    """Centre ``x`` in place over ``dim`` using the entries where the float ``mask`` is 1.

    ``x`` must be finite and already 0 where ``mask`` is 0 (``mask`` may broadcast against it);
    it stays 0 there. Returns the masked count (``dim`` kept, size 1).

    Exactness: (x − m)·mask = x − m·mask because x is 0 off the mask, and a second pass
    subtracts the mean of the residuals. For a set of equal values c, the first mean m is within
    a few ulps of c, so every residual equals the same d = c − m exactly (Sterbenz), d is a
    small multiple of ulp(c), their sum n·d is exact, and the second pass leaves exactly 0.
    """
    count = mask.sum(dim=dim, keepdim=True, dtype=F64)
    n = count.clamp_min(1)
    x.addcmul_(x.sum(dim=dim, keepdim=True) / n, mask, value=-1.0)
    x.addcmul_(x.sum(dim=dim, keepdim=True) / n, mask, value=-1.0)
    return count


def center(x: Tensor, mask: Tensor, dim: int | tuple[int, ...]) -> tuple[Tensor, Tensor]:
    """Out-of-place :func:`center_`: returns ``(centered, count)``."""
    centered = x.clone()
    return centered, center_(centered, mask, dim)


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


def group_zscores_(prep: Prepared, eps: float) -> Tensor:
    """GDPO's per-group, per-component z-scores, component-major ``[P, K, G]`` (float64).

    ``z_k = (r_k − mean r_k) / (std r_k + eps)`` over the kept rollouts of the group where
    component k is present; 0 where the component is absent, where fewer than 2 kept rollouts
    have it (TRL's ``nanstd`` is NaN there and its ``nansum`` drops it) and off ``keep``.
    Needs ``prepare(..., nan_missing=True)``; computed in place in ``prep.values_t``, which is
    returned. The missing entries are NaN while centring, so ``nansum`` skips them without a
    separate full-size mask; the two centring passes are exact for constant sets as in
    :func:`center_`.
    """
    z = prep.values_t
    n = prep.present.clamp_min(1)
    z.sub_(z.nansum(dim=-1, keepdim=True) / n)
    z.sub_(z.nansum(dim=-1, keepdim=True) / n)
    z.nan_to_num_(nan=0.0)
    std = std_from_centered(z, prep.present, dim=-1)  # [P, K, 1]
    return z.mul_(reciprocal(std + eps) * (prep.present >= 2))


def corr_sum_(components: Tensor, mask: Tensor, dim: int | tuple[int, ...]) -> Tensor:
    """Σ_kl ρ_kl of the components' Pearson correlations over the sample axes ``dim``.

    ``components`` is component-major ``[P, K, G]`` with K on axis 1 and is consumed (used as
    scratch): ``dim=-1`` gives one value per group, ``dim=(0, 2)`` one for the whole batch. It
    must be 0 where the float ``mask`` (``[P, 1, G]``) is 0. A constant component gets 1/σ = 0,
    so its row and column of ρ (diagonal included) count 0.

    Σ_kl ρ_kl = Σ_kl Σ_i u_ik u_il / (n − 1) = Σ_i (Σ_k u_ik)² / (n − 1) with u = centred / σ,
    i.e. the sample variance of the sum of standardised components: O(N·K), no K×K matrix, and
    never negative.

    Returns ``rho_sum`` shaped like ``mask`` reduced over ``dim`` (kept, size 1).
    """
    count = center_(components, mask, dim=dim)
    inv = reciprocal(std_from_centered(components, count, dim=dim))  # 1/σ_k per group (or batch)
    u = components.mul_(inv).sum(dim=1, keepdim=True)  # Σ_k u_ik: [P, 1, G]
    return (u * u).sum(dim=dim, keepdim=True) / (count - 1).clamp_min(1)


def finish_(adv: Tensor, keep: Tensor, like: Tensor, unit: float = 1.0) -> Tensor:
    """Zero ``adv`` off ``keep``, multiply by ``unit`` (``Prepared.unit``, for advantages in reward
    units) and make it finite (in place), then cast to ``like``'s float dtype."""
    dtype = like.dtype if like.is_floating_point() else torch.get_default_dtype()
    big = torch.finfo(dtype).max
    adv.masked_fill_(~keep, 0.0)
    if unit != 1.0:
        adv.mul_(unit)
    # Guard against overflow when casting back (e.g. float32 rewards near 3e38 summed over K).
    adv.nan_to_num_(nan=0.0, posinf=big, neginf=-big).clamp_(-big, big)
    return adv.to(dtype)
