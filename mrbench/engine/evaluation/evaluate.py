"""Evaluate a model on a task: the one evaluation a cell runs, and ``mrbench eval`` around it.

:func:`~mrbench.engine.evaluation.policy.evaluate_policy` is *the* evaluation of a model: the task's
own ``evaluate`` (lm-eval for the single-turn tasks, the multi-turn episode runner for agent
security) with greedy generation on the first ``limit`` eval samples, under the precision's
autocast (:mod:`mrbench.engine.evaluation.policy`). A cell (:mod:`mrbench.engine.cell.runner`)
calls it before and after training; :func:`run_eval` calls it on any model and logs one MLflow run
(the "evaluation" section of :mod:`mrbench.core.layout`).

What :func:`run_eval` evaluates (an :class:`EvalSpec`):

``model``
    a tiny preset (built and cached on first use), a Hugging Face id, a local model folder (it must
    hold ``config.json`` and weights), or ``run:<run id>``: the checkpoint a cell saved (its run's
    ``checkpoint_dir`` param, in the same tracking store). The evaluation run of a checkpoint is
    tagged ``eval_of`` = that run id, and ``method`` and ``model`` as that run is.
``task`` and its settings
    the task's defaults, then ``task_params``, then the options below. The settings do not come
    from a checkpoint's training run: the evaluation is a function of the options alone, whatever
    the model (pass the cell's own settings as ``task_params`` to repeat its evaluation).
``dataset``
    the task's evaluation data (its class attribute ``eval_datasets``, a
    :class:`~mrbench.core.contracts.DatasetSetting`):

    ===============  ======================================  ==========================================
    task             ``dataset``                             sets
    ===============  ======================================  ==========================================
    tool-calling     embedded, bfcl, bfcl-<category>         ``dataset`` (the first ``n_eval`` items:
                                                             64 unless ``n_eval`` is set)
    code-generation  embedded, humaneval, mbpp, leetcode     ``eval_dataset``: all of HumanEval (164),
                                                             the test split of MBPP (500) or of
                                                             LeetCodeDataset (228; both need the hub
                                                             or its cache), embedded's held-out 42;
                                                             and that dataset's completion budget
    agent-security   embedded, agentdojo                     ``dataset`` (clean utility, utility under
                                                             attack, ASR, joint)
    other tasks      what their factory accepts              ``dataset``
    ===============  ======================================  ==========================================
``samples`` K
    for a task with an ``n_sampled`` setting (code-generation): K completions sampled per problem
    at temperature 1 and the seed, giving the unbiased pass@1 (``sampled_pass_at_1``), pass@4 when
    K >= 4 and pass@K (:func:`~mrbench.engine.evaluation.policy.with_pass_at_k`), beside the greedy
    metrics (``pass_at_1``, …).
    Default 1. Any other task evaluates greedy completions only, and K > 1 is refused.
``seed``
    the task's ``seed`` setting (code-generation: its sampled completions; the procedural data
    sets: which items are drawn) and the global random seed (default: the task's, 0).
``limit``
    evaluate the first ``limit`` eval samples (0 = all).
``precision``
    the ``precision`` train setting the evaluation repeats (``auto``, ``bf16``, ``fp32``; default:
    for ``run:<run id>`` the cell's own ``train.precision``, else ``auto``, the cells' default).
    The model is loaded in float32 and evaluated under the autocast that setting gives, as a cell
    loads and evaluates its policy (:func:`mrbench.engine.models.catalog.mixed_precision`): bfloat16
    autocast under ``bf16``, and under ``auto`` on a GPU that computes in bfloat16.

Errors a user can cause (an unknown run id, a folder without weights, an unknown dataset, a bad
setting, a hub data set that is neither reachable nor cached) raise
:class:`~mrbench.core.errors.UserError` naming the value, before any run is created.
"""

from __future__ import annotations

import math
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mrbench.core import layout
from mrbench.core.contracts import EvalResult, Task
from mrbench.core.errors import UserError
from mrbench.core.provenance import git_sha
from mrbench.engine.config import TrainSettings
from mrbench.engine.evaluation.policy import (
    evaluate_policy,
    load_for_evaluation,
)
from mrbench.engine.models.catalog import Precision, check_model, check_model_folder
from mrbench.engine.runs import console
from mrbench.engine.runs.run_guard import ends_run_on_error
from mrbench.engine.runs.tracking import RunLog
from mrbench.store.client import RetryingClient, check_tracking_reachable, ensure_experiment

