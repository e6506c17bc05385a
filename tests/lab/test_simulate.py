"""The training loop: batched seeds equal a per-seed loop, batch-coupled methods run per seed,
plugins and NaN rewards go through the registry's own functions and rules."""

from __future__ import annotations

import textwrap
from dataclasses import replace

import numpy as np
import pytest
import torch

from mrbench.core.errors import UnknownNameError, UnknownParamError
from mrbench.lab.estimators import load_estimator
from mrbench.lab.presets import get_scenario
from mrbench.lab.scenarios import scenario_from_dict
from mrbench.lab.simulate import default_methods, process_pool, simulate
from mrbench.methods import METHODS

SMALL = replace(get_scenario("collapse"), prompts=3, responses=6, steps=25)


def _same(a, b):
    assert np.allclose(a.components, b.components, rtol=1e-10, atol=1e-12)
    for key in a.diagnostics:
        assert np.allclose(a.diagnostics[key], b.diagnostics[key], rtol=1e-10, atol=1e-12, equal_nan=True), (
            key
        )


def test_batched_seeds_equal_a_per_seed_loop():
    methods = ["grpo", "gdpo", "corrgrpo"]
    batched = simulate(SMALL, methods, [0, 1, 2])
    assert batched.runs["gdpo"].batch_coupled and not batched.runs["grpo"].batch_coupled
    for i, seed in enumerate([0, 1, 2]):
        alone = simulate(SMALL, methods, [seed])
        for m in methods:
            a, b = batched.runs[m], alone.runs[m]
            assert np.allclose(a.components[i], b.components[0], rtol=1e-10, atol=1e-12), m
            for key in a.diagnostics:
                assert np.allclose(a.diagnostics[key][:, i], b.diagnostics[key][:, 0], equal_nan=True), (
                    m,
                    key,
                )


def test_every_registered_method_runs_by_default():
    result = simulate(replace(SMALL, steps=3), None, [0])
    assert result.methods == default_methods()
    assert set(METHODS.builtin_names()) <= set(result.methods)
    coupled = {m for m, run in result.runs.items() if run.batch_coupled}
    assert coupled & set(METHODS.builtin_names()) == {"gdpo", "gdpo-corr"}


def test_batch_coupled_method_sees_only_its_own_seed():
    est = load_estimator("gdpo", torch.ones(2, dtype=torch.float64))
    rewards = torch.randn(6, 4, 2, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    rewards[3:] *= 10.0
    fn = METHODS.get("gdpo").obj
    ones = torch.ones(2, dtype=torch.float64)
    per_seed = torch.cat([fn(rewards[:3], ones), fn(rewards[3:], ones)])
    assert torch.allclose(est(rewards, ones, seeds=2), per_seed)
    assert not torch.allclose(est(rewards, ones, seeds=1), per_seed)  # one batch: statistics shared


def test_process_pool_gives_the_same_result():
    with process_pool(2) as pool:
        parallel = simulate(SMALL, ["grpo", "gdpo"], [0, 1], executor=pool)
    serial = simulate(SMALL, ["grpo", "gdpo"], [0, 1])
    assert parallel.methods == serial.methods
    for m in serial.methods:
        _same(parallel.runs[m], serial.runs[m])


def test_plugins_by_module_path_including_batch_coupled_ones(tmp_path, monkeypatch):
    (tmp_path / "lab_plugin_mod.py").write_text(
        textwrap.dedent(
            '''
            import torch

            def centred(rewards, weights, *, scale: float = 1.0):
                """Weighted total minus its group mean, times scale."""
                total = torch.nan_to_num(rewards).matmul(weights)
                return (total - total.mean(dim=1, keepdim=True)) * scale

            def batch_centred(rewards, weights):
                """Weighted total minus the mean over the whole batch (couples groups)."""
                total = torch.nan_to_num(rewards).matmul(weights)
                return total - total.mean()
            '''
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    scenario = replace(SMALL, method_params={"lab_plugin_mod:centred": {"scale": 2.0}})
    result = simulate(scenario, ["lab_plugin_mod:centred", "lab_plugin_mod:batch_centred"], [0, 1])
    assert result.runs["lab_plugin_mod:centred"].params == {"scale": 2.0}
    assert not result.runs["lab_plugin_mod:centred"].batch_coupled
    assert result.runs["lab_plugin_mod:batch_centred"].batch_coupled
    alone = simulate(scenario, ["lab_plugin_mod:batch_centred"], [1])
    coupled = "lab_plugin_mod:batch_centred"
    assert np.allclose(result.runs[coupled].components[1], alone.runs[coupled].components[0])


def test_unknown_methods_and_params_fail_before_training():
    with pytest.raises(UnknownNameError, match="'gdpoo'"):
        simulate(SMALL, ["grpo", "gdpoo"], [0])
    with pytest.raises(UnknownParamError):
        simulate(replace(SMALL, method_params={"grpo": {"epz": 1}}), ["grpo"], [0])


def test_nan_rewards_follow_the_estimators_rules():
    scenario = scenario_from_dict(
        {
            "name": "holes",
            "components": ["a", "b"],
            "kinds": ["binary", "continuous"],
            "missing": [0.2, 0.1],
            "unscorable": 0.3,
            "prompts": 4,
            "responses": 6,
            "steps": 30,
        }
    )
    result = simulate(scenario, ["grpo", "gdpo", "corrgrpo"], range(4))
    for run in result.runs.values():
        assert np.isfinite(run.components).all()
        assert np.isfinite(run.diagnostics["max_abs_adv"]).all()
        assert (run.scores["objective"] > 0.5).all()  # still learns from the scorable rollouts


def test_linear_policy_generalises_across_prompts():
    scenario = replace(get_scenario("redundant"), policy="linear", steps=60, lr=0.5, prompts=4, responses=8)
    result = simulate(scenario, ["grpo"], range(8))
    run = result.runs["grpo"]
    objective = run.components @ np.asarray(scenario.weights)
    assert (objective[:, -1] > objective[:, 0]).all()
    assert np.median(run.scores["objective"]) > 0.8


@pytest.mark.parametrize(
    "settings",
    [
        {},
        {"policy": "linear", "features": 2, "ppo_epochs": 2, "ppo_clip": 0.2, "unscorable": 0.1},
        {"missing": [0.2, 0.0, 0.1], "ppo_epochs": 3},
    ],
    ids=["tabular", "linear-ppo-unscorable", "missing"],
)
def test_every_method_in_one_loop_equals_one_loop_per_method_bit_for_bit(settings):
    from mrbench.lab.estimators import load_estimator as load
    from mrbench.lab.generator import ComponentSpec, draw_instance
    from mrbench.lab.simulate import REFERENCE_METHOD, load_estimators, single_thread, train

    scenario = replace(SMALL, steps=15, **settings)
    together = simulate(scenario, None, [3, 1])  # every registered method, one loop
    spec = ComponentSpec.of(scenario)
    reference = load(REFERENCE_METHOD, spec.weight)
    with single_thread():
        instance = draw_instance(scenario, (3, 1), spec)
        for est in load_estimators(scenario, None):
            alone = train(scenario, instance, spec, est, reference)
            run = together.runs[est.name]
            assert np.array_equal(run.components, alone.components), est.name
            for key in alone.diagnostics:
                assert np.array_equal(run.diagnostics[key], alone.diagnostics[key], equal_nan=True), (
                    est.name,
                    key,
                )
            for key in alone.scores:
                assert np.array_equal(run.scores[key], alone.scores[key], equal_nan=True), (est.name, key)
