"""Shadow-estimator comparisons: the vectorised functions equal a plain per-group loop; known cases."""

from __future__ import annotations

import itertools
import json
import math

import pytest
import torch
from adv_inputs import PAPER_REWARDS, random_rewards

from mrbench.methods import METHODS, compute_advantages
from mrbench.methods.diagnostics import (
    RESOLUTION_RTOL,
    diagnostics,
    distinct_values,
    kept_rollouts,
    opposite_signs,
    rank_correlation,
    resolution,
    reward_vector_counts,
    shadow_diagnostics,
    sign_agreement,
    value_ranks,
)

SEEDS = range(6)

# --------------------------------------------------------------------------- plain-loop references


def _loop_kept(rewards: torch.Tensor) -> list[list[bool]]:
    out = []
    for group in rewards.tolist():
        scorable = [any(math.isfinite(v) for v in row) for row in group]
        enough = sum(scorable) >= 2
        out.append([s and enough for s in scorable])
    return out


def _loop_ties(values: list[float]) -> list[list[float]]:
    """Sorted values split where neighbours are more than RESOLUTION_RTOL × max |value| apart."""
    if not values:
        return []
    ordered = sorted(values)
    tol = RESOLUTION_RTOL * max(abs(v) for v in values)
    ties = [[ordered[0]]]
    for previous, value in itertools.pairwise(ordered):
        if value - previous > tol:
            ties.append([value])
        else:
            ties[-1].append(value)
    return ties


def _loop_distinct(values: list[float]) -> int:
    return len(_loop_ties(values))


def _loop_ranks(values: list[float]) -> list[float]:
    """1-based ranks; a tie's members share its average rank."""
    rank_of, position = {}, 0
    for tie in _loop_ties(values):
        average = sum(range(position + 1, position + len(tie) + 1)) / len(tie)
        rank_of.update(dict.fromkeys(tie, average))
        position += len(tie)
    return [rank_of[v] for v in values]


def _loop_spearman(a: list[float], b: list[float]) -> float:
    if _loop_distinct(a) < 2 or _loop_distinct(b) < 2:
        return math.nan
    ra, rb = _loop_ranks(a), _loop_ranks(b)
    ma, mb = sum(ra) / len(ra), sum(rb) / len(rb)
    num = sum((x - ma) * (y - mb) for x, y in zip(ra, rb, strict=True))
    den = math.sqrt(sum((x - ma) ** 2 for x in ra) * sum((y - mb) ** 2 for y in rb))
    return num / den


def _kept_values(values: torch.Tensor, keep: list[list[bool]], p: int) -> list[float]:
    return [v for v, k in zip(values[p].tolist(), keep[p], strict=True) if k]


def _loop_vectors(rewards: torch.Tensor, keep: list[list[bool]], p: int) -> int:
    rows = [
        tuple(v if math.isfinite(v) else None for v in row)
        for row, k in zip(rewards[p].tolist(), keep[p], strict=True)
        if k
    ]
    return len(set(rows))


def _loop_sign(a: torch.Tensor, b: torch.Tensor, keep: list[list[bool]]) -> float:
    same = compared = 0
    for p in range(a.shape[0]):
        for x, y, k in zip(a[p].tolist(), b[p].tolist(), keep[p], strict=True):
            if k and x != 0 and y != 0:
                compared += 1
                same += (x > 0) == (y > 0)
    return same / compared if compared else math.nan


def _nanmean(values: list[float]) -> float | None:
    defined = [v for v in values if not math.isnan(v)]
    return sum(defined) / len(defined) if defined else None


# --------------------------------------------------------------------------- inputs


def _tied_values(seed: int, shape: tuple[int, int]) -> torch.Tensor:
    """Integer-valued advantages in [−3, 3]: many exact ties and zeros."""
    gen = torch.Generator().manual_seed(100 + seed)
    return torch.randint(-3, 4, shape, generator=gen).double()


def _binary_rewards(seed: int, shape: tuple[int, int, int] = (10, 6, 3)) -> torch.Tensor:
    """0/1 components with some missing values and unscorable rollouts: many repeated vectors."""
    gen = torch.Generator().manual_seed(200 + seed)
    r = torch.randint(0, 2, shape, generator=gen).double()
    r[torch.rand(shape, generator=gen) < 0.1] = math.nan
    r[torch.rand(shape[:2], generator=gen) < 0.1] = math.inf  # ±inf is unscorable like NaN
    return r


