"""Values that pass parsing and would then do harm are refused or made safe: hyper-parameters out
of their declared range, non-finite train settings, and rewards beyond the supported magnitude."""

from __future__ import annotations

import math
import warnings
from typing import Annotated

import pytest
import torch

import mrbench
from mrbench.core.errors import RegistryError, UserError
from mrbench.core.registry import Range, Registry
from mrbench.engine.config import TrainSettings
from mrbench.methods import METHODS, _stats, compute_advantages, get_method

# ------------------------------------------------------------------------------- declared ranges


def test_range_admits_and_describes() -> None:
    positive, unit = Range(gt=0), Range(ge=0, le=1)
    assert positive.admits(1e-12) and not positive.admits(0) and not positive.admits(-1.0)
    assert unit.admits(0) and unit.admits(1) and not unit.admits(1.5)
    for bad in (math.nan, True, "1", None):
        assert not positive.admits(bad)
    assert (str(positive), str(unit), str(Range())) == ("> 0", ">= 0 and <= 1", "any number")
    assert unit.bounds() == {"ge": 0, "le": 1}
    assert mrbench.Range is Range  # for plugin authors


def test_every_numeric_hyper_parameter_of_a_built_in_method_declares_a_range() -> None:
    for entry in METHODS:
        numeric = [
            k for k, v in entry.params.items() if isinstance(v, int | float) and not isinstance(v, bool)
        ]
        assert sorted(entry.ranges) == sorted(numeric), entry.name
        for key, bound in entry.ranges.items():
            assert bound.admits(entry.params[key]), (entry.name, key)
    assert {k: str(v) for k, v in get_method("corrgrpo-guarded").ranges.items()} == {
        "eps": "> 0",
        "min_corr_sum": ">= 0",
    }


@pytest.mark.parametrize("name", ["grpo", "gdpo", "gdpo-nobn", "corrgrpo", "corrgrpo-guarded", "gdpo-corr"])
@pytest.mark.parametrize(
    ("eps", "says"), [("-1", "-1.0"), ("nan", "nan"), (-1e-6, "-1e-06"), ("inf", "must be a finite number")]
)
def test_eps_must_be_non_negative_and_finite(name: str, eps: object, says: str) -> None:
    with pytest.raises(RegistryError, match=f"parameter 'eps' of '{name}'") as info:
        compute_advantages(name, torch.randn(2, 4, 2), eps=eps)
    assert says in str(info.value)


def test_eps_zero_only_where_a_zero_denominator_is_guarded() -> None:
    # GRPO and GDPO divide by std + eps and give 0 for a zero std: eps = 0 is the exact z-score.
    # CorrGRPO divides by sqrt(Σρ + eps), and Σρ is exactly 0 for anti-correlated components.
    r = torch.randn(2, 4, 2)
    for name in ("grpo", "gdpo", "gdpo-nobn"):
        assert torch.isfinite(compute_advantages(name, r, eps=0)).all()
        assert str(get_method(name).ranges["eps"]) == ">= 0"
    for name in ("corrgrpo", "corrgrpo-guarded", "gdpo-corr"):
        with pytest.raises(
            RegistryError, match=f"bad value 0.0 for parameter 'eps' of '{name}': must be > 0"
        ):
            compute_advantages(name, r, eps="0")


def test_values_inside_the_range_still_work() -> None:
    r = torch.randn(2, 4, 2, dtype=torch.float64)
    assert torch.isfinite(compute_advantages("grpo", r, eps="1e-12")).all()
    guarded = compute_advantages("corrgrpo-guarded", r, min_corr_sum=0)
    assert torch.allclose(guarded, compute_advantages("corrgrpo", r))
    with pytest.raises(RegistryError, match="'min_corr_sum' of 'corrgrpo-guarded': must be >= 0"):
        compute_advantages("corrgrpo-guarded", r, min_corr_sum=-0.5)


def test_negative_eps_used_to_blow_advantages_up() -> None:
    # Why the range: with eps = -1 the GRPO denominator std - 1 crosses zero.
    r = torch.tensor([[[0.0], [1.0], [0.0], [1.0]]], dtype=torch.float64)  # std ≈ 0.577
    from mrbench.methods.grpo import grpo

    assert float(grpo(r, torch.ones(1), eps=-0.55).abs().max()) > 10  # the raw function, unchecked
    assert float(compute_advantages("grpo", r).abs().max()) < 1


def test_a_plugin_declares_ranges_the_same_way() -> None:
    reg: Registry = Registry("widget")

    @reg.register("w")
    def widget(
        x: object,
        *,
        rate: Annotated[float, Range(gt=0, lt=1)] = 0.5,
        n: Annotated[int, Range(ge=1)] = 3,
        scale: float = 1.0,
        cap: float = math.inf,
    ) -> object:
        return x

    entry = reg.get("w")
    assert {k: str(v) for k, v in entry.ranges.items()} == {"rate": "> 0 and < 1", "n": ">= 1"}
    assert entry.resolve_params({"rate": "0.25", "n": "2"})["rate"] == 0.25
    with pytest.raises(
        RegistryError, match=r"bad value 1.0 for parameter 'rate' of 'w': must be > 0 and < 1"
    ):
        entry.resolve_params({"rate": "1"})
    with pytest.raises(RegistryError, match="bad value 0 for parameter 'n'"):
        entry.resolve_params({"n": 0})
    with pytest.raises(RegistryError, match="bad value nan for parameter 'scale' of 'w': must be a finite"):
        entry.resolve_params({"scale": "nan"})
    assert entry.resolve_params({"cap": "inf"})["cap"] == math.inf  # its own default is not finite

    def bad_default(x: object, *, rate: Annotated[float, Range(gt=0)] = 0.0) -> object:
        return x

    with pytest.raises(TypeError, match=r"the default 0.0 of hyper-parameter 'rate' is not > 0"):
        reg.register("bad")(bad_default)


