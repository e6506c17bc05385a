"""Evaluation outside training (``mrbench eval``'s engine): the options become task settings, a
model is a folder, a preset or a cell's checkpoint, and each evaluation is one complete MLflow run
evaluated by the very function a cell evaluates with."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

import mrbench.core.layout as layout
from mrbench.core.errors import UserError
from mrbench.engine.cell import runner
from mrbench.engine.config import resolve_spec
from mrbench.engine.evaluation import evaluate as evaluation
from mrbench.engine.evaluation import extra_evals, policy
from mrbench.engine.evaluation.evaluate import EvalSpec, run_eval, task_settings
from mrbench.engine.evaluation.policy import with_pass_at_k

TOOLS = {"n_train": "16", "n_eval": "4"}


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("MRBENCH_RESULTS", str(tmp_path / "results"))
    return f"sqlite:///{tmp_path}/mlflow.db"


def _only_run(uri: str, experiment: str = layout.EVAL_EXPERIMENT):
    client = MlflowClient(tracking_uri=uri)
    runs = client.search_runs([client.get_experiment_by_name(experiment).experiment_id])
    assert len(runs) == 1
    return runs[0]


def _samples_artifact(uri: str, run_id: str, tmp_path: Path) -> list[dict]:
    local = MlflowClient(tracking_uri=uri).download_artifacts(run_id, layout.EVAL_SAMPLES, str(tmp_path))
    return [json.loads(line) for line in Path(local).read_text().splitlines()]


def test_cells_extra_evaluations_and_mrbench_eval_evaluate_through_one_path() -> None:
    for module in (runner, evaluation, extra_evals):
        assert module.evaluate_policy is policy.evaluate_policy, module.__name__
    assert runner.load_for_evaluation is evaluation.load_for_evaluation is policy.load_for_evaluation
    assert runner.cached_evaluation is extra_evals.cached_evaluation is policy.cached_evaluation


def test_eval_of_a_model_folder_logs_one_complete_run(micro_model_dir, store, tmp_path) -> None:
    spec = EvalSpec(model=str(micro_model_dir), task="tool-calling", limit=2, task_params=TOOLS)
    report = run_eval(spec, tracking_uri=store)

    assert (report.task, report.dataset, report.n, report.eval_of) == ("tool-calling", "embedded", 2, "")
    assert {"exact_match", "format", "reward_total"} <= set(report.metrics)
    assert set(report.to_json()) == {"model", "task", "dataset", "n", "metrics", "run_id", "wall_s"}
    run = _only_run(store)
    assert run.info.run_id == report.run_id and run.info.status == "FINISHED"
    tags = run.data.tags
    assert layout.read_tag(tags, layout.ROLE) == layout.ROLE_EVAL
    assert layout.read_tag(tags, layout.TASK) == "tool-calling"
    assert layout.read_tag(tags, layout.MODEL) == str(micro_model_dir)
    assert layout.read_tag(tags, layout.PRIMARY_METRIC) == "exact_match"
    # Not a cell: no run key (reports and resumed sweeps skip it), not a checkpoint's evaluation.
    assert layout.tag(layout.RUN_KEY) not in tags and layout.tag(layout.EVAL_OF) not in tags
    params = run.data.params
    assert params[layout.EVAL_PARAM + "limit"] == "2" and params[layout.EVAL_PARAM + "samples"] == "1"
    assert params[layout.EVAL_PARAM + "dataset"] == "embedded" and params["task.n_eval"] == "4"
    assert params[layout.PARAM_MODEL_PATH] == str(micro_model_dir) and params[layout.PARAM_SEED] == "0"
    metrics = run.data.metrics
    assert metrics[layout.eval_metric("exact_match")] == report.metrics["exact_match"]
    assert layout.PERF_WALL_S in metrics and layout.PERF_EVAL_S in metrics
    records = _samples_artifact(store, report.run_id, tmp_path)
    assert len(records) == 2 and {"id", "completion", "rewards"} <= set(records[0])


def test_eval_of_a_cells_checkpoint_is_its_own_evaluation_again(
    micro_model_dir, store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Also its precision: float32 weights under the cell's bfloat16 autocast, unless ``precision``
    says otherwise (finding 7 of issue 33)."""
    import torch

    cell_spec = resolve_spec(
        "grpo",
        "tool-calling",
        str(micro_model_dir),
        0,
        task_params=TOOLS,
        train={"steps": "1", "num_generations": "2", "prompts_per_step": "2", "eval_limit": "2"}
        | {"precision": "bf16"},
    )
    cell = runner.run_cell(cell_spec, tracking_uri=store, experiment="cells", progress=False)
    assert cell.checkpoint_dir
    seen: list[tuple[bool, torch.dtype]] = []
    evaluate = policy.evaluate_model

    def recording(task, model, tokenizer, limit):
        seen.append((torch.is_autocast_enabled("cpu"), next(model.parameters()).dtype))
        return evaluate(task, model, tokenizer, limit)

    monkeypatch.setattr(policy, "evaluate_model", recording)
    spec = EvalSpec(model=f"run:{cell.run_id}", task="tool-calling", limit=2, task_params=TOOLS)
    report = run_eval(spec, tracking_uri=store)
    assert report.eval_of == cell.run_id and report.model == f"run:{cell.run_id}"
    assert seen == [(True, torch.float32)]
    # The same settings, samples, weights and precision: the cell's own evaluation after training,
    # number for number.
    assert set(report.metrics) == set(cell.metrics_after)
    for name, value in cell.metrics_after.items():
        assert report.metrics[name] == value or (math.isnan(value) and math.isnan(report.metrics[name]))
    run = _only_run(store)
    tags = run.data.tags
    assert layout.read_tag(tags, layout.EVAL_OF) == cell.run_id
    assert layout.read_tag(tags, layout.METHOD) == "grpo"
    assert layout.read_tag(tags, layout.MODEL) == str(micro_model_dir)  # the model the cell trained
    assert run.data.params[layout.PARAM_MODEL_PATH] == cell.checkpoint_dir
    assert run.data.params[layout.EVAL_PARAM + "precision"] == "bf16"

    run_eval(EvalSpec(**{**spec.__dict__, "precision": "fp32"}), tracking_uri=store, experiment="fp32")
    assert seen[1] == (False, torch.float32)
    assert _only_run(store, "fp32").data.params[layout.EVAL_PARAM + "precision"] == "fp32"
    with pytest.raises(UserError, match="unknown precision 'fp16'"):
        run_eval(EvalSpec(**{**spec.__dict__, "precision": "fp16"}), tracking_uri=store, experiment="bad")
    assert MlflowClient(tracking_uri=store).get_experiment_by_name("bad") is None

    with pytest.raises(UserError, match=rf"run:{report.run_id}.*no saved checkpoint"):
        run_eval(EvalSpec(model=f"run:{report.run_id}", task="tool-calling"), tracking_uri=store)


