"""Two advantage estimators from outside mrbench.

``toy_centred`` is a plain function named by an entry point (it needs nothing from mrbench);
``toy_signed`` registers itself with the decorator when this module is imported.
"""

from __future__ import annotations

import torch
from torch import Tensor

from mrbench import register_method


def toy_centred(rewards: Tensor, weights: Tensor, *, scale: float = 1.0) -> Tensor:
    """Centred weighted total: A = scale · (R − mean_g R), R = Σ_k w_k r_k, NaN counted as 0.

    ``rewards`` [P, G, K], ``weights`` [K] → advantages [P, G], always finite. A rollout with no
    scorable value gets 0 and is left out of its group's mean.
    """
    scorable = torch.isfinite(rewards).any(dim=-1)  # [P, G]
    total = torch.nan_to_num(rewards, nan=0.0, posinf=0.0, neginf=0.0) @ weights.to(rewards.dtype)
    count = scorable.sum(dim=1, keepdim=True).clamp(min=1)
    mean = (total * scorable).sum(dim=1, keepdim=True) / count
    return torch.where(scorable, scale * (total - mean), torch.zeros_like(total))


@register_method("toy-signed")
def toy_signed(rewards: Tensor, weights: Tensor, *, margin: float = 0.0) -> Tensor:
    """Sign of the centred weighted total: A = sign(R − mean_g R) where |R − mean_g R| > margin.

    ``rewards`` [P, G, K], ``weights`` [K] → advantages [P, G] in {-1, 0, 1}.
    """
    centred = toy_centred(rewards, weights)
    return torch.where(centred.abs() > margin, torch.sign(centred), torch.zeros_like(centred))