def test_string_annotations_are_read_and_unreadable_ones_ignored() -> None:
    # This module uses `from __future__ import annotations`: every annotation is a string here.
    reg: Registry = Registry("widget")

    @reg.register("ok")
    def ok(x: object, *, eps: Annotated[float, Range(gt=0)] = 1.0) -> object:
        return x

    @reg.register("unreadable")
    def unreadable(x: object, *, eps: NotImportedHere = 1.0) -> object:  # type: ignore[name-defined]  # noqa: F821
        return x

    assert str(reg.get("ok").ranges["eps"]) == "> 0"
    assert reg.get("unreadable").ranges == {}
    assert reg.get("unreadable").resolve_params({"eps": "2"}) == {"eps": 2.0}


# ---------------------------------------------------------------------------- train settings


@pytest.mark.parametrize(
    ("overrides", "says"),
    [
        ({"learning_rate": "inf"}, "learning_rate=inf (must be a finite number)"),
        ({"learning_rate": "nan"}, "learning_rate=nan (must be a finite number)"),
        ({"learning_rate": "0"}, "learning_rate=0.0 (must be > 0)"),
        ({"learning_rate": "-1e-5"}, "learning_rate=-1e-05 (must be > 0)"),
        ({"beta": "inf"}, "beta=inf (must be a finite number)"),
        ({"temperature": "-inf"}, "temperature=-inf (must be a finite number)"),
        ({"temperature": "0"}, "temperature=0.0 (must be > 0)"),
        ({"steps": "0", "beta": "-1"}, "steps=0 (must be >= 1), beta=-1.0 (must be >= 0)"),
    ],
)
def test_train_settings_are_finite_and_in_range(overrides: dict[str, str], says: str) -> None:
    with pytest.raises(UserError) as info:
        TrainSettings.from_overrides(overrides)
    assert str(info.value) == f"invalid train settings: {says}"


# --------------------------------------------------------------------------- reward magnitude


@pytest.fixture
def fresh_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    """Forget that this process already warned about the reward magnitude."""
    monkeypatch.setattr(_stats, "_warned_scale", False)


def huge_rewards(scale: float) -> torch.Tensor:
    """``[2, 4, 2]`` float64 rewards of order ``scale``, with a NaN and an unscorable rollout."""
    base = torch.tensor(
        [
            [[1.0, 2.0], [3.0, 0.1], [2.0, 2.0], [0.0, 1.0]],
            [[0.5, 1.0], [2.0, math.nan], [1.0, 3.0], [math.nan] * 2],
        ],
        dtype=torch.float64,
    )
    return base * scale


SCALE_INVARIANT = ("grpo", "gdpo", "gdpo-nobn", "gdpo-corr")
REWARD_UNITS = ("dr-grpo", "corrgrpo", "corrgrpo-guarded")


@pytest.mark.parametrize("scale", [1e200, 1e300, 5e307])
def test_huge_rewards_give_finite_meaningful_advantages_and_one_warning(
    scale: float, fresh_warning: None
) -> None:
    r, unit = huge_rewards(scale), huge_rewards(1.0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for name in SCALE_INVARIANT:
            adv = compute_advantages(name, r)
            # The advantages of the same rewards at unit scale, up to eps's share (eps = 1e-6 is
            # added to stds of order 1 here and of order 2**20 in the scaled working copy there).
            assert torch.allclose(adv, compute_advantages(name, unit), rtol=0, atol=1e-5), name
            assert float(adv.abs().max()) > 0.1, name  # not the all-zero answer of an overflow
        for name in REWARD_UNITS:
            adv = compute_advantages(name, r)
            assert torch.isfinite(adv).all(), name
            expected = compute_advantages(name, unit) * scale  # in reward units
            finite = torch.isfinite(expected)
            assert torch.allclose(adv[finite], expected[finite], rtol=1e-6), name
    scale_warnings = [w for w in caught if issubclass(w.category, _stats.RewardScaleWarning)]
    assert len(scale_warnings) == 1  # once per process, however many calls
    assert "beyond the supported magnitude 1e+06" in str(scale_warnings[0].message)


def test_supported_magnitude_is_silent_and_exactly_as_before(fresh_warning: None) -> None:
    r = huge_rewards(1e5)
    with warnings.catch_warnings():
        warnings.simplefilter("error", _stats.RewardScaleWarning)
        for name in METHODS.names():
            compute_advantages(name, r)
        # Weighted: |w·r| is what counts.
        compute_advantages("grpo", huge_rewards(1e3), torch.tensor([100.0, 1.0], dtype=torch.float64))
    with pytest.warns(_stats.RewardScaleWarning, match=r"rewards reach 3e\+07"):
        compute_advantages("grpo", huge_rewards(1e5), torch.tensor([100.0, 1.0], dtype=torch.float64))


def test_float32_rewards_beyond_the_magnitude_warn(fresh_warning: None) -> None:
    r = (huge_rewards(1e30)).to(torch.float32)
    with pytest.warns(_stats.RewardScaleWarning):
        adv = compute_advantages("corrgrpo", r)
    assert adv.dtype == torch.float32 and torch.isfinite(adv).all()
