"""The registered advantage estimators, called on a batch of seeds as each seed's own batch.

The lab folds seeds into the prompt axis (``[S·P, G, K]``) and calls a method once per step:
right for every method whose advantages for a group depend on that group alone (grpo,
dr-grpo, gdpo-nobn, corrgrpo, corrgrpo-guarded). gdpo and gdpo-corr end with a *batch* step
(mean, std or correlation over every rollout of the batch): folded seeds would share those
statistics, and each seed is its own training run, so such a method is called once per seed
on that seed's ``[P, G, K]``. Which methods need it is not taken from a list: a probe calls the
method on a random batch and on its two halves and compares (a plugin with a batch step is
caught the same way).

For the built-in gdpo and gdpo-corr the lab has segmented versions that do the group-local work
once for all seeds and the batch step per seed (:mod:`mrbench.lab.segmented`): used only when they
return bit for bit what the registered function returns seed by seed, they replace S calls per
step with one (~30× less time for these two methods at 50 seeds).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from mrbench.lab.segmented import Segmented, call_segmented, segmented_for
from mrbench.methods import get_method

PROBE_SHAPE = (6, 5)  # groups × rollouts of the probe batch
PROBE_RTOL = 1e-9


@dataclass(frozen=True)
class Estimator:
    """One method ready to call: its registry function, resolved hyper-parameters and whether its
    advantages couple the groups of a batch (then it runs per seed: through ``segmented``, all
    seeds in one call, when the lab has a checked segmented version of ``fn``)."""

    name: str
    params: dict[str, Any]
    batch_coupled: bool
    fn: Any
    segmented: Segmented | None = None

    def __call__(self, rewards: Tensor, weights: Tensor, seeds: int) -> Tensor:
        """Advantages ``[S·P, G]`` of ``rewards [S·P, G, K]`` (seed-major), each seed its own batch."""
        if not self.batch_coupled or seeds == 1:
            return self.fn(rewards, weights, **self.params)
        if self.segmented is not None:
            return call_segmented(self.segmented, self.fn, rewards, weights, seeds, self.params)
        per_seed = rewards.reshape(seeds, -1, *rewards.shape[1:]).unbind(0)
        return torch.cat([self.fn(chunk, weights, **self.params) for chunk in per_seed])


def is_batch_coupled(fn: Any, params: Mapping[str, Any], weights: Tensor) -> bool:
    """True when ``fn``'s advantages for a group change with the other groups of the batch."""
    gen = torch.Generator().manual_seed(0)
    g, n = PROBE_SHAPE
    rewards = torch.randn(g, n, weights.shape[0], generator=gen, dtype=torch.float64)
    rewards[: g // 2] *= 3.0  # halves with different statistics, so a batch step shows
    whole = fn(rewards, weights, **params)
    halves = torch.cat([fn(rewards[: g // 2], weights, **params), fn(rewards[g // 2 :], weights, **params)])
    return not torch.allclose(whole.to(torch.float64), halves.to(torch.float64), rtol=PROBE_RTOL, atol=1e-12)


def load_estimator(name: str, weights: Tensor, params: Mapping[str, Any] | None = None) -> Estimator:
    """The registered method ``name`` (built-in, plugin or ``module:function``) with ``params``
    resolved against its signature; unknown names and parameters raise the registry's errors."""
    entry = get_method(name)
    resolved = entry.resolve_params(dict(params or {}))
    fn = entry.obj
    coupled = is_batch_coupled(fn, resolved, weights)
    segmented = segmented_for(fn, resolved, weights) if coupled else None
    return Estimator(entry.name, resolved, coupled, fn, segmented)
