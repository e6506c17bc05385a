"""Hand-computed cases: the paper's worked example and small groups checked by hand."""

from __future__ import annotations

import math

import pytest
import torch
from adv_inputs import PAPER_CORRGRPO, PAPER_GDPO_SUMS, PAPER_GRPO, PAPER_REWARDS

from mrbench.methods import METHODS, compute_advantages

W3 = torch.ones(3, dtype=torch.float64)


def test_paper_example_grpo() -> None:
    adv = compute_advantages("grpo", PAPER_REWARDS, W3)
    assert adv[0].tolist() == pytest.approx(PAPER_GRPO, abs=1e-3)


def test_paper_example_corrgrpo() -> None:
    adv = compute_advantages("corrgrpo", PAPER_REWARDS, W3)
    assert adv[0].tolist() == pytest.approx(PAPER_CORRGRPO, abs=1e-3)
    # Σρ ≥ 1 here, so the guard changes nothing.
    assert torch.equal(compute_advantages("corrgrpo-guarded", PAPER_REWARDS, W3), adv)


def test_paper_example_gdpo_sums_flip_signs() -> None:
    sums = compute_advantages("gdpo-nobn", PAPER_REWARDS, W3, eps=1e-6)
    assert sums[0].tolist() == pytest.approx(PAPER_GDPO_SUMS, abs=1e-3)
    grpo = compute_advantages("grpo", PAPER_REWARDS, W3)
    # Rollouts 2 and 4 change sign relative to GRPO.
    assert (torch.sign(sums) != torch.sign(grpo))[0].tolist() == [False, True, False, True]
    # One group: the batch step only rescales to unit std.
    gdpo = compute_advantages("gdpo", PAPER_REWARDS, W3)
    assert gdpo[0].std().item() == pytest.approx(1.0, abs=1e-5)
    assert torch.allclose(gdpo, sums / sums.std(), atol=1e-5)


def test_two_rollouts_by_hand() -> None:
    # R = [1·1 + 2·3, 1·3 + 2·0] = [7, 3]; mean 5, std (n − 1) = 2·sqrt(2).
    r = torch.tensor([[[1.0, 3.0], [3.0, 0.0]]], dtype=torch.float64)
    w = torch.tensor([1.0, 2.0], dtype=torch.float64)
    s = 2 * math.sqrt(2)
    assert compute_advantages("grpo", r, w, eps=0.0)[0].tolist() == pytest.approx([2 / s, -2 / s])
    assert compute_advantages("dr-grpo", r, w)[0].tolist() == pytest.approx([2.0, -2.0])
    # Two rollouts: every z-score is ±1/sqrt(2); components move in opposite directions, so
    # S = w1·(−z) + w2·z = ±(2 − 1)/sqrt(2).
    z = 1 / math.sqrt(2)
    assert compute_advantages("gdpo-nobn", r, w, eps=0.0)[0].tolist() == pytest.approx([z, -z])
    # Two components, perfectly anti-correlated (n = 2): Σρ = 1 + 1 − 1 − 1 = 0.
    assert compute_advantages("corrgrpo", r, w, eps=1e-6)[0].tolist() == pytest.approx([2000.0, -2000.0])
    assert compute_advantages("corrgrpo-guarded", r, w)[0].tolist() == pytest.approx([2.0, -2.0], rel=1e-5)


def test_corrgrpo_single_component_is_dr_grpo() -> None:
    r = torch.tensor([[[0.0], [1.0], [5.0]]], dtype=torch.float64)
    # K = 1: Σρ = 1, so A = (R − mean R) / sqrt(1 + eps).
    expected = compute_advantages("dr-grpo", r) / math.sqrt(1 + 1e-6)
    assert torch.allclose(compute_advantages("corrgrpo", r), expected)


def test_corrgrpo_constant_component_counts_zero() -> None:
    # Component 2 is constant: its row and column of ρ vanish, leaving Σρ = 1 for component 1.
    r = torch.tensor([[[0.0, 4.0], [1.0, 4.0], [5.0, 4.0]]], dtype=torch.float64)
    expected = compute_advantages("dr-grpo", r) / math.sqrt(1 + 1e-6)
    assert torch.allclose(compute_advantages("corrgrpo", r), expected)


def test_anticorrelated_components_blow_up_faithful_but_not_guarded() -> None:
    # R2 = −2·R1: Σρ = 1 + 1 − 1 − 1 = 0, so faithful CorrGRPO divides R − mean R (= −R1 + mean)
    # by sqrt(eps) = 1e-3.
    r1 = torch.tensor([0.0, 1.0, 0.0, 1.0], dtype=torch.float64)
    r = torch.stack([r1, -2 * r1], dim=-1).unsqueeze(0)
    faithful = compute_advantages("corrgrpo", r)
    guarded = compute_advantages("corrgrpo-guarded", r)
    assert faithful[0].tolist() == pytest.approx([500.0, -500.0, 500.0, -500.0], rel=1e-6)
    assert guarded[0].tolist() == pytest.approx([0.5, -0.5, 0.5, -0.5], rel=1e-6)
    # Guarded never exceeds the group's range of R; GRPO's scale stays near 1.
    total = (r * torch.ones(2, dtype=torch.float64)).sum(-1)
    assert guarded.abs().max() <= (total.max() - total.min()) + 1e-12
    assert compute_advantages("grpo", r).abs().max() < 1.0
    # min_corr_sum=0 recovers the faithful method.
    assert torch.allclose(compute_advantages("corrgrpo-guarded", r, min_corr_sum=0.0), faithful)


def test_unscorable_and_tiny_groups_get_zero() -> None:
    nan = math.nan
    r = torch.tensor(
        [
            [[1.0, 2.0], [nan, nan], [3.0, 1.0]],  # one unscorable rollout
            [[nan, nan], [nan, nan], [7.0, 1.0]],  # a single scorable rollout: no comparison
            [[nan, nan], [nan, nan], [nan, nan]],  # nothing scorable
        ],
        dtype=torch.float64,
    )
    for name in METHODS.names():
        adv = compute_advantages(name, r)
        assert adv[0, 1] == 0.0, name
        assert torch.all(adv[1:] == 0.0), name
        assert adv[0, 0] != 0.0 and adv[0, 2] != 0.0, name


def test_partial_nan_counts_zero_in_total() -> None:
    # TRL's nansum: the missing component of rollout 1 counts 0, so R = [1, 3, 2].
    r = torch.tensor([[[1.0, math.nan], [1.0, 2.0], [1.0, 1.0]]], dtype=torch.float64)
    assert compute_advantages("dr-grpo", r)[0].tolist() == pytest.approx([-1.0, 1.0, 0.0])


def test_inf_is_unscorable_value() -> None:
    inf_r = torch.tensor([[[1.0, math.inf], [2.0, 0.0], [4.0, 1.0]]], dtype=torch.float64)
    nan_r = torch.tensor([[[1.0, math.nan], [2.0, 0.0], [4.0, 1.0]]], dtype=torch.float64)
    for name in METHODS.names():
        assert torch.equal(compute_advantages(name, inf_r), compute_advantages(name, nan_r)), name
