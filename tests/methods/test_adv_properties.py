"""Properties of every estimator over random inputs with scales from 1e-8 to 1e8."""

from __future__ import annotations

import math

import pytest
import torch
from adv_inputs import BATCH_ZERO_MEAN, GROUP_ZERO_MEAN, random_rewards, random_weights
from hypothesis import given, settings
from hypothesis import strategies as st

from mrbench.methods import METHODS, compute_advantages

NAMES = METHODS.names()
SEEDS = range(12)
# Values that stress the edge cases: ties, constants, extremes, missing and infinite values.
EDGE_VALUES = [0.0, 1.0, -1.0, 0.5, 1e-8, -1e-8, 1e8, -1e8, 3e38, math.nan, math.inf, -math.inf]


def _scale(adv: torch.Tensor) -> float:
    return max(float(adv.abs().max()), 1e-30)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_finite_over_scales(name: str, dtype: torch.dtype) -> None:
    for seed in SEEDS:
        r = random_rewards(seed, nan_frac=0.1, unscorable_frac=0.1, dtype=dtype)
        adv = compute_advantages(name, r, random_weights(seed, r.shape[-1], dtype))
        assert adv.shape == r.shape[:2] and adv.dtype == dtype
        assert torch.isfinite(adv).all(), (name, seed)


@settings(max_examples=60, deadline=None)
@given(
    shape=st.tuples(st.integers(1, 4), st.integers(1, 5), st.integers(1, 4)),
    data=st.data(),
    as_float32=st.booleans(),
)
def test_finite_on_edge_values(shape: tuple[int, int, int], data: st.DataObject, as_float32: bool) -> None:
    n = shape[0] * shape[1] * shape[2]
    values = data.draw(st.lists(st.sampled_from(EDGE_VALUES), min_size=n, max_size=n))
    r = torch.tensor(values, dtype=torch.float32 if as_float32 else torch.float64).reshape(shape)
    for name in NAMES:
        adv = compute_advantages(name, r)
        assert torch.isfinite(adv).all(), (name, values)
        unscorable = ~torch.isfinite(r).any(dim=-1)
        assert torch.all(adv[unscorable] == 0), name


@pytest.mark.parametrize("name", GROUP_ZERO_MEAN)
def test_zero_mean_per_group(name: str) -> None:
    for seed in SEEDS:
        # Whole unscorable rollouts are allowed: the mean is over the scorable ones (zeros added).
        r = random_rewards(seed, unscorable_frac=0.15)
        adv = compute_advantages(name, r, random_weights(seed, r.shape[-1]))
        assert torch.all(adv.sum(dim=1).abs() <= 1e-12 * _scale(adv)), (name, seed)


@pytest.mark.parametrize("name", BATCH_ZERO_MEAN)
def test_zero_mean_over_batch(name: str) -> None:
    for seed in SEEDS:
        r = random_rewards(seed, nan_frac=0.1, unscorable_frac=0.1)
        adv = compute_advantages(name, r, random_weights(seed, r.shape[-1]))
        assert abs(float(adv.sum())) <= 1e-12 * _scale(adv) * adv.numel(), (name, seed)


def test_grpo_zero_mean_with_partial_nans() -> None:
    # Missing components count 0 in R, so GRPO's groups stay centred.
    for seed in SEEDS:
        r = random_rewards(seed, nan_frac=0.2)
        adv = compute_advantages("grpo", r)
        assert torch.all(adv.sum(dim=1).abs() <= 1e-12 * _scale(adv))


@pytest.mark.parametrize("name", NAMES)
def test_constant_group_is_zero(name: str) -> None:
    for seed in SEEDS:
        r = random_rewards(seed)
        r[0] = r[0, 0]  # every rollout of group 0 equals its first one
        r[1, :, 0] = 1e8  # a constant component does not make the group constant
        adv = compute_advantages(name, r, random_weights(seed, r.shape[-1]))
        # Per-group methods give exactly 0; batch methods subtract a batch mean that is 0 up to
        # rounding.
        assert torch.all(adv[0].abs() <= 1e-12 * _scale(adv)), (name, seed)
        assert torch.any(adv[1] != 0), (name, seed)