RUN_PREFIX = "run:"
"""``--model run:<run id>``: the checkpoint the cell of that run saved."""
SAMPLES_SETTING = "n_sampled"
"""The task setting that ``samples`` sets: completions sampled per problem by the task's evaluation."""
SEED_SETTING = "seed"
BUDGET_SETTING = "max_completion_tokens"
DEFAULT_PRECISION = TrainSettings.precision
"""The cells' default ``precision`` train setting."""


@dataclass(frozen=True)
class EvalSpec:
    """What to evaluate: the options of ``mrbench eval`` (see the module docstring).

    ``samples`` / ``seed`` None: the task's own setting (``--task-param``), else 1 / the task's default.
    """

    model: str
    task: str
    dataset: str | None = None
    limit: int = 0
    samples: int | None = None
    seed: int | None = None
    task_params: Mapping[str, Any] = field(default_factory=dict)
    precision: str | None = None
    """The ``precision`` train setting to evaluate under; None: the cell's (``run:<id>``), else auto."""


@dataclass(frozen=True)
class ModelSource:
    """A model to load: ``path`` for ``from_pretrained`` (a preset name until prepared), ``label``
    for the ``model`` tag, and for a cell's checkpoint the cell's run id, method and precision."""

    path: str
    label: str
    eval_of: str = ""
    method: str = ""
    precision: str = ""


@dataclass(frozen=True)
class EvalReport:
    """What one :func:`run_eval` measured. ``n``: the evaluation's per-sample records (one per sample)."""

    model: str
    task: str
    dataset: str
    n: int
    metrics: dict[str, float]
    run_id: str
    wall_s: float
    primary_metric: str
    eval_of: str = ""

    def to_json(self) -> dict[str, Any]:
        """``{model, task, dataset, n, metrics, run_id, wall_s}``, NaN metrics as ``null``."""
        return {
            "model": self.model,
            "task": self.task,
            "dataset": self.dataset,
            "n": self.n,
            "metrics": {k: (v if math.isfinite(v) else None) for k, v in self.metrics.items()},
            "run_id": self.run_id,
            "wall_s": round(self.wall_s, 3),
        }


# --------------------------------------------------------------------------- the evaluation


# --------------------------------------------------------------------------- settings and model


def _set_once(overrides: dict[str, Any], key: str, value: Any, flag: str) -> None:
    if key in overrides:
        raise UserError(f"{flag} and --task-param {key}={overrides[key]}: give one of them")
    overrides[key] = value


def task_settings(
    spec: EvalSpec, model_settings: Mapping[str, Any] | None = None
) -> tuple[str, dict[str, Any], str]:
    """``(task name, every setting of the task resolved, dataset name)`` for ``spec``.

    ``model_settings``: the task settings the model was built for
    (:func:`mrbench.engine.models.catalog.model_task_settings`), under ``spec``'s own; those the task
    does not have are left out. :class:`UserError` for an unknown task, setting or dataset (listing
    the choices), a setting given twice, or ``samples`` > 1 for a task that does not sample.
    """
    from mrbench.tasks import get_task_entry, task_class

    entry = get_task_entry(spec.task)
    defaults = entry.params
    overrides = dict(spec.task_params)
    target = task_class(entry.name).eval_datasets
    if spec.dataset is not None:
        if target.setting not in defaults:
            raise UserError(f"--dataset {spec.dataset!r}: task {entry.name!r} has no dataset setting")
        if target.choices and spec.dataset not in target.choices:
            shown = ", ".join(target.choices)
            raise UserError(f"unknown dataset {spec.dataset!r} for task {entry.name!r}; choose from {shown}")
        _set_once(overrides, target.setting, spec.dataset, "--dataset")
        if spec.dataset in target.budgets and BUDGET_SETTING not in overrides:
            overrides[BUDGET_SETTING] = target.budgets[spec.dataset]
    if spec.seed is not None:
        if isinstance(spec.seed, bool) or spec.seed < 0:
            raise UserError(f"--seed must be a non-negative integer, got {spec.seed!r}")
        if SEED_SETTING in defaults:
            _set_once(overrides, SEED_SETTING, spec.seed, "--seed")
    if spec.samples is not None and spec.samples < 1:
        raise UserError(f"--samples must be >= 1, got {spec.samples}")
    if SAMPLES_SETTING in defaults:
        if spec.samples is not None:
            _set_once(overrides, SAMPLES_SETTING, spec.samples, "--samples")
        overrides.setdefault(SAMPLES_SETTING, 1)
    elif (spec.samples or 1) > 1:
        raise UserError(
            f"--samples {spec.samples}: task {entry.name!r} evaluates one greedy completion per sample; "
            f"sampled completions and pass@k apply to tasks with an {SAMPLES_SETTING!r} setting "
            "(code-generation)"
        )
    for key, value in (model_settings or {}).items():
        if key in defaults:
            overrides.setdefault(key, value)
    resolved = entry.resolve_params(overrides)
    # code-generation's eval_dataset "" means its training dataset: name the data actually evaluated.
    dataset = resolved.get(target.setting) or resolved.get("dataset") or ""
    return entry.name, resolved, str(dataset)