# --------------------------------------------------------------------------- against the loop


@pytest.mark.parametrize("seed", SEEDS)
def test_kept_rollouts_match_loop(seed: int) -> None:
    r = random_rewards(seed, shape=(8, 5, 3), nan_frac=0.2, unscorable_frac=0.3)
    assert kept_rollouts(r).tolist() == _loop_kept(r)


@pytest.mark.parametrize("seed", SEEDS)
def test_sign_agreement_matches_loop(seed: int) -> None:
    r = random_rewards(seed, shape=(8, 6, 3), nan_frac=0.1, unscorable_frac=0.15)
    keep = kept_rollouts(r)
    a, b = _tied_values(seed, (8, 6)), _tied_values(seed + 50, (8, 6))
    expected = _loop_sign(a, b, _loop_kept(r))
    assert float(sign_agreement(a, b, keep)) == pytest.approx(expected, rel=1e-12)
    ga, gb = compute_advantages("grpo", r), compute_advantages("gdpo", r)
    assert float(sign_agreement(ga, gb, keep)) == pytest.approx(_loop_sign(ga, gb, _loop_kept(r)))


@pytest.mark.parametrize("seed", SEEDS)
def test_sign_agreement_and_sign_flip_are_one_comparison(seed: int) -> None:
    # sign_agreement (shadows) and sign_flip_vs_grpo (diagnostics) aggregate opposite_signs alike.
    r = random_rewards(seed, shape=(8, 6, 3), nan_frac=0.1, unscorable_frac=0.15)
    keep = kept_rollouts(r)
    grpo, gdpo = compute_advantages("grpo", r), compute_advantages("gdpo", r)
    both, opposite = opposite_signs(gdpo, grpo, keep)
    assert not bool((opposite & ~both).any()) and not bool((both & ~keep).any())
    flip = diagnostics(r, torch.ones(3), gdpo, grpo_advantages=grpo).sign_flip_vs_grpo
    assert flip == float(opposite.sum()) / int(both.sum())
    assert float(sign_agreement(gdpo, grpo, keep)) == pytest.approx(1.0 - flip, abs=1e-15)


def test_opposite_signs_zero_tolerance_is_relative_to_the_group() -> None:
    a = torch.tensor([[1.0, -1e-12, 2.0], [1e-12, -1e-12, 0.0]])
    b = torch.tensor([[1.0, 1.0, -1.0], [1.0, 1.0, 1.0]])
    keep = torch.ones(2, 3, dtype=torch.bool)
    assert opposite_signs(a, b, keep)[1].tolist() == [[False, True, True], [False, True, False]]
    # 1e-12 is rounding next to 2.0, but the largest value of the second group.
    assert opposite_signs(a, b, keep, zero_rtol=1e-9)[1].tolist() == [
        [False, False, True],
        [False, True, False],
    ]


@pytest.mark.parametrize("seed", SEEDS)
def test_distinct_values_are_value_ranks_ties(seed: int) -> None:
    r = random_rewards(seed, shape=(8, 7, 2), unscorable_frac=0.2)
    keep = kept_rollouts(r)
    values = _tied_values(seed, (8, 7))
    assert distinct_values(values, keep).tolist() == value_ranks(values, keep)[1].tolist()
    assert distinct_values(torch.zeros(3, 0), torch.zeros(3, 0, dtype=torch.bool)).tolist() == [0, 0, 0]


@pytest.mark.parametrize("seed", SEEDS)
def test_value_ranks_match_loop(seed: int) -> None:
    r = random_rewards(seed, shape=(8, 7, 2), unscorable_frac=0.2)
    keep = kept_rollouts(r)
    loop_keep = _loop_kept(r)
    values = _tied_values(seed, (8, 7))
    ranks, distinct = value_ranks(values, keep)
    for p in range(8):
        kept = _kept_values(values, loop_keep, p)
        assert _kept_values(ranks, loop_keep, p) == pytest.approx(_loop_ranks(kept))
        assert int(distinct[p]) == _loop_distinct(kept) == len(set(kept))  # integers: exact ties
        assert all(x == 0 for x, k in zip(ranks[p].tolist(), loop_keep[p], strict=True) if not k)


