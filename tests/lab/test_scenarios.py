"""Scenario validation (every bad value named), YAML configs, presets."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from mrbench.core.errors import UnknownNameError, UserError
from mrbench.lab.config import load_config
from mrbench.lab.presets import PRESETS, binary_mean, continuous_mean, get_scenario
from mrbench.lab.scenarios import identity, scenario_from_dict, with_settings


def two(**extra):
    return scenario_from_dict({"name": "t", "components": ["a", "b"], **extra})


@pytest.mark.parametrize("name", list(PRESETS))
def test_presets_are_valid_and_documented(name):
    scenario = get_scenario(name)
    assert scenario.name == name and scenario.description
    assert PRESETS[name].__doc__ and len(scenario.corr) == scenario.k
    assert np.linalg.eigvalsh(np.array(scenario.corr)).min() >= -1e-8


def test_unknown_scenario_is_named_with_suggestions():
    with pytest.raises(UnknownNameError, match=r"'scal'.*'scale'"):
        get_scenario("scal")


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        ({"scales": [1.0, -2.0]}, "scale of component 'b' must be a finite number > 0, got -2.0"),
        ({"scales": [0, 1]}, "scale of component 'a'"),
        (
            {"weights": [1, 1, 1]},
            "weights has 3 entries [1.0, 1.0, 1.0] but there are 2 components ['a', 'b']",
        ),
        ({"scales": [1.0]}, "scales has 1 entries"),
        ({"corr": [[1, 0, 0], [0, 1, 0], [0, 0, 1]]}, "corr must be 2×2 to match the 2 components"),
        ({"corr": [[1, 0.5], [0.4, 1]]}, "symmetric"),
        ({"corr": [[1, 1.5], [1.5, 1]]}, "must be in [-1, 1], got 1.5"),
        ({"corr": [[2, 0], [0, 1]]}, "corr[0][0] ('a') must be 1, got 2.0"),
        ({"noise": [-1, 1]}, "noise of component 'a' must be a finite number >= 0, got -1"),
        (
            {"kinds": ["continuous", "ternary"]},
            "kind of component 'b' must be one of continuous, binary, got 'ternary'",
        ),
        ({"lows": [1, 0], "highs": [0, 1]}, "component 'a' needs low < high"),
        ({"group_size": 1}, "group_size must be an integer >= 2, got 1"),
        ({"steps": 0}, "steps must be an integer >= 1, got 0"),
        ({"lr": -0.1}, "lr must be a finite number > 0, got -0.1"),
        ({"policy": "mlp"}, "policy must be one of tabular, linear, got 'mlp'"),
        ({"unscorable": 1.0}, "unscorable must be in [0, 1), got 1.0"),
        ({"ppo_clip": 2}, "ppo_clip must be in (0, 1)"),
        ({"scalez": [1, 2]}, "unknown scenario setting 'scalez'. Did you mean 'scales'?"),
    ],
)
def test_bad_settings_raise_user_errors_naming_the_value(settings, named):
    with pytest.raises(UserError) as info:
        two(**settings)
    assert named in str(info.value)


def test_correlation_that_is_not_psd_is_refused_with_its_eigenvalue():
    bad = [[1, 0.9, -0.9], [0.9, 1, 0.9], [-0.9, 0.9, 1]]
    with pytest.raises(UserError, match=r"corr is not positive semi-definite \(smallest eigenvalue -0\.\d+"):
        scenario_from_dict({"name": "t", "components": ["a", "b", "c"], "corr": bad})
    with pytest.raises(UserError, match="noise_corr is not positive semi-definite"):
        scenario_from_dict({"name": "t", "components": ["a", "b", "c"], "noise_corr": bad})


def test_singular_psd_matrices_are_accepted():
    # Exact copies and exact trade-offs are legitimate (singular, PSD).
    two(corr=[[1, 1], [1, 1]])
    two(corr=[[1, -1], [-1, 1]])


def test_scalars_broadcast_and_defaults():
    s = two(scales=2, kinds="binary", noise=0.5)
    assert s.scales == (2.0, 2.0) and s.kinds == ("binary", "binary") and s.noise == (0.5, 0.5)
    assert s.corr == identity(2) and s.lows == (-math.inf, -math.inf) and s.noise_corr is None


def test_yaml_config_on_top_of_a_preset(tmp_path):
    path = tmp_path / "scale-3x.yaml"
    path.write_text("base: scale\nscales: [3, 1]\nsteps: 20\nmethod_params:\n  gdpo: {eps: 1.0e-4}\n")
    s = load_config(path)
    assert s.name == "scale-3x" and s.scales == (3.0, 1.0) and s.steps == 20
    assert s.components == get_scenario("scale").components and s.method_params == {"gdpo": {"eps": 1e-4}}


def test_yaml_config_from_scratch_and_its_errors(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("components: [x, y, z]\nscales: [1, 10]\n")
    with pytest.raises(UserError, match="scales has 2 entries"):
        load_config(path)
    path.write_text("components: [x, y]\nlows: [-inf, 0]\nhighs: [inf, 1]\n")
    s = load_config(path)
    assert s.name == "mine" and s.lows == (-math.inf, 0.0) and s.highs == (math.inf, 1.0)
    with pytest.raises(UserError, match="cannot read scenario config"):
        load_config(tmp_path / "missing.yaml")
    path.write_text("base: nope\n")
    with pytest.raises(UnknownNameError, match="scenario 'nope'"):
        load_config(path)
    path.write_text("- a\n- b\n")
    with pytest.raises(UserError, match="must be a mapping"):
        load_config(path)


def test_with_settings_revalidates():
    s = get_scenario("anti")
    assert with_settings(s, steps=None, group_size=4).group_size == 4
    with pytest.raises(UserError, match="group_size must be an integer >= 2, got 1"):
        with_settings(s, group_size=1)
    with pytest.raises(UserError, match="scale of component 'a'"):
        replace(s, scales=(-1.0, 1.0))


def test_level_helpers_hit_their_targets():
    noise = 1.0
    mean = binary_mean(0.15, noise)
    assert math.isclose(
        0.5 * (1 + math.erf(mean / math.sqrt(1 + noise**2) / math.sqrt(2))), 0.15, rel_tol=1e-9
    )
    rng = np.random.default_rng(0)
    m = continuous_mean(0.96, 1.0, 0.0, 1.0, noise)
    y = m + rng.standard_normal(400_000) * math.sqrt(1 + noise**2)
    assert np.clip(y, 0, 1).mean() == pytest.approx(0.96, abs=3e-3)


@pytest.mark.parametrize("name", list(PRESETS))
def test_to_dict_round_trips_through_settings(name):
    scenario = get_scenario(name)
    assert scenario_from_dict(scenario.to_dict()) == scenario