def resolve_model(name: str, client: RetryingClient) -> ModelSource:
    """Where ``name`` (preset, hub id, folder or ``run:<id>``) loads from; :class:`UserError` if it cannot."""
    if name.startswith(RUN_PREFIX):
        return _checkpoint_of(name, client)
    check_model(name)
    return ModelSource(path=name, label=name)


def _checkpoint_of(value: str, client: RetryingClient) -> ModelSource:
    """The checkpoint of the cell run named by ``value`` (``run:<id>``) in ``client``'s store."""
    from mlflow.exceptions import MlflowException

    run_id = value.removeprefix(RUN_PREFIX).strip()
    if not run_id:
        raise UserError(f"--model {value!r}: expected run:<run id> (an MLflow run id of a trained cell)")
    try:
        run = client.get_run(run_id)
    except MlflowException:
        raise UserError(
            f"--model {value!r}: no run {run_id!r} in the tracking store {client.tracking_uri} "
            "(pass the store the cell ran in with --tracking-uri)"
        ) from None
    folder = run.data.params.get(layout.PARAM_CHECKPOINT_DIR)
    if not folder:
        raise UserError(
            f"--model {value!r}: run {run_id} has no saved checkpoint (no {layout.PARAM_CHECKPOINT_DIR} "
            "param: it is not a cell, it ran with --save none, or it did not finish training)"
        )
    check_model_folder(Path(folder), value)
    tags = run.data.tags
    return ModelSource(
        path=folder,
        label=layout.read_tag(tags, layout.MODEL) or value,
        eval_of=run_id,
        method=layout.read_tag(tags, layout.METHOD),
        precision=run.data.params.get(layout.PARAM_TRAIN_PRECISION, ""),
    )


# --------------------------------------------------------------------------- mrbench eval


def run_eval(
    spec: EvalSpec,
    *,
    tracking_uri: str,
    experiment: str = layout.EVAL_EXPERIMENT,
    tracking_retry_s: float | None = None,
) -> EvalReport:
    """Evaluate ``spec.model`` on ``spec.task`` through
    :func:`~mrbench.engine.evaluation.policy.evaluate_policy` and log one MLflow run.

    Everything a user can get wrong is checked before the run is created (module docstring). The
    run ends FINISHED once its metrics and the ``eval/samples.jsonl`` artifact are logged, KILLED
    on Ctrl-C, FAILED on any other error (its ``error`` tag says which).
    """
    from mrbench.engine.models.catalog import model_task_settings
    from mrbench.tasks import build_task

    started = time.perf_counter()
    client, source = _check_before_any_run(spec, tracking_uri, tracking_retry_s)
    task_name, settings, dataset = task_settings(spec, model_task_settings(source.path))
    task = build_task(task_name, settings)
    try:
        check_eval_data(task, dataset)
        precision = Precision.of(spec.precision or source.precision or DEFAULT_PRECISION)
        seed = spec.seed if spec.seed is not None else settings.get(SEED_SETTING, 0)
        loaded = load_for_evaluation(source.path, seed if isinstance(seed, int) else 0)
        run_id = _start_run(client, experiment, task_name, task, source, dataset)
        console.attach_command_log(client, run_id)  # `mrbench eval`'s log goes to its run at the end
        n_sampled = int(settings.get(SAMPLES_SETTING, 1))
        params = layout.eval_params(
            task=task_name,
            task_params=settings,
            model=spec.model,
            model_path=loaded.path,
            seed=seed,
            dataset=dataset,
            limit=spec.limit,
            samples=n_sampled,
            precision=precision.setting,
        )
        with tempfile.TemporaryDirectory(prefix="mrbench-eval-") as spool:
            run_log = RunLog(client, run_id, Path(spool))
            with ends_run_on_error(client, run_id):
                run_log.params(params)
                t0 = time.perf_counter()
                result = evaluate_policy(
                    task, loaded.model, loaded.tokenizer, spec.limit, precision, n_sampled=n_sampled
                )
                metrics, eval_s = result.metrics, time.perf_counter() - t0
                wall_s = time.perf_counter() - started
                _log_and_finish(run_log, result, metrics, wall_s, eval_s, loaded.prepare_s + loaded.load_s)
    finally:
        task.close()
    return EvalReport(
        model=spec.model,
        task=task_name,
        dataset=dataset,
        n=len(result.samples),
        metrics=metrics,
        run_id=run_id,
        wall_s=wall_s,
        primary_metric=task.primary_metric,
        eval_of=source.eval_of,
    )