@pytest.mark.parametrize("seed", SEEDS)
def test_rank_correlation_matches_loop(seed: int) -> None:
    r = random_rewards(seed, shape=(12, 6, 3), nan_frac=0.1, unscorable_frac=0.2)
    keep, loop_keep = kept_rollouts(r), _loop_kept(r)
    pairs = [
        (_tied_values(seed, (12, 6)), _tied_values(seed + 50, (12, 6))),  # ties and constant groups
        (compute_advantages("grpo", r), compute_advantages("gdpo", r)),
        (compute_advantages("dr-grpo", r), compute_advantages("gdpo-corr", r)),
    ]
    for a, b in pairs:
        got = rank_correlation(a, b, keep)
        assert got.shape == (12,)
        for p in range(12):
            expected = _loop_spearman(_kept_values(a, loop_keep, p), _kept_values(b, loop_keep, p))
            if math.isnan(expected):
                assert math.isnan(float(got[p]))
            else:
                assert float(got[p]) == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize("seed", SEEDS)
def test_reward_vectors_and_resolution_match_loop(seed: int) -> None:
    r = _binary_rewards(seed)
    keep, loop_keep = kept_rollouts(r), _loop_kept(r)
    counts = reward_vector_counts(r, keep)
    for name in ("grpo", "gdpo-nobn", "corrgrpo"):
        adv = compute_advantages(name, r)
        got = resolution(adv, r, keep)
        for p in range(r.shape[0]):
            vectors = _loop_vectors(r, loop_keep, p)
            assert int(counts[p]) == vectors
            values = _kept_values(adv, loop_keep, p)
            expected = _loop_distinct(values) / vectors if vectors >= 2 else math.nan
            if math.isnan(expected):
                assert math.isnan(float(got[p]))
            else:
                assert float(got[p]) == pytest.approx(expected)
                assert 0.0 < float(got[p]) <= 1.0


@pytest.mark.parametrize("seed", SEEDS)
def test_shadow_diagnostics_batch_values_match_loop(seed: int) -> None:
    r = random_rewards(seed, shape=(10, 6, 3), nan_frac=0.1, unscorable_frac=0.2)
    r[0] = 1.0  # a constant group: no rank correlation, no resolution
    loop_keep = _loop_kept(r)
    adv = compute_advantages("grpo", r)
    shadows = {name: compute_advantages(name, r) for name in ("gdpo", "corrgrpo-guarded", "dr-grpo")}
    d = shadow_diagnostics(r, adv, shadows).to_json()
    json.dumps(d, allow_nan=False)
    assert set(d) == {"resolution", "shadow"} and list(d["shadow"]) == list(shadows)
    for name, other in shadows.items():
        got = d["shadow"][name]
        assert set(got) == {"sign_agree", "rank_corr", "resolution"}
        assert got["sign_agree"] == pytest.approx(_loop_sign(adv, other, loop_keep))
        corr = [
            _loop_spearman(_kept_values(adv, loop_keep, p), _kept_values(other, loop_keep, p))
            for p in range(10)
        ]
        assert got["rank_corr"] == pytest.approx(_nanmean(corr))
        res = [
            _loop_distinct(_kept_values(other, loop_keep, p)) / v
            if (v := _loop_vectors(r, loop_keep, p)) >= 2
            else math.nan
            for p in range(10)
        ]
        assert got["resolution"] == pytest.approx(_nanmean(res))
    res = [
        _loop_distinct(_kept_values(adv, loop_keep, p)) / v
        if (v := _loop_vectors(r, loop_keep, p)) >= 2
        else math.nan
        for p in range(10)
    ]
    assert d["resolution"] == pytest.approx(_nanmean(res))


# --------------------------------------------------------------------------- known cases


