"""A sweep's name when none is given, and config errors that name their file and key (issue 25)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mrbench.core.errors import UserError
from mrbench.sweeps.spec import PRESETS, build_sweep_spec


def test_a_sweep_unlike_its_preset_is_named_after_its_content() -> None:
    # It used to land in the `smoke` experiment, beside the default sweep's cells.
    plugin_task = build_sweep_spec(overrides={"tasks": "tool-calling", "seeds": "0"})
    assert re.fullmatch(r"smoke-[0-9a-f]{8}", plugin_task.name), plugin_task.name
    # Resume: the same command gives the same name, another grid another one.
    assert build_sweep_spec(overrides={"tasks": "tool-calling", "seeds": "0"}).name == plugin_task.name
    assert build_sweep_spec(overrides={"tasks": "tool-calling", "seeds": "1"}).name != plugin_task.name
    assert build_sweep_spec(preset="cpu", overrides={"steps": 2}).name.startswith("cpu-")
    assert build_sweep_spec(overrides={"tasks": "tool-calling", "name": "mine"}).name == "mine"


@pytest.mark.parametrize("preset", list(PRESETS))
def test_the_presets_keep_their_names(preset: str) -> None:
    assert build_sweep_spec(preset=preset).name == preset
    # How cells run (workers, the lab, the report) is not what they compute: the same sweep.
    same = build_sweep_spec(preset=preset, overrides={"workers": 3, "lab": [], "report": False})
    assert same.name == preset
    own_seeds = ",".join(str(seed) for seed in PRESETS[preset].seeds)  # given, but the preset's own
    assert build_sweep_spec(preset=preset, overrides={"seeds": own_seeds}).name == preset


def _config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "colleague.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("text", "key", "says"),
    [
        ("methods: [grpo, grpoo]\n", "methods", "unknown method 'grpoo'. Did you mean 'grpo'"),
        ("methods: ['builtins:exec']\n", "methods", "method 'builtins:exec' does not fit"),
        ("tasks: [tool-caling]\n", "tasks", "unknown task 'tool-caling'"),
        (
            "methods: [grpo]\nmethod_params: {grpo: {epz: 1}}\n",
            "method_params.grpo",
            "unknown parameter 'epz'",
        ),
        ("methods: [grpo]\nmethod_params: {grpo: {eps: -1}}\n", "method_params.grpo", "bad value -1"),
        (
            "tasks: [tool-calling]\ntask_params: {tool-calling: {n_eval: 0}}\n",
            "task_params.tool-calling",
            "bad value 0",
        ),
        ("train: {learning_rat: 0.1}\n", "train", "unknown train setting 'learning_rat'"),
        (
            "tasks: [tool-calling]\ntask_train: {tool-calling: {stepz: 2}}\n",
            "task_train.tool-calling",
            "stepz",
        ),
        ("models: [tiny, tinyy-s]\n", "models", "unknown model 'tinyy-s'"),
        ("lab: [scale, scael]\n", "lab", "unknown scenario 'scael'"),
    ],
)
def test_every_config_error_names_the_file_and_the_key(
    tmp_path: Path, text: str, key: str, says: str
) -> None:
    path = _config(tmp_path, text)
    with pytest.raises(UserError) as info:
        build_sweep_spec(config=path)
    message = str(info.value)
    assert message.startswith(f"sweep setting {key!r} in {path}: ") and says in message, message
    assert "\n" not in message


def test_a_value_the_command_line_replaces_is_not_checked(tmp_path: Path) -> None:
    path = _config(tmp_path, "methods: [grpoo]\n")
    assert build_sweep_spec(config=path, overrides={"methods": "grpo"}).methods == ("grpo",)
