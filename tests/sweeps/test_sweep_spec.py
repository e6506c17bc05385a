"""Sweep specs: presets, YAML files and CLI overrides, and the errors for bad input."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from mrbench.core.errors import UserError
from mrbench.engine.config import TrainSettings
from mrbench.sweeps.spec import CPU_LADDER, PRESETS, build_sweep_spec, load_yaml


def write(tmp_path: Path, text: str, name: str = "exp.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_default_is_the_smoke_preset() -> None:
    spec = build_sweep_spec()
    assert spec.name == "smoke"
    assert spec.methods == ("grpo", "gdpo", "corrgrpo")
    assert spec.tasks == ("code-generation", "tool-calling", "agent-security")
    assert spec.models == ("tiny",) and spec.seeds == (0, 1, 2)
    assert spec.workers == 2 and spec.executor == "local" and spec.report


def test_cpu_preset_is_the_tiny_ladder_to_tiny_m_with_three_seeds() -> None:
    spec = build_sweep_spec(preset="cpu")
    assert spec.models == CPU_LADDER == ("tiny", "tiny-s", "tiny-m") and spec.seeds == (0, 1, 2)
    assert all(spec.models_for(t) == CPU_LADDER for t in spec.tasks)


def test_paper_preset_has_per_domain_models_and_valid_train_settings() -> None:
    spec = build_sweep_spec(preset="paper")
    assert "Qwen/Qwen2.5-Coder-7B-Instruct" in spec.models_for("code-generation")
    tool_models = ("Qwen/Qwen2.5-7B-Instruct", "Qwen/Qwen3-4B-Thinking-2507", "Qwen/Qwen3-8B")
    assert spec.models_for("tool-calling") == tool_models
    tools = TrainSettings.from_overrides(spec.train_for("tool-calling"))
    code = TrainSettings.from_overrides(spec.train_for("code-generation"))
    assert (tools.num_generations, tools.beta, tools.learning_rate) == (4, 0.0, 1e-6)
    assert (code.num_generations, code.beta, code.temperature) == (8, 0.001, 1.0)
    # 4 GPUs and 4 FSDP processes per cell: the memory plan's answer for the 7-8B models (docs/paper.md)
    assert (spec.gpus_per_cell, spec.processes_per_cell, spec.distributed) == (4.0, 4, "fsdp")


def test_cli_overrides_beat_the_file_which_beats_the_preset(tmp_path: Path) -> None:
    path = write(tmp_path, "preset: cpu\nseeds: [3, 4]\nsteps: 7\ntrain: {learning_rate: 0.01}\n")
    spec = build_sweep_spec(config=path, overrides={"n_seeds": 2, "methods": "grpo,corrgrpo", "tasks": None})
    assert spec.name == "exp"  # the file's stem
    assert spec.models == CPU_LADDER  # from the preset
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


# ------------------------------------------------------------------------- names and YAML faults


@pytest.mark.parametrize(
    ("file_name", "name"),
    [
        ("my sweep.yaml", "my-sweep"),
        ("Ablation (v2) – é.yml", "Ablation-v2-e"),
        ("cpu_3.seeds.yaml", "cpu_3.seeds"),
    ],
)
def test_the_name_is_the_file_name_slugged_never_a_default(tmp_path: Path, file_name: str, name: str) -> None:
    path = write(tmp_path, "preset: cpu\n", file_name)
    assert build_sweep_spec(config=path).name == name
    assert build_sweep_spec(config=path, overrides={"name": "given"}).name == "given"
    assert build_sweep_spec(config=write(tmp_path, "name: inside\n", file_name)).name == "inside"


def test_a_file_name_without_letters_needs_an_explicit_name(tmp_path: Path) -> None:
    path = write(tmp_path, "preset: cpu\n", "✓✓.yaml")
    with pytest.raises(UserError, match=r"cannot name the sweep after the file .*✓✓\.yaml.*--name"):
        build_sweep_spec(config=path)
    assert build_sweep_spec(config=path, overrides={"name": "ok"}).name == "ok"


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("", "is empty"),
        ("# only a comment\n", "is empty"),
        ("methods: [grpo, gdpo, grpo]\n", "'methods' in .*exp.yaml lists 'grpo' more than once"),
        ("methods: grpo,gdpo,gdpo\n", "'methods' .* lists 'gdpo' more than once"),
        ("tasks: [tool-calling, tool-calling]\n", "'tasks' .* lists 'tool-calling' more than once"),
        ("models: [tiny, tiny-s, tiny]\n", "'models' .* lists 'tiny' more than once"),
        ("models: {tool-calling: [tiny, tiny]}\n", "'models.tool-calling' .* lists 'tiny' more than once"),
        ("seeds: [0, 1, 0, 1]\n", "'seeds' .* lists 0, 1 more than once"),
        ("methods: [grpo]\nseeds: [0]\nmethods: [gdpo]\n", r"line 3, column 1\): key 'methods' is given tw"),
        ("x: \x01\n", "not valid YAML: unacceptable character #x0001"),
    ],
)
def test_yaml_faults_are_named(tmp_path: Path, text: str, fragment: str) -> None:
    with pytest.raises(UserError, match=fragment) as err:
        build_sweep_spec(config=write(tmp_path, text))
    assert "\n" not in str(err.value)


def test_a_file_that_is_not_utf8_is_named(tmp_path: Path) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes("name: café\n".encode("latin-1"))
    with pytest.raises(UserError, match=r"latin1\.yaml' is not UTF-8 text \(byte 0xe9 at offset 9\)"):
        build_sweep_spec(config=path)


def test_yaml_merge_keys_are_not_taken_for_repeated_keys(tmp_path: Path) -> None:
    path = write(tmp_path, "train: {<<: {learning_rate: 0.1, steps: 3}, steps: 4}\n")
    assert build_sweep_spec(config=path).train == {"learning_rate": 0.1, "steps": 4}


def test_real_cli_yaml_faults_exit_2_with_one_line_naming_the_value(tmp_path: Path) -> None:
    files = {
        "empty.yaml": b"",
        "dup.yaml": b"methods: [grpo, gdpo, grpo]\n",
        "dup-seeds.yaml": b"seeds: [3, 3]\n",
        "latin1.yaml": "methods: [grpo]\nname: caf\xe9\n".encode("latin-1"),
        "bad-name.yaml": b"name: 'my sweep'\n",
        "twice.yaml": b"methods: [grpo]\nmethods: [gdpo]\n",
    }
    expected = {
        "empty.yaml": "empty.yaml' is empty",
        "dup.yaml": "'methods' in dup.yaml lists 'grpo' more than once",
        "dup-seeds.yaml": "'seeds' in dup-seeds.yaml lists 3 more than once",
        "latin1.yaml": "latin1.yaml' is not UTF-8 text (byte 0xe9",
        "bad-name.yaml": "'my sweep' is not a valid sweep name",
        "twice.yaml": "key 'methods' is given twice",
    }
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    db = tmp_path / "never.db"
    cli = [sys.executable, "-m", "mrbench", "sweep", "--dry-run", "--tracking-uri", f"sqlite:///{db}"]
    procs = {
        name: subprocess.Popen(
            [*cli, "--config", name], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for name in files
    }
    procs["--name"] = subprocess.Popen(
        [*cli, "--name", "a/b"], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    expected["--name"] = "'name' in command-line options: 'a/b' is not a valid sweep name"
    for name, proc in procs.items():
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 2, (name, out, err)
        assert "Traceback" not in err and err.count("\n") == 1, (name, err)
        assert err.startswith("error: ") and expected[name] in err, (name, err)
    assert not db.exists()


def test_real_cli_names_a_sweep_after_its_file(tmp_path: Path) -> None:
    text = "methods: [grpo]\ntasks: [tool-calling]\nmodels: [tiny]\nseeds: [0]\n"
    config = write(tmp_path, text, "my sweep.yaml")
    db = tmp_path / "never.db"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "mrbench",
            "sweep",
            "--config",
            config.name,
            "--dry-run",
            "--tracking-uri",
            f"sqlite:///{db}",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "experiment 'my-sweep'" in " ".join(proc.stdout.split())