@pytest.mark.parametrize("seed", SEEDS)
def test_corrgrpo_shadows_grpo_exactly(seed: int) -> None:
    """Same centred numerator, one positive scale per group: same signs, order and resolution."""
    r = random_rewards(seed, shape=(16, 8, 4), nan_frac=0.1, unscorable_frac=0.1)
    r[1] = 3.0  # a constant group: zero advantages in both
    shadows = {"corrgrpo": compute_advantages("corrgrpo", r)}
    d = shadow_diagnostics(r, compute_advantages("grpo", r), shadows).to_json()
    expected = {"sign_agree": 1.0, "rank_corr": pytest.approx(1.0), "resolution": d["resolution"]}
    assert d["shadow"]["corrgrpo"] == expected


def test_gdpo_resolves_binary_vectors_that_grpo_collapses() -> None:
    # Per group: [1, 0], [0, 1], [0, 1], [0, 0]. GRPO: totals 1, 1, 1, 0 → 2 values for 3
    # vectors. GDPO: the components have different group statistics, so [1, 0] and [0, 1] differ.
    r = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [0.0, 1.0], [0.0, 0.0]]] * 3, dtype=torch.float64)
    keep = kept_rollouts(r)
    grpo = resolution(compute_advantages("grpo", r), r, keep)
    gdpo = resolution(compute_advantages("gdpo", r), r, keep)
    assert grpo.tolist() == pytest.approx([2 / 3] * 3) and gdpo.tolist() == [1.0] * 3


def test_equal_totals_summed_in_another_order_are_one_value() -> None:
    # 0.1 + 0.2 + 0.3 and 0.3 + 0.2 + 0.1 differ by one ulp in float64; still one GRPO advantage.
    r = torch.tensor(
        [[[0.1, 0.2, 0.3], [0.3, 0.2, 0.1], [0.0, 0.0, 0.0], [0.2, 0.3, 0.1]]], dtype=torch.float64
    )
    adv = compute_advantages("grpo", r)
    assert len(set(adv[0].tolist())) == 3  # the rounding noise is there
    assert resolution(adv, r, kept_rollouts(r)).tolist() == [0.5]  # 2 values for 4 vectors
    assert value_ranks(adv, kept_rollouts(r))[0].tolist() == [[3.0, 3.0, 1.0, 3.0]]


def test_paper_example_gdpo_flips_two_signs_but_keeps_resolution() -> None:
    grpo = compute_advantages("grpo", PAPER_REWARDS)
    shadows = {"gdpo-nobn": compute_advantages("gdpo-nobn", PAPER_REWARDS)}
    d = shadow_diagnostics(PAPER_REWARDS, grpo, shadows).to_json()
    assert d["shadow"]["gdpo-nobn"]["sign_agree"] == pytest.approx(0.5)
    assert d["resolution"] == 1.0 and d["shadow"]["gdpo-nobn"]["resolution"] == 1.0
    # Ranks: GRPO [1, 3, 4, 2], GDPO [1, 2, 4, 3]; Σd² = 2 → ρ = 1 − 6·2 / (4·15) = 0.8.
    assert d["shadow"]["gdpo-nobn"]["rank_corr"] == pytest.approx(0.8)


def test_undefined_batches_give_none() -> None:
    flat = torch.ones(3, 4, 2)
    gone = torch.full((2, 4, 2), math.nan)
    for r in (flat, gone):
        adv = compute_advantages("grpo", r)
        d = shadow_diagnostics(r, adv, {"gdpo": compute_advantages("gdpo", r)}).to_json()
        assert d == {
            "resolution": None,
            "shadow": {"gdpo": dict.fromkeys(("sign_agree", "rank_corr", "resolution"))},
        }
    assert shadow_diagnostics(flat, compute_advantages("grpo", flat), {}).to_json() == {
        "resolution": None,
        "shadow": {},
    }


@pytest.mark.parametrize("name", METHODS.names())
def test_every_method_in_range_as_a_shadow(name: str) -> None:
    r = random_rewards(3, shape=(12, 8, 4), nan_frac=0.1, unscorable_frac=0.1)
    d = shadow_diagnostics(r, compute_advantages("grpo", r), {name: compute_advantages(name, r)}).to_json()
    stats = d["shadow"][name]
    assert 0.0 <= stats["sign_agree"] <= 1.0 and -1.0 <= stats["rank_corr"] <= 1.0
    assert 0.0 < stats["resolution"] <= 1.0
