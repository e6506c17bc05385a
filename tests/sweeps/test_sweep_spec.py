"""Sweep specs: presets, YAML files and CLI overrides, and the errors for bad input."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from mrbench.core.errors import UserError
from mrbench.engine.config import TrainSettings
from mrbench.sweeps.spec import PRESETS, TINY_LADDER, build_sweep_spec, load_yaml


def write(tmp_path: Path, text: str, name: str = "exp.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_default_is_the_smoke_preset() -> None:
    spec = build_sweep_spec()
    assert spec.name == "smoke"
    assert spec.methods == ("grpo", "gdpo", "corrgrpo")
    assert spec.tasks == ("code-generation", "tool-calling", "agent-security")
    assert spec.models == ("tiny",) and spec.seeds == (0,)
    assert spec.workers == 1 and spec.executor == "local" and spec.report


def test_cpu_preset_is_the_tiny_ladder_with_three_seeds() -> None:
    spec = build_sweep_spec(preset="cpu")
    assert spec.models == TINY_LADDER and spec.seeds == (0, 1, 2)
    assert all(spec.models_for(t) == TINY_LADDER for t in spec.tasks)


def test_paper_preset_has_per_domain_models_and_valid_train_settings() -> None:
    spec = build_sweep_spec(preset="paper")
    assert "Qwen/Qwen2.5-Coder-7B-Instruct" in spec.models_for("code-generation")
    tool_models = ("Qwen/Qwen2.5-7B-Instruct", "Qwen/Qwen3-4B-Thinking-2507", "Qwen/Qwen3-8B")
    assert spec.models_for("tool-calling") == tool_models
    tools = TrainSettings.from_overrides(spec.train_for("tool-calling"))
    code = TrainSettings.from_overrides(spec.train_for("code-generation"))
    assert (tools.num_generations, tools.beta, tools.learning_rate) == (4, 0.0, 1e-6)
    assert (code.num_generations, code.beta, code.temperature) == (8, 0.001, 1.0)
    assert spec.gpus_per_cell == 1.0


def test_cli_overrides_beat_the_file_which_beats_the_preset(tmp_path: Path) -> None:
    path = write(tmp_path, "preset: cpu\nseeds: [3, 4]\nsteps: 7\ntrain: {learning_rate: 0.01}\n")
    spec = build_sweep_spec(config=path, overrides={"n_seeds": 2, "methods": "grpo,corrgrpo", "tasks": None})
    assert spec.name == "exp"  # the file's stem
    assert spec.models == TINY_LADDER  # from the preset
    assert spec.seeds == (0, 1)  # --n-seeds beats the file's seeds
    assert spec.methods == ("grpo", "corrgrpo")
    assert spec.train_for("tool-calling") == {"learning_rate": 0.01, "steps": 7}


def test_steps_apply_last_over_per_task_train(tmp_path: Path) -> None:
    spec = build_sweep_spec(preset="paper", overrides={"steps": 3, "tasks": "tool-calling"})
    assert spec.train_for("tool-calling")["steps"] == 3
    # Narrowing the tasks drops the preset's entries for the others instead of erroring.
    assert set(spec.task_models) == {"tool-calling"} and set(spec.task_train) == {"tool-calling"}


def test_per_task_models_mapping(tmp_path: Path) -> None:
    text = "tasks: [tool-calling, code-generation]\nmodels: {tool-calling: [tiny-s], code-generation: [tiny]}"
    path = write(tmp_path, text)
    spec = build_sweep_spec(config=path)
    assert spec.models_for("tool-calling") == ("tiny-s",)
    assert spec.models_for("code-generation") == ("tiny",)


@pytest.mark.parametrize("preset", list(PRESETS))
def test_to_dict_written_as_yaml_reads_back_equal(tmp_path: Path, preset: str) -> None:
    spec = build_sweep_spec(preset=preset, overrides={"seeds": "1,5"})
    path = write(tmp_path, yaml.safe_dump(spec.to_dict()))
    assert build_sweep_spec(config=path) == spec


def test_malformed_yaml_names_file_and_line(tmp_path: Path) -> None:
    path = write(tmp_path, "methods: [grpo, gdpo\ntasks: tool-calling\n")
    with pytest.raises(UserError, match=r"exp\.yaml.*not valid YAML.*line"):
        build_sweep_spec(config=path)


def test_yaml_must_be_a_mapping(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="must be a mapping"):
        build_sweep_spec(config=write(tmp_path, "- grpo\n- gdpo\n"))


def test_missing_file_is_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="cannot read sweep config"):
        load_yaml(tmp_path / "nope.yaml")


def test_unknown_keys_are_named_with_suggestions(tmp_path: Path) -> None:
    path = write(tmp_path, "metods: [grpo]\nseedz: [1]\n")
    with pytest.raises(UserError) as err:
        build_sweep_spec(config=path)
    message = str(err.value)
    assert "'metods' (did you mean 'methods'?)" in message
    assert "'seedz'" in message and "exp.yaml" in message


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("seeds: [0, x]\n", "'seeds'"),
        ("seeds: []\n", "at least one seed"),
        ("seeds: [-1]\n", "'seeds'"),
        ("n_seeds: 0\n", "'n_seeds'"),
        ("workers: 0\n", "'workers'"),
        ("workers: 1.5\n", "'workers'"),
        ("executor: slurm\n", "'executor'"),
        ("report: yes please\n", "'report'"),
        ("gpus_per_cell: -1\n", "'gpus_per_cell'"),
        ("methods: 3\n", "'methods'"),
        ("methods: [grpo, 3]\n", "'methods'"),
        ("name: 'bad name!'\n", "not a valid sweep name"),
        ("train: [1, 2]\n", "'train'"),
        ("seeds: [0]\nn_seeds: 2\n", "either 'seeds' or 'n_seeds'"),
        ("method_params: {corgrpo: {eps: 1}}\n", "'corgrpo'"),
        ("task_params: {tool-caling: {n_train: 3}}\n", "'tool-caling'"),
        ("models: {tool-caling: [tiny]}\n", "'tool-caling'"),
        ("tasks: [tool-calling]\nmodels: {}\n", "no models for task 'tool-calling'"),
    ],
)
def test_bad_values_are_named(tmp_path: Path, text: str, fragment: str) -> None:
    with pytest.raises(UserError, match=fragment.replace("(", r"\(").replace(")", r"\)")):
        build_sweep_spec(config=write(tmp_path, text))


def test_bad_cli_values_are_named() -> None:
    with pytest.raises(UserError, match="'n_seeds' in command-line options"):
        build_sweep_spec(overrides={"n_seeds": "many"})
    with pytest.raises(UserError, match="either 'seeds' or 'n_seeds'"):
        build_sweep_spec(overrides={"seeds": "0,1", "n_seeds": 2})


def test_unknown_preset_suggests_the_closest() -> None:
    with pytest.raises(UserError, match=r"unknown preset 'smok'\. Did you mean 'smoke'"):
        build_sweep_spec(preset="smok")


def test_comma_lists_are_split_stripped_and_deduplicated() -> None:
    spec = build_sweep_spec(overrides={"methods": " grpo, gdpo,grpo ,", "seeds": "2, 0, 2"})
    assert spec.methods == ("grpo", "gdpo")
    assert spec.seeds == (2, 0)
