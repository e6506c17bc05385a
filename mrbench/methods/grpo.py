"""GRPO and Dr. GRPO: normalise the weighted total reward within each group."""

from __future__ import annotations

from typing import Annotated

from torch import Tensor

from mrbench.core.registry import Range
from mrbench.methods._registry import register_method
from mrbench.methods._stats import center_, finish_, prepare, reciprocal, std_from_centered


@register_method("grpo")
def grpo(rewards: Tensor, weights: Tensor, *, eps: Annotated[float, Range(ge=0)] = 1e-6) -> Tensor:
    """Group-normalised weighted total: A = (R − mean_g R) / (std_g R + eps), R = Σ_k w_k r_k.

    Args:
        rewards: ``[P, G, K]`` rewards (prompts × rollouts × components); NaN/±inf = unscorable.
        weights: ``[K]`` component weights.
        eps: added to the group's sample std (n − 1). 1e-6 as in verl; TRL uses 1e-4. ≥ 0: 0 gives
            exact z-scores (a zero std gives 0), a negative eps amplifies groups whose std is near −eps.

    Returns:
        ``[P, G]`` advantages in the dtype of ``rewards``. NaN components count 0 in R (TRL's
        ``nansum``); unscorable rollouts and groups with < 2 scorable rollouts get 0; a group
        with constant R gets exactly 0. Equals TRL 1.16's ``sum_then_normalize`` with
        ``scale_rewards="group"`` when ``eps=1e-4``.
    """
    prep = prepare(rewards, weights)
    centered = prep.weighted_().sum(dim=1)  # R: [P, G], 0 off keep
    count = center_(centered, prep.keepf, dim=1)
    std = std_from_centered(centered, count, dim=1)
    return finish_(centered.mul_(reciprocal(std + eps)), prep.keep, rewards)


@register_method("dr-grpo")
def dr_grpo(rewards: Tensor, weights: Tensor) -> Tensor:
    """Dr. GRPO: centred weighted total without std division, A = R − mean_g R (reward units).

    Args:
        rewards: ``[P, G, K]`` rewards; NaN/±inf = unscorable.
        weights: ``[K]`` component weights.

    Returns:
        ``[P, G]`` advantages (same NaN rules as :func:`grpo`).
    """
    prep = prepare(rewards, weights)
    centered = prep.weighted_().sum(dim=1)  # R: [P, G], 0 off keep
    center_(centered, prep.keepf, dim=1)
    return finish_(centered, prep.keep, rewards, unit=prep.unit)  # reward units
