"""Diagnostics: JSON-ready values, shares, denominators and sign flips on constructed batches."""

from __future__ import annotations

import json
import math

import pytest
import torch
from adv_inputs import PAPER_REWARDS, random_rewards

from mrbench.methods import METHODS, compute_advantages, diagnostics

KEYS = {
    "mean_offdiag_corr",
    "corr_matrix",
    "share",
    "frac_zero_var_groups",
    "denominator_mean",
    "denominator_median",
    "sign_flip_vs_grpo",
    "adv_abs_mean",
    "adv_std",
    "adv_max_abs",
}


def _diag(name: str, r: torch.Tensor, w: torch.Tensor | None = None) -> dict:
    w = torch.ones(r.shape[-1], dtype=r.dtype) if w is None else w
    return diagnostics(r, w, compute_advantages(name, r, w)).to_json()


@pytest.mark.parametrize("name", METHODS.names())
def test_json_ready_and_share_sums_to_one(name: str) -> None:
    r = random_rewards(0, shape=(12, 8, 4), nan_frac=0.1, unscorable_frac=0.1)
    d = _diag(name, r)
    assert set(d) == KEYS
    json.dumps(d, allow_nan=False)
    assert math.isclose(sum(d["share"]), 1.0, rel_tol=1e-9)
    assert all(0.0 <= s <= 1.0 for s in d["share"])
    assert len(d["corr_matrix"]) == 4 and all(len(row) == 4 for row in d["corr_matrix"])
    assert 0.0 <= d["sign_flip_vs_grpo"] <= 1.0 and 0.0 <= d["frac_zero_var_groups"] <= 1.0


def test_grpo_share_dominated_by_large_component_gdpo_balanced() -> None:
    gen = torch.Generator().manual_seed(0)
    r = torch.rand(64, 8, 3, generator=gen, dtype=torch.float64)
    r[..., 0] *= 100.0  # same distribution, 100× the scale
    grpo = _diag("grpo", r)["share"]
    gdpo = _diag("gdpo", r)["share"]
    assert grpo[0] > 0.6 and grpo[0] > 3 * max(grpo[1:])
    assert max(gdpo) - min(gdpo) < 0.1 and all(0.25 < s < 0.42 for s in gdpo)


def test_sign_flips_on_paper_example() -> None:
    assert _diag("corrgrpo", PAPER_REWARDS)["sign_flip_vs_grpo"] == 0.0
    assert _diag("grpo", PAPER_REWARDS)["sign_flip_vs_grpo"] == 0.0
    assert _diag("gdpo", PAPER_REWARDS)["sign_flip_vs_grpo"] == pytest.approx(0.5)


def test_paper_example_correlations_and_denominators() -> None:
    d = _diag("grpo", PAPER_REWARDS)
    corr = d["corr_matrix"]
    assert all(corr[i][i] == pytest.approx(1.0) for i in range(3))
    assert corr[0][1] == pytest.approx(corr[1][0]) and corr[0][1] > 0.9
    off = [corr[i][j] for i in range(3) for j in range(3) if i != j]
    assert d["mean_offdiag_corr"] == pytest.approx(sum(off) / 6)
    total = PAPER_REWARDS.sum(-1)[0]
    # GRPO's effective denominator is std(R) + eps; Dr. GRPO's is 1; CorrGRPO's is sqrt(Σρ + eps).
    assert d["denominator_mean"] == pytest.approx(float(total.std()) + 1e-6)
    assert _diag("dr-grpo", PAPER_REWARDS)["denominator_median"] == pytest.approx(1.0)
    dr = compute_advantages("dr-grpo", PAPER_REWARDS)
    corr_adv = compute_advantages("corrgrpo", PAPER_REWARDS)
    assert _diag("corrgrpo", PAPER_REWARDS)["denominator_mean"] == pytest.approx(
        float(dr[0, 0] / corr_adv[0, 0])
    )
    assert d["adv_max_abs"] == pytest.approx(1.0954, abs=1e-4)


def test_undefined_values_are_none() -> None:
    # One component: no off-diagonal pair. All groups constant: no share, no denominator.
    single = _diag("grpo", torch.tensor([[[0.0], [1.0], [3.0]]]))
    assert single["mean_offdiag_corr"] is None and single["share"] == [1.0]
    flat = torch.ones(3, 4, 2)
    d = _diag("gdpo", flat)
    assert d["share"] == [None, None] and d["denominator_mean"] is None
    assert d["corr_matrix"] == [[None, None], [None, None]] and d["mean_offdiag_corr"] is None
    assert d["frac_zero_var_groups"] == 1.0 and d["sign_flip_vs_grpo"] == 0.0 and d["adv_max_abs"] == 0.0
    json.dumps(d, allow_nan=False)


def test_zero_variance_fraction_counts_constant_and_empty_groups() -> None:
    r = random_rewards(1, shape=(4, 5, 2))
    r[0] = 2.0  # constant
    r[1, 1:] = torch.nan  # one scorable rollout: no signal
    assert _diag("grpo", r)["frac_zero_var_groups"] == pytest.approx(0.5)


def test_given_grpo_advantages_are_used() -> None:
    r = random_rewards(2, shape=(6, 4, 3))
    w = torch.ones(3, dtype=torch.float64)
    adv = compute_advantages("gdpo", r, w)
    assert diagnostics(r, w, adv) == diagnostics(r, w, adv, grpo_advantages=compute_advantages("grpo", r, w))
    # Against itself nothing flips.
    assert diagnostics(r, w, adv, grpo_advantages=adv).sign_flip_vs_grpo == 0.0
