"""The ``paper`` preset runs the paper's experiment: its data, budgets and evaluations (finding 1
of issue 33), 7–8B cells over 4 FSDP processes (finding 2), data and memory checked before any
run (mrbench.sweeps.preflight)."""

from __future__ import annotations

import io
from dataclasses import replace
from pathlib import Path

import pytest
from rich.console import Console

from mrbench.core.errors import UserError
from mrbench.engine.processes.distributed import per_process
from mrbench.sweeps import preflight
from mrbench.sweeps.memory_plan import GB
from mrbench.sweeps.orchestrator import run_sweep
from mrbench.sweeps.paper import PAPER_COMPLETION_TOKENS, PAPER_PROMPTS_PER_STEP, paper_steps
from mrbench.sweeps.spec import build_sweep_spec

FIXTURES = str(Path(__file__).resolve().parents[1] / "fixtures")


def test_the_preset_trains_and_evaluates_on_the_papers_data_at_its_budgets() -> None:
    spec = build_sweep_spec(preset="paper")
    data = {t: (p.get("dataset"), p.get("eval_dataset")) for t, p in spec.task_params.items()}
    assert data == {
        "code-generation": ("leetcode", "humaneval"),
        "tool-calling": ("toolrl", None),
        "agent-security": ("agentdojo", None),
    }
    assert {t: set(v) for t, v in spec.eval.items()} == {
        "code-generation": {"mbpp", "livecodebench"},
        "tool-calling": {"apibank", "bfcl"},
        "agent-security": {"asb", "injecagent"},
    }
    for task in spec.tasks:
        for model in spec.models_for(task):
            train = spec.train_for(task, model)
            assert train["max_completion_length"] == PAPER_COMPLETION_TOKENS[task]
            assert train["prompts_per_step"] * train["gradient_accumulation_steps"] == PAPER_PROMPTS_PER_STEP
            assert train["num_generations"] == (4 if task == "tool-calling" else 8)
            assert train["beta"] == (0.0 if task == "tool-calling" else 0.001)


@pytest.mark.parametrize("processes", [1, 2, 4, 8])
def test_every_cell_splits_its_micro_batch_over_the_processes(processes: int) -> None:
    # Finding 2: 2 prompts per micro-batch for 7-8B models could not be split over 4 processes.
    spec = build_sweep_spec(
        preset="paper", overrides={"processes_per_cell": processes, "distributed": "fsdp"}
    )
    for task in spec.tasks:
        for model in spec.models_for(task):
            train = spec.train_for(task, model)
            assert per_process(train["prompts_per_step"], processes) >= 1
            assert train["prompts_per_step"] * train["gradient_accumulation_steps"] == PAPER_PROMPTS_PER_STEP


def test_a_process_count_that_cannot_split_the_step_is_refused() -> None:
    with pytest.raises(UserError, match="cannot be split over 3 processes"):
        build_sweep_spec(preset="paper", overrides={"processes_per_cell": 3, "distributed": "fsdp"})


def test_the_presets_cells_fit_80_gb_and_one_gpu_is_refused_naming_the_fix() -> None:
    spec = build_sweep_spec(preset="paper")
    assert spec.processes_per_cell == 4 and spec.distributed == "fsdp"
    plans = preflight.cell_plans(spec, 80 * GB)
    assert len(plans) == 10 and all(p.plan is not None and p.plan.fits for p in plans)
    single = build_sweep_spec(preset="paper", overrides={"processes_per_cell": 1, "distributed": "ddp"})
    refused = preflight.refusals(single, preflight.cell_plans(single, 80 * GB))
    assert any("Qwen/Qwen3-8B" in line and "--processes-per-cell" in line for line in refused)
    assert not any("0.5B" in line for line in refused)


def _tools_only(root: str):
    spec = build_sweep_spec(preset="paper", overrides={"tasks": "tool-calling"})
    params = {**spec.task_params["tool-calling"], "data_path": root}
    return replace(spec, task_params={"tool-calling": params})


def test_missing_data_names_each_dataset_and_how_to_get_it(tmp_path: Path) -> None:
    missing = preflight.missing_data(_tools_only(str(tmp_path / "nowhere")))
    assert [(m.task, m.dataset, m.setting) for m in missing] == [
        ("tool-calling", "toolrl", "task_params.tool-calling.dataset"),
        ("tool-calling", "apibank", "eval.tool-calling"),
    ]
    assert all("git clone https://github.com/qiancheng0/ToolRL" in m.line() for m in missing)
    assert preflight.missing_data(_tools_only(FIXTURES)) == []  # a data root (tests/fixtures' layout)


def test_a_sweep_with_missing_data_stops_before_any_run(tmp_path: Path) -> None:
    console = Console(file=io.StringIO(), width=300)
    uri = f"sqlite:///{tmp_path / 'never.db'}"
    spec = _tools_only(str(tmp_path / "nowhere"))
    with pytest.raises(UserError, match=r"(?s)cannot start \(2 problem.*'toolrl'.*'apibank'"):
        run_sweep(spec, tracking_uri=uri, console=console, cell_fn=lambda *a, **k: None)
    assert not (tmp_path / "never.db").exists()
    # The dry run prints every cell's data, budget and memory plan, then the same lines.
    outcome = run_sweep(spec, tracking_uri=uri, dry_run=True, console=console)
    text = console.file.getvalue()
    assert "train toolrl, eval toolrl + apibank, bfcl; budget 512 tokens" in text
    assert "memory per GPU" in text and "Qwen/Qwen3-8B" in text
    assert "dry run: sweep" in text and "dataset 'apibank' (eval.tool-calling)" in text
    assert outcome.grid.cells == [] and not (tmp_path / "never.db").exists()


def test_a_cell_that_cannot_fit_is_refused_before_any_run(tmp_path: Path) -> None:
    spec = replace(_tools_only(FIXTURES), processes_per_cell=1, distributed="ddp", gpu_memory=80 * GB)
    with pytest.raises(
        UserError, match=r"cells tool-calling × Qwen/Qwen3-8B need .* give --processes-per-cell"
    ):
        run_sweep(
            spec, tracking_uri=f"sqlite:///{tmp_path / 'never.db'}", console=Console(file=io.StringIO())
        )
    assert not (tmp_path / "never.db").exists()


def test_steps_come_from_the_training_sets_size() -> None:
    spec = preflight.with_steps_from_data(_tools_only(FIXTURES))
    n_train = 5  # ToolRL's fixture: rlla_rl.json split by the task's rule (3 of 8 items evaluate)
    assert spec.task_train["tool-calling"]["steps"] == paper_steps("tool-calling", n_train) == 3
    shortened = preflight.with_steps_from_data(replace(_tools_only(FIXTURES), steps=2))
    assert "steps" not in shortened.task_train["tool-calling"]


def test_the_dry_run_with_the_data_present_lists_the_steps_and_the_grid(tmp_path: Path) -> None:
    console = Console(file=io.StringIO(), width=300)
    spec = replace(_tools_only(FIXTURES), seeds=(0,))
    outcome = run_sweep(
        spec, tracking_uri=f"sqlite:///{tmp_path / 'never.db'}", dry_run=True, console=console
    )
    text = console.file.getvalue()
    assert "steps (the paper's epochs over the training sets): tool-calling 3" in text
    assert len(outcome.grid.cells) == 9 and all(c.spec.train.steps == 3 for c in outcome.grid.cells)
    assert not (tmp_path / "never.db").exists()