def test_what_cannot_be_evaluated_stops_before_any_run(store, tmp_path, monkeypatch) -> None:
    with pytest.raises(UserError, match=r"'run:no-such-run'.*no run 'no-such-run'"):
        run_eval(EvalSpec(model="run:no-such-run", task="tool-calling"), tracking_uri=store)
    folder = tmp_path / "no-weights"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    with pytest.raises(UserError, match=rf"model '{re.escape(str(folder))}'.*holds no weights"):
        run_eval(EvalSpec(model=str(folder), task="tool-calling"), tracking_uri=store)
    with pytest.raises(UserError, match=r"holds no config\.json"):
        run_eval(EvalSpec(model=str(tmp_path), task="tool-calling"), tracking_uri=store)
    # A hub data set that is neither reachable nor cached: said before any run (and before the model).
    monkeypatch.setenv("HF_ENDPOINT", "https://hub.invalid")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    with pytest.raises(UserError, match=r"dataset 'mbpp'.*unreachable.*HF_HUB_OFFLINE=1"):
        run_eval(EvalSpec(model="tiny", task="code-generation", dataset="mbpp"), tracking_uri=store)
    client = MlflowClient(tracking_uri=store)
    assert client.get_experiment_by_name(layout.EVAL_EXPERIMENT) is None


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        (EvalSpec("tiny", "tool-calling"), {"dataset": "embedded", "seed": 0}),
        (EvalSpec("tiny", "tool-calling", dataset="bfcl-live_multiple"), {"dataset": "bfcl-live_multiple"}),
        (
            EvalSpec("tiny", "code-generation", dataset="humaneval"),
            {
                "dataset": "embedded",
                "eval_dataset": "humaneval",
                "max_completion_tokens": 512,
                "n_sampled": 1,
            },
        ),
        (
            EvalSpec(
                "tiny",
                "code-generation",
                dataset="mbpp",
                samples=5,
                seed=7,
                task_params={"max_completion_tokens": "16"},
            ),
            {"eval_dataset": "mbpp", "max_completion_tokens": 16, "n_sampled": 5, "seed": 7},
        ),
        (
            EvalSpec("tiny", "code-generation", task_params={"n_sampled": "3"}),
            {"eval_dataset": "", "n_sampled": 3},  # "": its training dataset's held-out split
        ),
        (EvalSpec("tiny", "agent-security", dataset="agentdojo"), {"dataset": "agentdojo"}),
    ],
    ids=["defaults", "bfcl", "humaneval", "mbpp-sampled", "task-param", "agentdojo"],
)
def test_options_become_task_settings(spec: EvalSpec, expected: dict) -> None:
    _, settings, dataset = task_settings(spec)
    assert {k: settings[k] for k in expected} == expected
    assert dataset == (spec.dataset or "embedded")  # the data evaluated, also when not named


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        (
            EvalSpec("tiny", "tool-calling", dataset="humaneval"),
            "unknown dataset 'humaneval'.*bfcl-live_simple",
        ),
        (EvalSpec("tiny", "code-generation", dataset="bfcl"), "unknown dataset 'bfcl'.*humaneval, mbpp"),
        (EvalSpec("tiny", "tool-calling", samples=2), "--samples 2: task 'tool-calling'.*greedy"),
        (EvalSpec("tiny", "code-generation", samples=0), "--samples must be >= 1"),
        (
            EvalSpec("tiny", "code-generation", seed=1, task_params={"seed": "2"}),
            "--seed and --task-param seed",
        ),
        (EvalSpec("tiny", "tool-calling", task_params={"nope": "1"}), "nope"),
    ],
    ids=["tools-dataset", "code-dataset", "greedy-task", "zero-samples", "seed-twice", "unknown-setting"],
)
def test_bad_options_name_the_value(spec: EvalSpec, says: str) -> None:
    with pytest.raises(UserError, match=says):
        task_settings(spec)


