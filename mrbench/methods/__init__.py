"""Advantage estimators for multi-reward GRPO, registered by name.

Every method has one signature::

    fn(rewards: Tensor[P, G, K], weights: Tensor[K], *, <hyper-parameters with defaults>) -> Tensor[P, G]

NaN (or ±inf) marks an unscorable reward value; results are always finite. Importing this
package registers the estimators and does nothing else. Estimators from other packages: see
:mod:`mrbench.methods._registry` (decorator, entry points, ``module:function`` names).

Hyper-parameters are checked against the range each one declares (``eps >= 0`` where a zero
std is guarded, ``eps > 0`` under CorrGRPO's square root, ``min_corr_sum >= 0``; ``mrbench
methods`` lists them): a value outside it, or a non-finite float, raises
:class:`mrbench.core.errors.RegistryError` naming it.

Supported reward magnitude: every finite reward ``|r|`` and weighted reward ``|w_k r_k|`` up to
``1e6`` (:data:`mrbench.methods._stats.SUPPORTED_MAGNITUDE`). Beyond it the built-in estimators
warn once per process (:class:`~mrbench.methods._stats.RewardScaleWarning`) and stay finite:
normalising ones (``grpo``, ``gdpo``, ``gdpo-nobn``, ``gdpo-corr``) are scale-invariant and keep
their values, computed on rewards scaled by a power of two where float64 would overflow
(beyond 2**300); ``dr-grpo`` and ``corrgrpo`` give advantages in reward units, as large as the
rewards (clipped to the dtype's range), which no optimiser trains well on.

>>> import torch
>>> r = torch.tensor([[[0.0], [1.0], [2.0], [float("nan")]]])
>>> compute_advantages("dr-grpo", r).tolist()
[[-1.0, 0.0, 1.0, 0.0]]
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from mrbench.core.registry import Entry
from mrbench.methods._registry import METHODS, MethodFn, register_method
from mrbench.methods.diagnostics import diagnostics

# Importing the estimator modules registers them; the order here is the listing order.
# isort: off
from mrbench.methods import grpo as _grpo  # noqa: F401  (grpo, dr-grpo)
from mrbench.methods import gdpo as _gdpo  # noqa: F401  (gdpo, gdpo-nobn)
from mrbench.methods import corrgrpo as _corrgrpo  # noqa: F401  (corrgrpo, corrgrpo-guarded, gdpo-corr)
# isort: on

__all__ = ["METHODS", "compute_advantages", "diagnostics", "get_method", "register_method"]


def get_method(name: str) -> Entry[MethodFn]:
    """The registry entry for ``name`` (a registered name, an entry point's name or a
    ``"module:function"`` path); :class:`mrbench.core.errors.UnknownNameError` (with suggestions)
    if it is not registered, :class:`mrbench.core.errors.PluginError` if its plugin cannot be loaded."""
    return METHODS.get(name)


def compute_advantages(name: str, rewards: Tensor, weights: Tensor | None = None, **params: Any) -> Tensor:
    """Run method ``name`` on ``rewards`` ``[P, G, K]`` with ``weights`` ``[K]`` (default: ones).

    ``params`` override the method's hyper-parameters (strings are coerced to the default's
    type); an undeclared one raises :class:`mrbench.core.errors.UnknownParamError`. Bad shapes or
    non-finite weights raise ``ValueError`` naming the shape or value. Returns ``[P, G]``.
    """
    entry = get_method(name)
    rewards = torch.as_tensor(rewards)
    if not rewards.is_floating_point():
        rewards = rewards.to(torch.get_default_dtype())
    if rewards.dim() != 3:
        raise ValueError(
            f"rewards must be 3-D [prompts, rollouts, components], got shape {tuple(rewards.shape)}"
        )
    k = rewards.shape[-1]
    if weights is None:
        weights = torch.ones(k, dtype=rewards.dtype, device=rewards.device)
    weights = torch.as_tensor(weights, device=rewards.device)
    if weights.shape != (k,):
        raise ValueError(
            f"weights must have shape ({k},) to match rewards {tuple(rewards.shape)}, "
            f"got shape {tuple(weights.shape)}"
        )
    if not bool(torch.isfinite(weights).all()):
        raise ValueError(f"weights must be finite, got {weights.tolist()}")
    resolved = entry.resolve_params(params)
    return entry.obj(rewards, weights, **resolved)
