"""The runner writes the run layout: tags, params and per-step metric names (no training here)."""

from __future__ import annotations

from mlflow.tracking import MlflowClient

import mrbench.core.layout as layout
from mrbench.engine.cell.runner import MlflowStepLogger, cell_tags
from mrbench.engine.config import resolve_spec
from mrbench.engine.runs.tracking import RunLog
from mrbench.store.client import RetryingClient, ensure_experiment
from mrbench.tasks import build_task

TASK_PARAMS = {"n_train": "16", "n_eval": "4"}


def _spec():
    return resolve_spec("gdpo", "tool-calling", "tiny", 3, task_params=TASK_PARAMS, train={"steps": "2"})


def test_cell_params_name_every_setting() -> None:
    spec = _spec()
    params = spec.flat_params()
    assert (params["method"], params["task"], params["model"], params["seed"]) == (
        "gdpo",
        "tool-calling",
        "tiny",
        "3",
    )
    assert {k.split(".")[0] for k in params} == {"method", "task", "model", "seed", "train"}
    assert params["method.eps"] == "1e-06" and params["train.steps"] == "2" and params["task.n_eval"] == "4"


def test_cell_tags_describe_the_task() -> None:
    spec = _spec()
    task = build_task(spec.task, spec.task_params)
    try:
        tags = cell_tags(spec, task, "sw")
    finally:
        task.close()
    assert layout.read_tag(tags, layout.RUN_KEY) == spec.run_key()
    assert layout.read_tag(tags, layout.SWEEP) == "sw" and layout.read_tag(tags, layout.SEED) == "3"
    assert layout.split_list(layout.read_tag(tags, layout.REWARD_COMPONENTS)) == [
        c.name for c in task.reward_components()
    ]
    assert layout.read_tag(tags, layout.PRIMARY_METRIC) == task.primary_metric


def test_step_logger_writes_layout_names(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("MRBENCH_RESULTS", str(tmp_path / "results"))
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    client = MlflowClient(tracking_uri=uri)
    run_id = client.create_run(ensure_experiment("steps", uri)).info.run_id
    logger = MlflowStepLogger(RunLog(RetryingClient(uri), run_id, tmp_path / "spool"))
    logger.log({"loss": 0.5, "rewards/format/mean": 1.0, "adv/std": 0.2, "reward": 0.7, "flag": True}, 1)
    logger.log({"loss": float("nan"), "epoch": 0.5, "note": "text"}, 2)
    metrics = client.get_run(run_id).data.metrics
    assert metrics == {
        "train/loss": 0.5,
        "rewards/format/mean": 1.0,
        "adv/std": 0.2,
        "reward": 0.7,
        "train/epoch": 0.5,
    }
    assert [m.step for m in client.get_metric_history(run_id, "train/loss")] == [1]
