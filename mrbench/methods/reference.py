"""Plain per-group loop implementations of every estimator: the readable reference.

Used by the tests (the vectorised methods must equal these) and by
``benchmarks/bench_advantages.py`` (the vectorised methods must be much faster). Each group is
handled on its own: its scorable rollouts are selected explicitly, and statistics are computed
with ordinary ``mean``/``std``/``corrcoef`` on that subset, rather than with the masks of
``mrbench.methods._stats``. Same conventions as the methods (see ``methods/__init__.py``).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor


def _clean(rewards: Tensor) -> Tensor:
    """Float64 copy with ±inf → NaN."""
    r = rewards.to(torch.float64).clone()
    r[~torch.isfinite(r)] = torch.nan
    return r


def _scorable_rows(group: Tensor) -> Tensor:
    """Indices of the rollouts of ``group`` ``[G, K]`` with at least one present component."""
    return torch.nonzero(~torch.isnan(group).all(dim=1)).flatten()


def _centred(x: Tensor) -> Tensor:
    """``x − mean(x)`` along dim 0, exactly 0 for a column whose values are all equal."""
    constant = (x.max(dim=0).values == x.min(dim=0).values) if x.dim() > 1 else x.max() == x.min()
    return torch.where(constant, torch.zeros_like(x), x - x.mean(dim=0))


def _std(x: Tensor) -> Tensor:
    """Sample std (n − 1) along dim 0, 0 for a constant column."""
    return torch.where(_centred(x).abs().sum(dim=0) > 0, x.std(dim=0), torch.zeros(()).double())


def _zscores(sub: Tensor, eps: float) -> Tensor:
    """GDPO z-scores of ``sub`` ``[n, K]`` (NaN-aware per component; absent → 0)."""
    z = torch.zeros_like(sub)
    for k in range(sub.shape[1]):
        present = ~torch.isnan(sub[:, k])
        col = sub[present, k]
        if col.numel() >= 2:
            z[present, k] = _centred(col) / (_std(col) + eps)
    return z


def _corr_sum(comps: Tensor) -> float:
    """Σ_kl ρ_kl of the columns of ``comps`` ``[n, K]``, constant columns counting 0."""
    varying = [k for k in range(comps.shape[1]) if bool(_std(comps[:, k]) > 0)]
    if not varying:
        return 0.0
    rho = torch.corrcoef(comps[:, varying].T) if len(varying) > 1 else torch.ones(1, 1).double()
    return float(rho.sum())


def _total(sub: Tensor, w: Tensor) -> Tensor:
    return torch.nan_to_num(sub * w, nan=0.0).sum(dim=1)


def _per_group(
    rewards: Tensor, weights: Tensor, fn: Callable[[Tensor, Tensor], Tensor]
) -> tuple[Tensor, Tensor]:
    """Apply ``fn(sub[n, K], w) -> [n]`` to each group's scorable rollouts (groups with n ≥ 2).

    Returns the float64 ``[P, G]`` values and the bool ``[P, G]`` mask of rollouts that got one.
    """
    r = _clean(rewards)
    w = weights.to(torch.float64)
    out = torch.zeros(r.shape[:2], dtype=torch.float64)
    kept = torch.zeros(r.shape[:2], dtype=torch.bool)
    for p in range(r.shape[0]):
        rows = _scorable_rows(r[p])
        if rows.numel() < 2:
            continue
        out[p, rows] = fn(r[p, rows], w)
        kept[p, rows] = True
    return out, kept


def _batch_step(s: Tensor, kept: Tensor, denom: Callable[[Tensor], float]) -> Tensor:
    """``(S − mean_B S) / denom`` over the kept rollouts B; 0 elsewhere."""
    out = torch.zeros_like(s)
    vals = s[kept]
    if vals.numel() >= 2:
        out[kept] = _centred(vals) / denom(vals)
    return out


def grpo_ref(rewards: Tensor, weights: Tensor, *, eps: float = 1e-6) -> Tensor:
    """Loop version of ``grpo``."""

    def one(sub: Tensor, w: Tensor) -> Tensor:
        total = _total(sub, w)
        return _centred(total) / (_std(total) + eps)

    return _per_group(rewards, weights, one)[0].to(rewards.dtype)


def dr_grpo_ref(rewards: Tensor, weights: Tensor) -> Tensor:
    """Loop version of ``dr-grpo``."""
    return _per_group(rewards, weights, lambda sub, w: _centred(_total(sub, w)))[0].to(rewards.dtype)


def gdpo_nobn_ref(rewards: Tensor, weights: Tensor, *, eps: float = 1e-6) -> Tensor:
    """Loop version of ``gdpo-nobn``."""
    return _per_group(rewards, weights, lambda sub, w: (_zscores(sub, eps) * w).sum(dim=1))[0].to(
        rewards.dtype
    )


def gdpo_ref(rewards: Tensor, weights: Tensor, *, eps: float = 1e-6) -> Tensor:
    """Loop version of ``gdpo``."""
    s, kept = _per_group(rewards, weights, lambda sub, w: (_zscores(sub, eps) * w).sum(dim=1))
    return _batch_step(s, kept, lambda vals: float(_std(vals)) + eps).to(rewards.dtype)


def _corrgrpo_ref(rewards: Tensor, weights: Tensor, eps: float, floor: float) -> Tensor:
    def one(sub: Tensor, w: Tensor) -> Tensor:
        comps = torch.nan_to_num(sub * w, nan=0.0)
        return _centred(comps.sum(dim=1)) / (max(floor, _corr_sum(comps)) + eps) ** 0.5

    return _per_group(rewards, weights, one)[0].to(rewards.dtype)


def corrgrpo_ref(rewards: Tensor, weights: Tensor, *, eps: float = 1e-6) -> Tensor:
    """Loop version of ``corrgrpo``."""
    return _corrgrpo_ref(rewards, weights, eps, 0.0)


def corrgrpo_guarded_ref(
    rewards: Tensor, weights: Tensor, *, eps: float = 1e-6, min_corr_sum: float = 1.0
) -> Tensor:
    """Loop version of ``corrgrpo-guarded``."""
    return _corrgrpo_ref(rewards, weights, eps, max(0.0, min_corr_sum))


def gdpo_corr_ref(rewards: Tensor, weights: Tensor, *, eps: float = 1e-6) -> Tensor:
    """Loop version of ``gdpo-corr``."""
    r = _clean(rewards)
    w = weights.to(torch.float64)
    u = torch.zeros(r.shape, dtype=torch.float64)
    kept = torch.zeros(r.shape[:2], dtype=torch.bool)
    for p in range(r.shape[0]):
        rows = _scorable_rows(r[p])
        if rows.numel() < 2:
            continue
        u[p, rows] = _zscores(r[p, rows], eps) * w
        kept[p, rows] = True
    rho_sum = _corr_sum(u[kept]) if int(kept.sum()) >= 2 else 0.0
    s = u.sum(dim=-1)
    return _batch_step(s, kept, lambda vals: (max(0.0, rho_sum) + eps) ** 0.5).to(rewards.dtype)


#: Registered method name → its loop reference.
REFERENCES: dict[str, Callable[..., Tensor]] = {
    "grpo": grpo_ref,
    "dr-grpo": dr_grpo_ref,
    "gdpo": gdpo_ref,
    "gdpo-nobn": gdpo_nobn_ref,
    "corrgrpo": corrgrpo_ref,
    "corrgrpo-guarded": corrgrpo_guarded_ref,
    "gdpo-corr": gdpo_corr_ref,
}