def _check_before_any_run(
    spec: EvalSpec, tracking_uri: str, tracking_retry_s: float | None
) -> tuple[RetryingClient, ModelSource]:
    """The store's client and the model's source, once what needs no model is checked (the limit,
    the task and its settings, the store, the model's name): :class:`UserError` before any run exists."""
    from mrbench.engine.models.catalog import mixed_precision

    if isinstance(spec.limit, bool) or spec.limit < 0:
        raise UserError(f"--limit must be >= 0 (0 = every eval sample), got {spec.limit!r}")
    if spec.precision is not None:
        mixed_precision(spec.precision)  # an unknown precision: UserError naming the choices
    task_settings(spec)  # a bad task, setting or dataset fails before the store is touched
    check_tracking_reachable(tracking_uri)
    client = RetryingClient(tracking_uri, tracking_retry_s)
    return client, resolve_model(spec.model, client)


def _log_and_finish(
    run_log: RunLog,
    result: EvalResult,
    metrics: Mapping[str, float],
    wall_s: float,
    eval_s: float,
    prepare_s: float,
) -> None:
    """Log ``eval/<m>`` and the ``perf/...`` timings at step 0 and the samples, then end the run FINISHED."""
    perf = {layout.PERF_WALL_S: wall_s, layout.PERF_EVAL_S: eval_s, layout.PERF_MODEL_PREPARE_S: prepare_s}
    run_log.metrics({layout.eval_metric(k): v for k, v in metrics.items()} | perf, 0)
    run_log.json_artifact(result.samples, layout.EVAL_SAMPLES)
    run_log.flush()  # past the retry bound: TrackingUnavailable, a one-line error
    run_log.client.set_terminated(run_log.run_id, "FINISHED")


def _start_run(
    client: RetryingClient, experiment: str, task_name: str, task: Task, source: ModelSource, dataset: str
) -> str:
    """Create the evaluation's run with its tags (:func:`~mrbench.core.layout.eval_tags`); its id."""
    experiment_id = ensure_experiment(experiment, client.tracking_uri, client=client)
    tags = layout.eval_tags(
        task=task_name,
        task_version=task.version,
        model=source.label,
        git_sha=git_sha(),
        primary_metric=task.primary_metric,
        lower_is_better=task.lower_is_better,
        method=source.method,
        eval_of=source.eval_of,
    )
    run_name = f"eval|{task_name}|{dataset or '-'}|{source.label}"
    return client.create_run(experiment_id, tags=tags, run_name=run_name).info.run_id


def check_eval_data(task: Task, dataset: str) -> None:
    """Load the eval samples before any run exists: data that cannot be loaded here (a hub data set
    neither reachable nor cached, a missing optional package) is a :class:`UserError` saying so, not
    a failed run. (A task's own :class:`UserError`, e.g. BFCL's install line, passes unchanged.)"""
    try:
        task.eval_samples()  # the built-in tasks keep what they loaded, so this costs nothing later
    except UserError:
        raise
    except (RuntimeError, OSError, ImportError) as exc:  # what loaders raise when the data is unavailable
        raise UserError(f"task {task.name!r} cannot load its eval data {dataset!r}: {exc}") from None


# --------------------------------------------------------------------------- lm-eval export


def export_lm_eval(spec: EvalSpec, directory: Path) -> Path:
    """Write the evaluation ``spec`` describes (its task, settings, dataset and first ``limit``
    samples, with the prompts ``spec.model`` was built for) as an lm-eval task folder; returns the
    YAML. ``lm_eval --include_path DIRECTORY`` then runs the same greedy evaluation as
    ``mrbench eval`` (the single-turn tasks; :class:`UserError` for a task lm-eval cannot run)."""
    from mrbench.engine.models.catalog import model_task_settings
    from mrbench.tasks import build_task

    if isinstance(spec.limit, bool) or spec.limit < 0:
        raise UserError(f"--limit must be >= 0 (0 = every eval sample), got {spec.limit!r}")
    task_name, settings, dataset = task_settings(
        spec, model_task_settings(spec.model) if spec.model else None
    )
    task = build_task(task_name, settings)
    try:
        export = getattr(task, "export_lm_eval", None)
        if export is None:
            raise UserError(
                f"task {task_name!r} has no lm-eval export (its episodes are multi-turn: lm-eval runs "
                "single-turn generation tasks); evaluate it with `mrbench eval`"
            )
        check_eval_data(task, dataset)
        samples = task.eval_samples()
        return Path(export(directory, samples[: spec.limit] if spec.limit else samples))
    finally:
        task.close()
