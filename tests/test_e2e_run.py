"""End to end: `mrbench run` trains a real model a few steps with TRL and logs a complete MLflow run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from mlflow.tracking import MlflowClient

from mrbench.core.rewards_record import RewardsRecord
from mrbench.engine.config import resolve_spec

TASK_PARAMS = {"n_train": "16", "n_eval": "4"}
TRAIN = {"steps": "2", "num_generations": "2", "prompts_per_step": "2", "eval_limit": "4"}


def _run(args: list[str], results: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "MRBENCH_RESULTS": str(results), "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "mrbench", "run", *args],
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
    )


@pytest.mark.slow
def test_mrbench_run_logs_complete_mlflow_run(micro_model_dir, tmp_path):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    args = [
        "--method",
        "gdpo",
        "--task",
        "tool-calling",
        "--model",
        str(micro_model_dir),
        "--seed",
        "3",
        "--tracking-uri",
        uri,
        "--experiment",
        "e2e",
        "--quiet",
    ]
    args += [x for k, v in TASK_PARAMS.items() for x in ("--task-param", f"{k}={v}")]
    args += [x for k, v in TRAIN.items() for x in ("--train", f"{k}={v}")]
    proc = _run(args, tmp_path / "results")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "FINISHED" in proc.stdout and "exact_match" in proc.stdout

    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("e2e")
    runs = client.search_runs([experiment.experiment_id])
    assert len(runs) == 1
    run = runs[0]
    assert run.info.status == "FINISHED"

    expected = resolve_spec(
        "gdpo", "tool-calling", str(micro_model_dir), 3, task_params=TASK_PARAMS, train=TRAIN
    )
    tags = run.data.tags
    assert tags["mrbench.run_key"] == expected.run_key()
    assert tags["mrbench.method"] == "gdpo" and tags["mrbench.seed"] == "3"
    assert tags["mrbench.reward_components"] == "format,function_name,parameter,values"
    assert tags["mrbench.git_sha"]
    params = run.data.params
    assert params["method.eps"] == "1e-06" and params["train.steps"] == "2" and params["task.n_eval"] == "4"

    metrics = run.data.metrics
    for name in (
        "eval_before/exact_match",
        "eval/exact_match",
        "rewards/format/mean",
        "reward",
        "adv/sign_flip_vs_grpo",
        "adv/frac_zero_var_groups",
        "train/loss",
        "perf/wall_s",
    ):
        assert name in metrics, name
    history = client.get_metric_history(run.info.run_id, "eval/exact_match")
    assert sorted(m.step for m in history) == [0, 2]
    assert len(client.get_metric_history(run.info.run_id, "rewards/values/mean")) == 2

    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    artifacts |= {a.path for a in client.list_artifacts(run.info.run_id, "eval")}
    artifacts |= {a.path for a in client.list_artifacts(run.info.run_id, "samples")}
    assert {
        "config.json",
        "diagnostics.json",
        "samples/completions.jsonl",
        "eval/samples_before.jsonl",
        "eval/samples_after.jsonl",
    } <= artifacts
    local = Path(client.download_artifacts(run.info.run_id, "diagnostics.json", str(tmp_path)))
    diag = json.loads(local.read_text())
    assert diag["components"] == ["format", "function_name", "parameter", "values"] and diag["steps"] == 2
    # Every training step's per-rollout rewards, gathered, in rewards.npz (mrbench simulate --like).
    assert "rewards.npz" in artifacts
    rewards = RewardsRecord.load(client.download_artifacts(run.info.run_id, "rewards.npz", str(tmp_path)))
    assert rewards.components == ("format", "function_name", "parameter", "values")
    assert rewards.rewards.shape[0] == 2 and rewards.rewards.shape[-1] == 4
    p = rewards.rewards.shape[1]
    assert rewards.group_ids.tolist() == [list(range(0, p)), list(range(p, 2 * p))]
    assert (rewards.prompt_ids >= 0).all() and np.isfinite(rewards.rewards[..., 0]).all()
    # Artifacts of the default local store live under the results folder, not the CWD.
    assert run.info.artifact_uri.startswith((tmp_path / "results" / "artifacts").as_uri())


@pytest.mark.slow
def test_default_cell_improves_primary_metric(tmp_path):
    """The README's default cell, as is: tiny model built from scratch, tool-calling, 30 steps."""
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    proc = _run(["--tracking-uri", uri, "--quiet"], tmp_path / "results")
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = MlflowClient(tracking_uri=uri).search_runs(
        [MlflowClient(tracking_uri=uri).get_experiment_by_name("mrbench-runs").experiment_id]
    )[0]
    metrics = run.data.metrics
    assert metrics["eval/exact_match"] > metrics["eval_before/exact_match"]
