"""A sweep's ``eval`` key: extra datasets are checked when the sweep is resolved, evaluated on each
FINISHED cell's saved policy (the cell's own run gets the metrics, the pre-training ones once per
model), added to a finished sweep without training again, and shown in the report."""

from __future__ import annotations

import importlib.util
import io
import math
from pathlib import Path

import pytest
import yaml
from mlflow.tracking import MlflowClient
from rich.console import Console

import mrbench.core.layout as layout
from mrbench.core.errors import UserError
from mrbench.engine.evaluation import extra_evals
from mrbench.sweeps.grid import expand_grid
from mrbench.sweeps.orchestrator import run_sweep
from mrbench.sweeps.spec import PRESETS, apply_settings, build_sweep_spec

TOOLS = {"n_train": 16, "n_eval": 4, "max_completion_tokens": 64}  # the micro model holds 256
TRAIN = {"num_generations": 2, "prompts_per_step": 2, "eval_limit": 2}


def _sweep_file(tmp_path: Path, model: str, evals: dict, name: str = "extra") -> Path:
    config = {
        "name": name,
        "methods": ["grpo"],
        "tasks": ["tool-calling"],
        "models": [model],
        "seeds": [0],
        "steps": 1,
        "train": TRAIN,
        "task_params": {"tool-calling": TOOLS},
        "report": False,
        "lab": [],
        "eval": evals,
    }
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _cell_runs(uri: str, sweep: str) -> list:
    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name(sweep)
    runs = client.search_runs([experiment.experiment_id])
    return [r for r in runs if layout.read_tag(r.data.tags, layout.RUN_KEY)]


def test_the_eval_key_round_trips_and_is_not_in_the_run_key(tmp_path) -> None:
    # Datasets that ship with mrbench: BFCL's would need the optional bfcl-eval package here.
    spec = build_sweep_spec(config=_sweep_file(tmp_path, "tiny", {"tool-calling": ["embedded"]}))
    assert spec.eval == {"tool-calling": ("embedded",)}
    again = tmp_path / "again.yaml"
    again.write_text(yaml.safe_dump(spec.to_dict()))
    assert build_sweep_spec(config=again) == spec
    assert PRESETS["smoke"].eval == {}  # smoke: the cells' own evaluations only
    # paper: each domain's further benchmarks (docs/paper.md, its data table's `eval` rows)
    assert PRESETS["paper"].eval == {
        "code-generation": ("mbpp", "livecodebench"),
        "tool-calling": ("apibank", "bfcl"),
        "agent-security": ("asb", "injecagent"),
    }
    without = apply_settings(spec, {"eval": {}})
    keys = [c.key for c in expand_grid(spec).cells]
    assert keys == [c.key for c in expand_grid(without).cells]


@pytest.mark.parametrize(
    ("evals", "says"),
    [
        (
            {"tool-calling": ["bfcl-nope"]},
            r"eval\.tool-calling.*'bfcl-nope'.*choose from embedded, bfcl, bfcl-simple",
        ),
        ({"code-generation": ["humaneval"]}, r"'eval' names 'code-generation'.*not among the sweep's tasks"),
        ({"tool-calling": "embedded,embedded"}, r"'eval\.tool-calling'.*lists 'embedded' more than once"),
    ],
    ids=["unknown-dataset", "task-not-in-sweep", "repeated"],
)
def test_bad_eval_entries_stop_the_sweep_before_it_runs(tmp_path, evals, says) -> None:
    with pytest.raises(UserError, match=says):
        expand_grid(build_sweep_spec(config=_sweep_file(tmp_path, "tiny", evals)))


