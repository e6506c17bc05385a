"""The run layout: names are built one way, and list-valued tags round-trip."""

from __future__ import annotations

import mrbench.core.layout as layout


def test_cell_tags_are_full_names_with_string_values() -> None:
    tags = layout.cell_tags(
        method="gdpo",
        task="tool-calling",
        task_version="3",
        model="tiny",
        seed=7,
        run_key="abc",
        git_sha="deadbeef",
        sweep=None,
        primary_metric="exact_match",
        lower_is_better={"b", "a"},
        reward_components=["format", "values"],
    )
    assert all(k.startswith(layout.TAG_PREFIX) for k in tags)
    assert layout.read_tag(tags, layout.SEED) == "7" and layout.read_tag(tags, layout.SWEEP) == ""
    assert layout.split_list(layout.read_tag(tags, layout.LOWER_IS_BETTER)) == ["a", "b"]
    assert layout.split_list(layout.read_tag(tags, layout.REWARD_COMPONENTS)) == ["format", "values"]
    assert layout.read_tag(tags, layout.ERROR, "none") == "none"


def test_cell_params_namespace_each_group() -> None:
    params = layout.cell_params(
        method="gdpo",
        task="t",
        model="m",
        seed=0,
        method_params={"eps": 1e-6},
        task_params={"n_train": 16},
        train={"steps": 2, "bf16": True},
    )
    assert params == {
        "method": "gdpo",
        "task": "t",
        "model": "m",
        "seed": "0",
        "method.eps": "1e-06",
        "task.n_train": "16",
        "train.steps": "2",
        "train.bf16": "True",
    }


def test_step_metric_keeps_layout_names_and_namespaces_the_rest() -> None:
    kept = [layout.reward_mean("format"), layout.reward_std("format"), layout.REWARD, layout.REWARD_STD]
    kept += [layout.adv_metric("std"), layout.adv_share("format")]
    assert [layout.step_metric(k) for k in kept] == kept
    assert layout.step_metric("loss") == "train/loss"
    assert layout.step_metric("completions/mean_length") == "train/completions/mean_length"
    assert layout.strip_prefix(layout.TRAIN, layout.step_metric("grad_norm")) == "grad_norm"
