"""Segmented gdpo and gdpo-corr: all seeds in one call, bit for bit the registered function per seed."""

from __future__ import annotations

import warnings

import pytest
import torch

from mrbench.lab import segmented
from mrbench.lab.estimators import load_estimator
from mrbench.methods._stats import RewardScaleWarning
from mrbench.methods.corrgrpo import gdpo_corr
from mrbench.methods.gdpo import gdpo

F64 = torch.float64
PAIRS = [(gdpo, segmented.gdpo_segmented), (gdpo_corr, segmented.gdpo_corr_segmented)]


def _rewards(case: int) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Rewards ``[S·P, G, K]``, weights ``[K]`` and S for a random shape: continuous or binary
    components, missing values, unscorable rollouts, seeds of different scales."""
    gen = torch.Generator().manual_seed(case)
    seeds, prompts, group, k = (
        int(torch.randint(lo, hi, (1,), generator=gen)) for lo, hi in ((1, 12), (1, 9), (2, 12), (1, 8))
    )
    rewards = torch.randn(seeds * prompts, group, k, generator=gen, dtype=F64) * 10 ** torch.rand(
        k, generator=gen
    )
    if case % 3 == 0:
        rewards = (rewards > 0).to(F64)
    if case % 4 == 1:
        rewards[torch.rand(rewards.shape, generator=gen) < 0.1] = torch.nan
    if case % 5 == 2:
        rewards[torch.rand(rewards.shape[:2], generator=gen) < 0.2] = torch.nan
    rewards[: max(1, prompts // 2)] *= 7.0  # the first seed's batch statistics differ from the others'
    return rewards, torch.rand(k, generator=gen, dtype=F64) * 3, seeds


def _per_seed(fn, rewards: torch.Tensor, weights: torch.Tensor, seeds: int, **params) -> torch.Tensor:
    return torch.cat([fn(chunk, weights, **params) for chunk in rewards.chunk(seeds)])


@pytest.mark.parametrize(("fn", "fast"), PAIRS, ids=["gdpo", "gdpo-corr"])
def test_segmented_equals_the_registered_function_per_seed_bit_for_bit(fn, fast):
    for case in range(60):
        rewards, weights, seeds = _rewards(case)
        for eps in (1e-6, 0.1):
            expected = _per_seed(fn, rewards, weights, seeds, eps=eps)
            assert torch.equal(fast(rewards, weights, seeds, eps=eps), expected), (case, eps)


def test_the_lab_uses_segmented_versions_for_gdpo_and_gdpo_corr_only():
    weights = torch.ones(3, dtype=F64)
    assert load_estimator("gdpo", weights).segmented is segmented.gdpo_segmented
    assert load_estimator("gdpo-corr", weights, {"eps": 1e-3}).segmented is segmented.gdpo_corr_segmented
    assert load_estimator("grpo", weights).segmented is None  # not batch-coupled: one call anyway


def test_a_segmented_version_that_disagrees_is_not_used(monkeypatch):
    def wrong(rewards, weights, seeds, *, eps=1e-6):
        return segmented.gdpo_segmented(rewards, weights, seeds, eps=eps) * (1 + 1e-15)

    monkeypatch.setattr(segmented, "_registered", lambda: {gdpo: wrong})
    est = load_estimator("gdpo", torch.ones(2, dtype=F64))
    assert est.batch_coupled and est.segmented is None
    rewards, weights, seeds = _rewards(1)
    rewards = rewards[..., :2]
    assert torch.equal(est(rewards, weights[:2], seeds), _per_seed(gdpo, rewards, weights[:2], seeds))


def test_rewards_beyond_the_rescaling_bound_go_seed_by_seed():
    rewards, weights, seeds = _rewards(4)
    rewards[0] *= 2.0**400  # the registered function rescales this seed's batch by its own power of two
    est = load_estimator("gdpo", weights)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RewardScaleWarning)  # warned once per process, maybe already
        expected = _per_seed(gdpo, rewards, weights, seeds)
        assert torch.equal(est(rewards, weights, seeds), expected)
