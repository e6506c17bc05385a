"""Log a lab run to MLflow like a sweep: an experiment per scenario, a parent run per invocation,
a child run per method. Every name comes from :mod:`mrbench.core.layout` (its "lab" section)."""

from __future__ import annotations

import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mrbench.core import layout
from mrbench.core.records import LabMethod, LabRecord
from mrbench.lab.figures import thin
from mrbench.lab.metrics import MethodSummary
from mrbench.lab.presets import KEY_SCORES
from mrbench.lab.simulate import LabResult
from mrbench.lab.summary import OBJECTIVE, normalised_curves

BATCH = 1000  # MLflow's limit on metrics per log_batch call
PARAM_LIMIT = 6000  # MLflow's limit on a param value


@dataclass(frozen=True)
class Logged:
    """Where a lab run went."""

    tracking_uri: str
    experiment: str
    experiment_id: str
    parent_run_id: str
    child_run_ids: dict[str, str]


def _flat(prefix: str, data: Mapping[str, Any]) -> dict[str, str]:
    flat = {}
    for key, value in data.items():
        if isinstance(value, Mapping):
            flat.update(_flat(f"{prefix}{key}.", value))
        else:
            flat[prefix + key] = str(value)[:PARAM_LIMIT]
    return flat


def _finite(values: np.ndarray) -> np.ndarray:
    return np.nan_to_num(values, nan=0.0, posinf=0.0, neginf=0.0)


def _step_metrics(result: LabResult, method: str) -> list[Any]:
    """Per-step metrics of one method (mean over seeds) at the steps the figures draw
    (:func:`mrbench.lab.figures.thin`), as MLflow ``Metric`` objects."""
    from mlflow.entities import Metric

    run = result.runs[method]
    curves = normalised_curves(result)[method]
    weights = np.asarray(result.scenario.weights)
    series: dict[str, np.ndarray] = {}
    for i, comp in enumerate(result.scenario.components):
        series[layout.reward_mean(comp)] = run.components[:, :, i].mean(axis=0)
        series[layout.lab_metric(f"normalised/{comp}")] = np.nanmean(curves[comp], axis=0)
    series[layout.REWARD] = (run.components @ weights).mean(axis=0)
    series[layout.lab_metric(OBJECTIVE)] = np.nanmean(curves[OBJECTIVE], axis=0)
    # Advantage diagnostics exist for steps 1..T (the batch each update used).
    diag = {
        layout.lab_metric("sign_disagree"): run.diagnostics["sign_disagree"],
        layout.lab_metric("resolution"): run.diagnostics["resolution"],
        layout.adv_metric("max_abs"): run.diagnostics["max_abs_adv"],
    }
    now = int(time.time() * 1000)
    metrics = []
    # The steps the figures draw (≤ 60), not all T + 1: MLflow's SQL store costs ~0.1-0.2 ms a
    # metric, and every step of every series was most of the command's logging time.
    steps = thin(run.components.shape[1])  # of 0..T
    for key, values in series.items():
        metrics += [
            Metric(key, float(v), now, int(step))
            for step, v in zip(steps, _finite(values[steps]), strict=True)
        ]
    steps = thin(run.components.shape[1] - 1)  # of the T updates, logged as steps 1..T
    with np.errstate(all="ignore"):
        for key, values in diag.items():
            per_step = _finite(np.nanmean(values[steps], axis=1))
            metrics += [
                Metric(key, float(v), now, int(step) + 1) for step, v in zip(steps, per_step, strict=True)
            ]
    return metrics


def _summary_metrics(summary: MethodSummary, step: int) -> list[Any]:
    from mlflow.entities import Metric

    now = int(time.time() * 1000)
    out = []
    for score, ci in summary.iqm.items():
        for kind, value in (("iqm", ci.point), ("ci_low", ci.low), ("ci_high", ci.high)):
            if np.isfinite(value):
                out.append(Metric(layout.lab_metric(f"{kind}/{score}"), float(value), now, step))
    for score, ci in summary.poi.items():
        if np.isfinite(ci.point):
            out.append(Metric(layout.lab_metric(f"poi/{score}"), float(ci.point), now, step))
    return out


def _log_batches(client: Any, run_id: str, metrics: list[Any]) -> None:
    for start in range(0, len(metrics), BATCH):
        client.log_batch(run_id, metrics=metrics[start : start + BATCH])


def lab_record(result: LabResult, summaries: Mapping[str, MethodSummary]) -> LabRecord:
    """The ``lab.json`` record: scenario, seeds, the scenario's key score (the number that shows
    its phenomenon, :data:`mrbench.lab.presets.KEY_SCORES`), per-seed scores and statistics per method."""
    return LabRecord(
        scenario=result.scenario.to_dict(),
        seeds=list(result.seeds),
        key_score=KEY_SCORES.get(result.scenario.name, OBJECTIVE),
        methods={
            m: LabMethod(
                params=run.params,
                batch_coupled=run.batch_coupled,
                scores={k: [float(x) for x in v] for k, v in run.scores.items()},
                iqm={k: [ci.point, ci.low, ci.high] for k, ci in summaries[m].iqm.items()},
                poi={k: [ci.point, ci.low, ci.high] for k, ci in summaries[m].poi.items()},
            )
            for m, run in result.runs.items()
        },
    )