@pytest.mark.parametrize("name", NAMES)
def test_unscorable_rollout_is_zero_and_excluded(name: str) -> None:
    for seed in SEEDS:
        r = random_rewards(seed, shape=(1, 7, 3), nan_frac=0.1)
        w = random_weights(seed, 3)
        with_nan = r.clone()
        with_nan[0, 3] = torch.nan
        adv = compute_advantages(name, with_nan, w)
        without = compute_advantages(name, torch.cat([r[:, :3], r[:, 4:]], dim=1), w)
        assert adv[0, 3] == 0.0
        rest = torch.cat([adv[:, :3], adv[:, 4:]], dim=1)
        assert torch.allclose(rest, without, rtol=1e-12, atol=1e-12 * _scale(without)), (name, seed)


def test_gdpo_excludes_unscorable_rollout_from_batch_statistics() -> None:
    for seed in SEEDS:
        r = random_rewards(seed, shape=(5, 6, 3))
        r[0, 2] = torch.nan
        r[3, 0] = torch.inf
        eps = 1e-6
        sums = compute_advantages("gdpo-nobn", r, eps=eps)
        keep = torch.isfinite(r).any(dim=-1)
        kept = sums[keep]
        expected = torch.zeros_like(sums)
        expected[keep] = (kept - kept.mean()) / (kept.std() + eps)
        assert torch.allclose(compute_advantages("gdpo", r, eps=eps), expected, atol=1e-12)


@pytest.mark.parametrize("component", [0, 2])
def test_gdpo_invariant_to_positive_affine_rescaling(component: int) -> None:
    gen = torch.Generator().manual_seed(component)
    for seed in SEEDS:
        r = random_rewards(seed, scale_exp=(-2, 8), nan_frac=0.1, unscorable_frac=0.1)
        w = random_weights(seed, r.shape[-1])
        a = float(10 ** (6 * torch.rand(1, generator=gen) - 3))  # 1e-3 … 1e3
        b = float(1e4 * torch.randn(1, generator=gen))
        scaled = r.clone()
        scaled[..., component] = a * r[..., component] + b
        # eps only matters next to the std; make it negligible so the invariance is exact.
        for name in ("gdpo", "gdpo-nobn"):
            base = compute_advantages(name, r, w, eps=1e-12)
            moved = compute_advantages(name, scaled, w, eps=1e-12)
            assert torch.allclose(moved, base, rtol=1e-6, atol=1e-6), (name, seed, a, b)


def test_corrgrpo_orders_like_grpo() -> None:
    for seed in SEEDS:
        r = random_rewards(seed, shape=(8, 8, 5), nan_frac=0.1, unscorable_frac=0.1)
        w = random_weights(seed, 5)
        grpo = compute_advantages("grpo", r, w)
        for name in ("corrgrpo", "corrgrpo-guarded"):
            corr = compute_advantages(name, r, w)
            assert torch.equal(torch.sign(corr), torch.sign(grpo)), name
            # Pairwise order within each group is identical.
            assert torch.equal(
                torch.sign(corr.unsqueeze(2) - corr.unsqueeze(1)),
                torch.sign(grpo.unsqueeze(2) - grpo.unsqueeze(1)),
            ), name


def test_guarded_bounded_by_reward_range() -> None:
    for seed in SEEDS:
        r = random_rewards(seed, shape=(16, 6, 2), scale_exp=(0, 0))
        r[..., 1] = -2 * r[..., 0] + 1e-2 * r[..., 1]  # strongly anti-correlated components
        total = r.sum(dim=-1)
        spread = (total.amax(dim=1) - total.amin(dim=1)).unsqueeze(1)
        guarded = compute_advantages("corrgrpo-guarded", r)
        assert torch.all(guarded.abs() <= spread * (1 + 1e-9))
        assert torch.any(compute_advantages("corrgrpo", r).abs() > spread)


@pytest.mark.parametrize("shape", [(0, 4, 3), (2, 0, 3), (2, 4, 0), (1, 1, 1), (3, 1, 2)])
def test_degenerate_shapes(shape: tuple[int, int, int]) -> None:
    r = torch.rand(*shape)
    for name in NAMES:
        adv = compute_advantages(name, r)
        assert adv.shape == shape[:2] and torch.all(adv == 0), name