def test_pass_at_k_with_sampled_completions(micro_model_dir, store, tmp_path) -> None:
    spec = EvalSpec(
        model=str(micro_model_dir),
        task="code-generation",
        dataset="humaneval",
        limit=3,
        samples=2,
        task_params={"max_completion_tokens": "16"},  # the micro model cannot write code: keep it short
    )
    report = run_eval(spec, tracking_uri=store)
    assert report.n == 3 and report.dataset == "humaneval"
    assert {"sampled_pass_at_1", "sampled_pass_at_2", "pass_at_1", "executable_rate"} <= set(report.metrics)
    assert all(0.0 <= report.metrics[m] <= 1.0 for m in ("sampled_pass_at_1", "sampled_pass_at_2"))
    params = _only_run(store).data.params
    assert params["task.n_sampled"] == "2" and params[layout.EVAL_PARAM + "samples"] == "2"
    assert params["task.eval_dataset"] == "humaneval"
    records = _samples_artifact(store, report.run_id, tmp_path)
    assert [r["sampled"]["n"] for r in records] == [2, 2, 2]


def test_pass_at_k_keeps_what_the_task_reported() -> None:
    records = [{"sampled": {"n": 4, "passed": 1}}, {"sampled": {"n": 4, "passed": 0}}]
    assert with_pass_at_k({"sampled_pass_at_4": 0.3}, records, 4) == {"sampled_pass_at_4": 0.3}
    assert with_pass_at_k({}, records, 2) == {"sampled_pass_at_2": 0.25}  # (1 - C(3,2)/C(4,2)) / 2
    assert with_pass_at_k({"x": 1.0}, [{"id": "no tally"}], 2) == {"x": 1.0}
    assert with_pass_at_k({}, records, 1) == {}  # pass@1 is the task's own