def test_data_that_cannot_load_here_stops_the_sweep_naming_the_dataset(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("HF_ENDPOINT", "https://hub.invalid")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    config = _sweep_file(tmp_path, "tiny", {"tool-calling": ["embedded"]})
    spec = apply_settings(build_sweep_spec(config=config), {"tasks": ["code-generation"], "eval": {}})
    spec = apply_settings(spec, {"eval": {"code-generation": ["mbpp"]}})
    with pytest.raises(UserError, match=r"eval\.code-generation', dataset 'mbpp'.*'mbpp'.*unreachable"):
        expand_grid(spec)

    from mrbench.tasks.tool_calling import bfcl

    def absent() -> Path:  # what bfcl_package_dir says when bfcl-eval is not installed
        raise UserError(f"BFCL needs the optional 'bfcl-eval' package: {bfcl.INSTALL_HINT}")

    monkeypatch.setattr(bfcl, "bfcl_package_dir", absent)
    bfcl_spec = build_sweep_spec(config=_sweep_file(tmp_path, "tiny", {"tool-calling": ["bfcl-multiple"]}))
    with pytest.raises(UserError, match=r"dataset 'bfcl-multiple'.*pip install --no-deps"):
        expand_grid(bfcl_spec)


@pytest.mark.skipif(
    importlib.util.find_spec("bfcl_eval") is None,
    reason='adds a BFCL dataset, which needs the BFCL data: pip install --no-deps "bfcl-eval==2026.3.23"',
)
def test_a_sweep_evaluates_each_cells_policy_and_adding_a_dataset_trains_nothing(
    micro_model_dir, tmp_path, monkeypatch
) -> None:
    monkeypatch.setenv("MRBENCH_RESULTS", str(tmp_path / "results"))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    model = str(micro_model_dir)
    out = io.StringIO()
    console = Console(file=out, width=300)

    run_sweep(
        build_sweep_spec(config=_sweep_file(tmp_path, model, {"tool-calling": ["embedded"]})),
        tracking_uri=uri,
        console=console,
    )
    [cell] = _cell_runs(uri, "extra")
    assert cell.info.status == "FINISHED", out.getvalue()
    metrics = cell.data.metrics
    after = {k: v for k, v in metrics.items() if layout.split_extra_eval_metric(k)}
    before = {k: v for k, v in metrics.items() if layout.split_extra_eval_metric(k, before=True)}
    assert layout.extra_eval_metric("embedded", "exact_match") in after, out.getvalue()
    assert layout.extra_eval_before_metric("embedded", "exact_match") in before
    assert all(math.isfinite(v) for v in after.values())
    client = MlflowClient(tracking_uri=uri)
    history = client.get_metric_history(cell.info.run_id, layout.extra_eval_metric("embedded", "exact_match"))
    assert [p.step for p in history] == [1]  # the trained policy: at the cell's last step
    # The same settings as the cell's own evaluation (embedded, eval_limit 2): the same numbers.
    for key, value in after.items():
        own = metrics.get(layout.eval_metric(key.rpartition("/")[2]))
        assert own is None or own == value or (math.isnan(own) and math.isnan(value))

    # Adding a dataset to the finished sweep: the cell is not trained again, only evaluated.
    spec = build_sweep_spec(
        config=_sweep_file(tmp_path, model, {"tool-calling": ["embedded", "bfcl-simple"]})
    )
    run_sweep(spec, tracking_uri=uri, console=console)
    [again] = _cell_runs(uri, "extra")
    assert again.info.run_id == cell.info.run_id
    assert layout.extra_eval_metric("bfcl-simple", "exact_match") in again.data.metrics, out.getvalue()
    assert (
        again.data.metrics[layout.extra_eval_metric("embedded", "exact_match")]
        == after[layout.extra_eval_metric("embedded", "exact_match")]
    )
    samples = client.list_artifacts(cell.info.run_id, "eval_extra/bfcl-simple")
    assert [a.path for a in samples] == [layout.extra_eval_samples("bfcl-simple")]

    # The report shows them beside the primary metric.
    from mrbench.reporting.build import build_report

    report = build_report("extra", tracking_uri=uri, out=tmp_path / "report", log_to_parent=False)
    text = report.read_text()
    assert "## Extra evaluations" in text and "| bfcl-simple | exact_match ↑ |" in text
    assert "| embedded | exact_match ↑ |" in text


def test_a_cell_without_a_saved_policy_is_skipped_with_its_reason(
    micro_model_dir, tmp_path, monkeypatch
) -> None:
    monkeypatch.setenv("MRBENCH_RESULTS", str(tmp_path / "results"))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri)
    spec = build_sweep_spec(
        config=_sweep_file(tmp_path, str(micro_model_dir), {"tool-calling": ["embedded"]})
    )
    [cell] = expand_grid(spec).cells
    experiment_id = client.create_experiment("extra")
    run = client.create_run(experiment_id, tags={layout.tag(layout.RUN_KEY): cell.key})
    client.set_terminated(run.info.run_id, "FINISHED")
    lines: list[str] = []
    summary = extra_evals.run_extra_evals(
        spec.eval, spec.task_params, [cell.spec], uri, experiment_id, lines.append
    )
    assert summary.evaluated == [] and summary.failed == []
    [(_label, dataset, reason)] = summary.skipped
    assert dataset == "embedded" and "saved no policy" in reason
    tags = client.get_run(run.info.run_id).data.tags
    assert "saved no policy" in tags[layout.extra_eval_skipped_tag("embedded")]
    assert any("skipped" in line for line in lines)
