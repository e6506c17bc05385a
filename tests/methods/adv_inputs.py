"""Shared inputs for the methods tests: the paper's example and seeded random reward tensors."""

from __future__ import annotations

import torch
from torch import Tensor

# REFERENCE.md's worked example: one group, 4 rollouts, 3 components.
PAPER_REWARDS = torch.tensor(
    [[[0.1, 0.18, 0.8], [0.18, 0.1, 7.28], [0.82, 0.9, 8.0], [0.9, 0.82, 1.52]]], dtype=torch.float64
)
PAPER_GRPO = [-1.095, 0.548, 1.095, -0.548]
PAPER_CORRGRPO = [-1.861, 0.930, 1.861, -0.930]
PAPER_GDPO_SUMS = [-2.678, -0.956, 2.678, 0.956]

#: Methods whose advantages have zero mean in every group (no partially missing components).
GROUP_ZERO_MEAN = ("grpo", "dr-grpo", "gdpo-nobn", "corrgrpo", "corrgrpo-guarded")
#: Methods whose advantages have zero mean over the batch.
BATCH_ZERO_MEAN = ("gdpo", "gdpo-corr")


def random_rewards(
    seed: int,
    shape: tuple[int, int, int] = (6, 8, 4),
    *,
    scale_exp: tuple[int, int] = (-8, 8),
    nan_frac: float = 0.0,
    unscorable_frac: float = 0.0,
    dtype: torch.dtype = torch.float64,
) -> Tensor:
    """Rewards ``[P, G, K]``: each component gets its own scale 10^e, e uniform in ``scale_exp``,
    and a random offset; ``nan_frac`` of single values and ``unscorable_frac`` of whole rollouts
    are NaN."""
    gen = torch.Generator().manual_seed(seed)
    p, g, k = shape
    exps = torch.randint(scale_exp[0], scale_exp[1] + 1, (k,), generator=gen).double()
    scale = 10.0**exps
    r = (
        torch.randn(p, g, k, generator=gen, dtype=torch.float64) + torch.randn(k, generator=gen).double()
    ) * scale
    if nan_frac:
        r[torch.rand(p, g, k, generator=gen) < nan_frac] = torch.nan
    if unscorable_frac:
        r[torch.rand(p, g, generator=gen) < unscorable_frac] = torch.nan
    return r.to(dtype)


def random_weights(seed: int, k: int, dtype: torch.dtype = torch.float64) -> Tensor:
    """Positive weights ``[K]`` in [0.25, 2]."""
    gen = torch.Generator().manual_seed(10_000 + seed)
    return (0.25 + 1.75 * torch.rand(k, generator=gen, dtype=torch.float64)).to(dtype)
