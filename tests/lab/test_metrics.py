"""Per-step diagnostics on hand-made groups, per-seed scores and statistics."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from mrbench.lab.metrics import (
    first_reach,
    normalised,
    opposite_sign_groups,
    per_seed_mean,
    seed_scores,
    step_diagnostics,
    summarise,
)
from mrbench.methods import compute_advantages
from mrbench.methods.diagnostics import resolution

NAN = math.nan


def test_grpo_collapses_equal_totals_and_gdpo_does_not():
    # (1, 0) and (0, 1) have the same total: one GRPO advantage; GDPO z-scores separate them
    # because component 0 succeeds less often in this group (1 of 6) than component 1 (3 of 6).
    rewards = torch.tensor([[[1, 0], [0, 1], [0, 1], [0, 0], [0, 1], [0, 0]]], dtype=torch.float64)
    grpo = compute_advantages("grpo", rewards)
    gdpo = compute_advantages("gdpo-nobn", rewards)
    assert resolution(grpo, rewards).item() == pytest.approx(2 / 3)  # 3 distinct vectors, totals {0, 1}
    assert resolution(gdpo, rewards).item() == 1.0


def test_resolution_leaves_out_unscorable_rows_and_counts_missing_values():
    rewards = torch.tensor(
        [
            [[1, NAN], [1, 0], [NAN, NAN], [0, 0]],  # (1, NaN) ≠ (1, 0): three distinct scorable vectors
            [[1, 1], [1, 1], [NAN, NAN], [1, 1]],  # one distinct vector: undefined
        ],
        dtype=torch.float64,
    )
    adv = torch.tensor([[0.5, 0.5, 0.0, -1.0], [0.0, 0.0, 0.0, 0.0]], dtype=torch.float64)
    ratio = resolution(adv, rewards)
    assert ratio[0].item() == pytest.approx(2 / 3)
    assert math.isnan(ratio[1].item())


def test_step_diagnostics_per_seed():
    # Two seeds of two groups each; seed 1's groups both have one distinct reward vector.
    rewards = torch.tensor(
        [
            [[1.0], [0.0], [0.0]],
            [[1.0], [2.0], [3.0]],
            [[1.0], [1.0], [1.0]],
            [[NAN], [2.0], [2.0]],
        ],
        dtype=torch.float64,
    )
    adv = torch.tensor([[1.0, -0.5, -0.5], [-1.0, 0.0, 1.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    ref = torch.tensor([[1.0, -0.5, -0.5], [1.0, 0.0, -1.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    out = step_diagnostics(rewards, adv.double(), ref.double(), 2)
    assert out["sign_disagree"].tolist() == [0.5, 0.0]
    assert out["resolution"][0].item() == 1.0 and math.isnan(out["resolution"][1].item())
    assert out["max_abs_adv"].tolist() == [1.0, 0.0]
    assert per_seed_mean(torch.tensor([0.5, NAN, NAN, NAN], dtype=torch.float64), 2).tolist()[0] == 0.5


def test_opposite_signs_ignore_rounding_zeros():
    ref = torch.tensor([[1.0, -1.0, 0.0], [1.0, -1.0, 0.0]], dtype=torch.float64)
    adv = torch.tensor([[2.0, -3.0, -1e-15], [2.0, 0.5, 0.0]], dtype=torch.float64)
    keep = torch.ones(2, 3, dtype=torch.bool)
    assert opposite_sign_groups(adv, ref, keep).tolist() == [False, True]
    assert opposite_sign_groups(adv, ref, keep & torch.tensor([True, False, True])).tolist() == [False, False]


def test_seed_scores_normalise_and_time_to_reach():
    # One seed, 3 steps, K = 2; best/worst of each component and of the weighted total.
    components = np.array([[[0.0, 1.0], [0.5, 1.0], [1.0, 2.0]]])
    diag = {
        "sign_disagree": np.array([[0.0], [0.5]]),
        "resolution": np.array([[1.0], [np.nan]]),
        "max_abs_adv": np.array([[2.0], [7.0]]),
    }
    scores = seed_scores(
        components,
        np.array([1.0, 1.0]),
        np.array([[1.0, 2.0]]),
        np.array([[0.0, 1.0]]),
        np.array([3.0]),
        np.array([1.0]),
        diag,
        ("a", "b"),
    )
    assert scores["final/a"].tolist() == [1.0] and scores["final/b"].tolist() == [1.0]
    assert scores["objective"].tolist() == [1.0] and scores["steps_to_90"].tolist() == [2.0]
    assert scores["sign_disagree"].tolist() == [0.25] and scores["resolution"].tolist() == [1.0]
    assert scores["max_abs_adv"].tolist() == [7.0]
    assert first_reach(np.array([[0.1, 0.2]])).tolist() == [2.0]  # never: T + 1
    assert np.isnan(normalised(np.array([[[1.0]]]), np.array([[1.0]]), np.array([[1.0]]))).all()


def test_summarise_gives_iqm_cis_and_probability_of_improvement():
    rng = np.random.default_rng(0)
    scores = {
        "grpo": {"objective": rng.normal(0.5, 0.05, 20), "final/a": rng.normal(0.5, 0.05, 20)},
        "other": {"objective": rng.normal(0.8, 0.05, 20), "final/a": rng.normal(0.5, 0.05, 20)},
    }
    out = summarise(scores, reps=500)
    assert out["grpo"].poi == {}
    assert out["other"].poi["objective"].low > 0.9
    assert out["other"].poi["final/a"].low < 0.5 < out["other"].poi["final/a"].high
    ci = out["other"].iqm["objective"]
    assert ci.low < ci.point < ci.high and ci.point == pytest.approx(0.8, abs=0.05)