def log_lab(
    result: LabResult,
    summaries: Mapping[str, MethodSummary],
    *,
    tracking_uri: str,
    command: str,
    report_dir: Path | None = None,
    tags: Mapping[str, str] | None = None,
) -> Logged:
    """Write the parent run (tags, scenario params, ``lab.json``, the report folder) and one child
    run per method (params, per-step and summary metrics) into experiment ``lab-<scenario>``;
    ``tags`` (full MLflow names) are added to the parent's. :func:`open_lab_run` then
    :func:`close_lab_run`."""
    logged = open_lab_run(result, summaries, tracking_uri=tracking_uri, command=command, tags=tags)
    close_lab_run(logged, report_dir)
    return logged


def open_lab_run(
    result: LabResult,
    summaries: Mapping[str, MethodSummary],
    *,
    tracking_uri: str,
    command: str,
    tags: Mapping[str, str] | None = None,
) -> Logged:
    """Everything :func:`log_lab` writes but the report folder; the parent run is left RUNNING for
    :func:`close_lab_run` (the report may still be being drawn), the children end FINISHED."""
    from mlflow.entities import Param

    from mrbench.core.provenance import git_sha
    from mrbench.store.client import ensure_experiment, tracking_client

    scenario = result.scenario
    experiment = layout.lab_experiment(scenario.name)
    client = tracking_client(tracking_uri)
    experiment_id = ensure_experiment(experiment, tracking_uri, client=client)
    parent_tags = {
        layout.tag(layout.ROLE): layout.ROLE_LAB,
        layout.tag(layout.SCENARIO): scenario.name,
        layout.tag(layout.COMMAND): command,
        layout.tag(layout.GIT_SHA): git_sha(),
        layout.tag(layout.HOST): socket.gethostname(),
        layout.tag(layout.SCHEMA): str(layout.SCHEMA_VERSION),
        **(tags or {}),
    }
    parent = client.create_run(experiment_id, tags=parent_tags, run_name=f"lab {scenario.name}").info.run_id
    settings = scenario.to_dict()
    settings.pop("description")
    settings["seeds"] = len(result.seeds)
    params = _flat(layout.LAB_PARAM, settings)
    client.log_batch(parent, params=[Param(k, v) for k, v in params.items()])
    client.log_dict(parent, lab_record(result, summaries).to_json(), layout.LAB_ARTIFACT)
    children = {}
    for method, run in result.runs.items():
        tags = {
            layout.tag(layout.METHOD): method,
            layout.tag(layout.SCENARIO): scenario.name,
            layout.tag(layout.GIT_SHA): parent_tags[layout.tag(layout.GIT_SHA)],
            layout.tag(layout.SCHEMA): str(layout.SCHEMA_VERSION),
            layout.PARENT_RUN_TAG: parent,
        }
        child = client.create_run(experiment_id, tags=tags, run_name=method).info.run_id
        child_params = {layout.PARAM_METHOD: method}
        child_params.update({layout.METHOD_PARAM + k: str(v) for k, v in run.params.items()})
        child_params.update(
            {
                layout.LAB_PARAM + "seeds": str(len(result.seeds)),
                layout.LAB_PARAM + "steps": str(scenario.steps),
                layout.LAB_PARAM + "group_size": str(scenario.group_size),
                layout.LAB_PARAM + "batch_coupled": str(run.batch_coupled),
            }
        )
        client.log_batch(child, params=[Param(k, v) for k, v in child_params.items()])
        _log_batches(
            client, child, _step_metrics(result, method) + _summary_metrics(summaries[method], scenario.steps)
        )
        client.set_terminated(child, "FINISHED")
        children[method] = child
    return Logged(tracking_uri, experiment, experiment_id, parent, children)


def close_lab_run(logged: Logged, report_dir: Path | None) -> None:
    """Log the report folder ``report_dir`` (if any) under the parent run and end it FINISHED."""
    from mrbench.store.client import tracking_client

    client = tracking_client(logged.tracking_uri)
    if report_dir is not None:
        client.log_artifacts(logged.parent_run_id, str(report_dir), artifact_path=layout.REPORT_DIR)
    client.set_terminated(logged.parent_run_id, "FINISHED")


def end_lab_run(logged: Logged, status: str) -> None:
    """End the parent run with ``status`` (KILLED: the command stopped before its report was logged)."""
    from mrbench.store.client import tracking_client

    tracking_client(logged.tracking_uri).set_terminated(logged.parent_run_id, status)
