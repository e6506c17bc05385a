"""The lab is refused before it starts when it would not fit in memory, when a size is beyond its
bound, or when its scenario's name is not a name (issue 36, items 1 and 2)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from mrbench.core.errors import UserError
from mrbench.lab import memory
from mrbench.lab.presets import get_scenario
from mrbench.sweeps.spec import build_sweep_spec

GiB = 2**30


def test_the_estimate_bounds_the_measured_peak() -> None:
    # Measured (module docstring): 1.70 and 5.79 GB peak RSS for 2,000 and 8,000 seeds.
    scale = dataclasses.replace(get_scenario("scale"), steps=100)
    for seeds, measured in ((2_000, 1.70e9), (8_000, 5.79e9)):
        estimate = memory.estimate_bytes(scale, seeds=seeds, methods=3)
        assert measured < estimate < 1.5 * measured


def test_more_than_the_machine_has_is_refused_naming_the_option(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(memory, "available_bytes", lambda: 16 * GiB)
    scale = get_scenario("scale")
    memory.check_lab(scale, seeds=50, methods=3)  # the default: well within
    with pytest.raises(
        UserError,
        match=r"100000 seeds × 200 steps × 3 methods need about .* give fewer --seeds, --steps or --methods",
    ):
        memory.check_lab(scale, seeds=100_000, methods=3)


def test_sizes_steps_and_names_are_bounded() -> None:
    scale = get_scenario("scale")
    with pytest.raises(UserError, match="responses must be <= 4096"):
        memory.check_lab(dataclasses.replace(scale, responses=5_000), seeds=1, methods=1)
    with pytest.raises(UserError, match="steps must be <= 100000"):
        memory.check_lab(dataclasses.replace(scale, steps=100_001), seeds=1, methods=1)
    with pytest.raises(UserError, match=r"lab scenario name: '\.\./up' is not a valid name"):
        memory.check_lab(dataclasses.replace(scale, name="../up"), seeds=1, methods=1)


def test_a_sweep_whose_lab_would_not_fit_is_refused_before_any_cell(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(memory, "available_bytes", lambda: 16 * GiB)
    path = tmp_path / "s.yaml"
    path.write_text("name: s\nlab_seeds: 100000\n")
    with pytest.raises(UserError, match=r"lab scenario 'scale': 100000 seeds .* give fewer lab_seeds"):
        build_sweep_spec(config=path)
    path.write_text("name: s\nlab_seeds: 100000\nlab: []\n")  # no lab: nothing to refuse
    assert build_sweep_spec(config=path).lab_seeds == 100_000
