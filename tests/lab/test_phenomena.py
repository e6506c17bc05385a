"""Each preset shows its phenomenon in its numbers, on fixed seeds.

Where an effect is claimed, the 95 % bootstrap interval of the probability of improvement
(:func:`mrbench.reporting.stats.probability_of_improvement`, seeds resampled) must exclude 0.5
(no difference). Every claim is the direction the scenario's docstring states.
"""

from __future__ import annotations

import functools

import numpy as np

from mrbench.lab.presets import get_scenario
from mrbench.lab.simulate import LabResult, simulate
from mrbench.reporting.stats import Interval, iqm, probability_of_improvement, stratified_bootstrap_ci

SEEDS = range(24)
REPS = 1000


@functools.cache
def run(preset: str, methods: tuple[str, ...]) -> LabResult:
    return simulate(get_scenario(preset), methods, SEEDS)


def score(result: LabResult, method: str, name: str) -> np.ndarray:
    return result.runs[method].scores[name]


def poi(x: np.ndarray, y: np.ndarray) -> Interval:
    return probability_of_improvement(x, y, reps=REPS)


def ci(x: np.ndarray) -> Interval:
    return stratified_bootstrap_ci(x, iqm, reps=REPS)


def test_scale_big_component_drowns_the_small_one_under_grpo():
    r = run("scale", ("grpo", "gdpo"))
    small = poi(score(r, "gdpo", "final/small"), score(r, "grpo", "final/small"))
    big = poi(score(r, "gdpo", "final/big"), score(r, "grpo", "final/big"))
    assert small.low > 0.5, small  # GDPO's normalised small-component reward beats GRPO's
    assert big.high < 0.5, big  # and GRPO, led by the 10× component, ends higher on it
    assert ci(score(r, "grpo", "final/small")).high < 0.65 < 0.75 < ci(score(r, "gdpo", "final/small")).low


def test_redundant_copies_outvote_the_independent_signal_under_every_estimator():
    r = run("redundant", ("grpo", "gdpo", "corrgrpo"))
    for method in r.methods:
        copies = np.mean([score(r, method, f"final/copy{i}") for i in (1, 2, 3)], axis=0)
        edge = poi(copies, score(r, method, "final/other"))
        assert edge.low > 0.9, (method, edge)
    # CorrGRPO rescales whole groups: same signs as GRPO, so it cannot re-weight the copies.
    assert (score(r, "corrgrpo", "sign_disagree") == 0).all()
    other = poi(score(r, "corrgrpo", "final/other"), score(r, "grpo", "final/other"))
    assert other.low < 0.5 < other.high, other


def test_collapse_grpo_maps_distinct_binary_combinations_to_one_advantage():
    r = run("collapse", ("grpo", "gdpo"))
    gain = poi(score(r, "gdpo", "resolution"), score(r, "grpo", "resolution"))
    assert gain.low > 0.5, gain
    assert ci(score(r, "grpo", "resolution")).high < 0.85
    assert ci(score(r, "gdpo", "resolution")).low > 0.9


def test_anti_correlation_blows_up_corrgrpo_and_the_guard_bounds_it():
    r = run("anti", ("grpo", "corrgrpo", "corrgrpo-guarded"))
    faithful, guarded = score(r, "corrgrpo", "max_abs_adv"), score(r, "corrgrpo-guarded", "max_abs_adv")
    assert ci(faithful).low > 100 * ci(guarded).high  # sqrt(ε) = 1e-3 denominators
    assert guarded.max() < 10 and score(r, "grpo", "max_abs_adv").max() < 3
    assert (score(r, "corrgrpo", "sign_disagree") == 0).all()  # magnitude, not direction
    better = poi(score(r, "corrgrpo-guarded", "objective"), score(r, "corrgrpo", "objective"))
    assert better.low > 0.5, better  # one 1000× step locks in a noisy group's winner


def test_paper_code_chance_anti_correlation_and_binary_collapse():
    r = run("paper-code", ("grpo", "gdpo", "corrgrpo", "corrgrpo-guarded"))
    # In groups of 8 binary outcomes two varying components are sometimes anti-correlated by
    # chance: Σρ ≈ 0 and faithful CorrGRPO's advantages jump; the guard keeps them in reward units.
    assert (
        ci(score(r, "corrgrpo", "max_abs_adv")).low
        > 50
        > 5
        > score(r, "corrgrpo-guarded", "max_abs_adv").max()
    )
    gain = poi(score(r, "gdpo", "resolution"), score(r, "grpo", "resolution"))
    assert gain.low > 0.5, gain


def test_paper_tools_gdpo_trades_the_wide_component_for_the_narrow_ones():
    r = run("paper-tools", ("grpo", "gdpo"))
    narrow = poi(score(r, "gdpo", "final/function_name"), score(r, "grpo", "final/function_name"))
    wide = poi(score(r, "gdpo", "final/values"), score(r, "grpo", "final/values"))
    assert narrow.low > 0.5, narrow  # ±0.5 component: GRPO under-weights it
    assert wide.high < 0.5, wide  # ±1.5 component: GRPO's favourite


def test_paper_security_reward_unit_advantages_learn_slower_on_binary_rewards():
    r = run("paper-security", ("grpo", "corrgrpo"))
    slower = poi(score(r, "corrgrpo", "steps_to_90"), score(r, "grpo", "steps_to_90"))
    assert slower.low > 0.5, slower
    for method in r.methods:
        assert ci(score(r, method, "objective")).low > 0.85  # both learn the task
