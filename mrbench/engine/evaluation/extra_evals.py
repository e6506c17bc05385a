"""Extra evaluations of a sweep's trained cells: the datasets a sweep file's ``eval`` key names.

::

    eval:
      code-generation: [humaneval]
      tool-calling: [bfcl-simple, bfcl-multiple]

Once a sweep's cells have run (and again on every later invocation of the same sweep), each
FINISHED cell of a task with extra datasets has its *saved policy* (``checkpoint_dir``, see
:mod:`mrbench.engine.cell.checkpoints`) evaluated on each of them that its run has no metrics for yet,
through the code of ``mrbench eval`` (:mod:`mrbench.engine.evaluation.evaluate`: the same settings; model
loading and evaluation through :mod:`mrbench.engine.evaluation.policy`). The metrics go into the cell's own
run (:mod:`mrbench.core.layout`, "extra evaluations"):

- ``eval_extra/<dataset>/<metric>`` at the cell's last step: the trained policy;
- ``eval_extra_before/<dataset>/<metric>`` at step 0: the model before training. It is the same
  for every method and seed of a (model, task settings, dataset), so it is computed once per
  invocation and kept in :mod:`mrbench.engine.evaluation.eval_cache` for later ones.

The eval list is not part of a cell's run key: adding a dataset to a finished sweep and running
it again evaluates the saved policies without training anything, and removing one leaves the
metrics already logged in place.

Settings of an extra evaluation: what ``mrbench eval --dataset <dataset>`` with the sweep's
``task_params`` for the task would use (its dataset setting replaced; the dataset's own completion
budget unless ``task_params`` sets ``max_completion_tokens``), and the cell's own ``eval_limit``
(0 = every eval sample of the dataset).

A dataset name the task does not know, a bad setting, or data that cannot be loaded here (BFCL
without ``bfcl-eval``, a hub data set offline and not cached) is a
:class:`~mrbench.core.errors.UserError` when the sweep is resolved, before any cell trains
(:func:`check_extra_evals`). A cell without a saved policy (``save none``, a deleted folder) is
skipped with its reason printed and set as the tag ``eval_extra_skipped.<dataset>``; any other
failure is printed, fails neither the cell nor the sweep, and the next invocation tries again.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mrbench.core import layout
from mrbench.core.contracts import EvalResult, Task
from mrbench.core.errors import UserError
from mrbench.engine.evaluation import eval_cache
from mrbench.engine.evaluation.evaluate import (
    SAMPLES_SETTING,
    EvalSpec,
    check_eval_data,
    task_settings,
)
from mrbench.engine.evaluation.policy import cached_evaluation, evaluate_policy, load_policy
from mrbench.engine.models.catalog import Precision, check_model_folder
from mrbench.engine.processes.allocator import keep_freed_blocks
from mrbench.engine.processes.threads import use_threads_for
from mrbench.engine.runs.tracking import RunLog
from mrbench.store.client import RetryingClient
from mrbench.store.runs import iter_runs, runs_filter

Say = Callable[[str], None]


@dataclass
class ExtraEvalSummary:
    """What one :func:`run_extra_evals` did: ``(cell label, dataset)`` pairs evaluated, skipped
    (with the reason) and failed (with the error)."""

    evaluated: list[tuple[str, str]] = field(default_factory=list)
    skipped: list[tuple[str, str, str]] = field(default_factory=list)
    failed: list[tuple[str, str, str]] = field(default_factory=list)


def extra_eval_spec(task: str, dataset: str, task_params: Mapping[str, Any]) -> EvalSpec:
    """The ``mrbench eval`` options of one extra evaluation: ``task_params`` (the sweep's, for
    ``task``) without the dataset setting, which ``dataset`` sets (and with it the dataset's own
    completion budget, unless ``task_params`` gives one)."""
    from mrbench.tasks import task_class

    setting = task_class(task).eval_datasets.setting
    params = {k: v for k, v in task_params.items() if k != setting}
    return EvalSpec(model="", task=task, dataset=dataset, task_params=params)


def check_extra_evals(
    evals: Mapping[str, Sequence[str]], task_params: Mapping[str, Mapping[str, Any]]
) -> None:
    """:class:`UserError` naming the task and dataset unless every extra evaluation resolves (known
    dataset, valid settings) and its data loads here; each task is built and closed again."""
    from mrbench.tasks import build_task

    for task_name, datasets in evals.items():
        for dataset in datasets:
            where = f"sweep setting 'eval.{task_name}', dataset {dataset!r}"
            try:
                name, settings, label = task_settings(
                    extra_eval_spec(task_name, dataset, task_params.get(task_name, {}))
                )
                task = build_task(name, settings)
                try:
                    check_eval_data(task, label)
                finally:
                    task.close()
            except UserError as exc:
                raise UserError(f"{where}: {exc}") from None


# --------------------------------------------------------------------------- the sweep's phase


@dataclass
class _Target:
    """One FINISHED cell run with the extra datasets it has no metrics for yet."""

    run_id: str
    label: str
    spec: Any  # mrbench.engine.config.RunSpec
    checkpoint: str
    missing: list[str]


def _has(run: Any, dataset: str) -> bool:
    """True when ``run`` logged metrics of the trained policy on ``dataset``."""
    for key in run.data.metrics:
        split = layout.split_extra_eval_metric(key)
        if split is not None and split[0] == dataset:
            return True
    return False


def _targets(
    client: RetryingClient, experiment_id: str, cells: Sequence[Any], evals: Mapping[str, Sequence[str]]
) -> list[_Target]:
    """The latest FINISHED run of each cell whose task has extra datasets it lacks, in grid order."""
    wanted = {c.run_key(): c for c in cells if evals.get(c.task)}
    if not wanted:
        return []
    latest: dict[str, Any] = {}
    for run in iter_runs(client, experiment_id, runs_filter(status="FINISHED")):  # every page
        key = layout.read_tag(run.data.tags, layout.RUN_KEY)
        if key in wanted and (key not in latest or run.info.start_time > latest[key].info.start_time):
            latest[key] = run
    targets = []
    for key, spec in wanted.items():
        run = latest.get(key)
        if run is None:
            continue  # the cell did not finish: its failure is reported with the cells
        missing = [d for d in evals[spec.task] if not _has(run, d)]
        if missing:
            checkpoint = run.data.params.get(layout.PARAM_CHECKPOINT_DIR, "")
            label = layout.cell_label(spec.method, spec.task, spec.model, spec.seed)
            targets.append(_Target(run.info.run_id, label, spec, checkpoint, missing))
    return targets


class _Evaluator:
    """Tasks built once per (task, dataset, settings) and pre-training results computed once per
    (model, task, dataset, settings, limit); :meth:`close` stops the tasks."""

    def __init__(self, task_params: Mapping[str, Mapping[str, Any]]) -> None:
        self.task_params = task_params
        self.tasks: dict[tuple[str, str, str], tuple[Task, dict[str, Any], int]] = {}
        self.before: dict[str, EvalResult] = {}

    def task(self, task_name: str, dataset: str, model: str) -> tuple[Task, dict[str, Any], int]:
        """The built task of an extra dataset for cells of ``model`` (the task settings it was built
        for, :func:`~mrbench.engine.models.catalog.model_task_settings`), its resolved settings and
        ``n_sampled`` (pass@k)."""
        from mrbench.engine.models.catalog import model_task_settings
        from mrbench.tasks import build_task

        if (task_name, dataset, model) not in self.tasks:
            spec = extra_eval_spec(task_name, dataset, self.task_params.get(task_name, {}))
            name, settings, _ = task_settings(spec, model_task_settings(model))
            task = build_task(name, settings)
            self.tasks[(task_name, dataset, model)] = (task, settings, int(settings.get(SAMPLES_SETTING, 1)))
        return self.tasks[(task_name, dataset, model)]

    def evaluate(self, model: Any, tokenizer: Any, spec: Any, dataset: str) -> EvalResult:
        """``model`` (a policy of cell ``spec``) on ``dataset`` of the cell's task, at its eval limit,
        under the cell's precision (as the cell's own evaluations)."""
        task, _, n_sampled = self.task(spec.task, dataset, spec.model)
        precision = Precision.of(spec.train.precision)
        return evaluate_policy(task, model, tokenizer, spec.train.eval_limit, precision, n_sampled=n_sampled)

    def evaluate_before(self, spec: Any, datasets: list[str], run_id: str) -> dict[str, EvalResult]:
        """The base model's results on ``datasets`` (``spec``'s model, task and eval limit): each
        read from the evaluation cache, or computed under its lock (the base model loaded once, on
        the first dataset the cache lacks) and stored there as computed by run ``run_id``."""
        from mrbench.engine.models.catalog import prepare_model

        use_threads_for(spec.model)
        keep_freed_blocks()  # on the CPU: big blocks reused, not mapped anew (engine.processes.allocator)
        path = prepare_model(spec.model)
        limit, mixed = spec.train.eval_limit, Precision.of(spec.train.precision).mixed
        loaded: list[tuple[Any, Any]] = []  # the base model, once a dataset needs it

        def base_model() -> tuple[Any, Any]:
            if not loaded:
                loaded.append(load_policy(path, dtype="float32"))  # as the cell evaluated it
            return loaded[0]

        out = {}
        for dataset in datasets:
            task, settings, _ = self.task(spec.task, dataset, spec.model)
            memo = json.dumps([spec.model, spec.task, dataset, limit, settings], sort_keys=True, default=str)
            if memo not in self.before:
                key = eval_cache.cache_key(
                    path, spec.task, task.version, settings, limit, mixed_precision=mixed
                )

                def compute(d: str = dataset) -> EvalResult:
                    return self.evaluate(*base_model(), spec, d)

                self.before[memo], _ = cached_evaluation(key, compute, run_id)
            out[dataset] = self.before[memo]
        loaded.clear()
        return out

    def close(self) -> None:
        for task, _, _ in self.tasks.values():
            task.close()


def run_extra_evals(
    evals: Mapping[str, Sequence[str]],
    task_params: Mapping[str, Mapping[str, Any]],
    cells: Sequence[Any],
    tracking_uri: str,
    experiment_id: str,
    say: Say = print,
) -> ExtraEvalSummary:
    """Evaluate the saved policy of every FINISHED cell of ``cells`` (RunSpecs, in grid order) on
    the extra datasets of its task (``evals``) that its run has no metrics for yet, logging into
    that run (module docstring). ``task_params``: the sweep's own, per task. Ctrl-C propagates;
    what was logged so far stays, and the next invocation evaluates the rest."""
    summary = ExtraEvalSummary()
    client = RetryingClient(tracking_uri)
    targets = _targets(client, experiment_id, cells, evals)
    if not targets:
        return summary
    n = sum(len(t.missing) for t in targets)
    say(f"extra evaluations: {n} (cell, dataset) pair(s) on {len(targets)} cell(s)")
    evaluator = _Evaluator(task_params)
    try:
        for target in targets:
            _evaluate_target(target, evaluator, client, summary, say)
    finally:
        evaluator.close()
    return summary


def _evaluate_target(
    target: _Target, evaluator: _Evaluator, client: RetryingClient, summary: ExtraEvalSummary, say: Say
) -> None:
    """Evaluate one cell's policy on its missing datasets and log them; failures are recorded."""
    try:
        if not target.checkpoint:
            raise UserError(f"run {target.run_id} saved no policy (save none, or it ran before checkpoints)")
        check_model_folder(Path(target.checkpoint), target.checkpoint)
    except UserError as exc:
        reason = str(exc)
        for dataset in target.missing:
            summary.skipped.append((target.label, dataset, reason))
        client.log_batch(target.run_id, tags=_skipped_tags(target.missing, reason))
        say(f"extra evaluation of {target.label} skipped: {reason}")
        return
    spec = target.spec
    try:
        before = evaluator.evaluate_before(spec, target.missing, target.run_id)
        model, tokenizer = load_policy(target.checkpoint, dtype="float32")
        with tempfile.TemporaryDirectory(prefix="mrbench-extra-eval-") as spool:
            run_log = RunLog(client, target.run_id, Path(spool))
            for dataset in target.missing:
                after = evaluator.evaluate(model, tokenizer, spec, dataset)
                run_log.metrics(
                    {
                        layout.extra_eval_before_metric(dataset, k): v
                        for k, v in before[dataset].metrics.items()
                    },
                    0,
                )
                run_log.json_artifact(after.samples, layout.extra_eval_samples(dataset))
                # The after metrics last: a run that has them has everything (see _has).
                run_log.metrics(
                    {layout.extra_eval_metric(dataset, k): v for k, v in after.metrics.items()},
                    spec.train.steps,
                )
                run_log.flush()
                summary.evaluated.append((target.label, dataset))
                primary = after.metrics.get(evaluator.task(spec.task, dataset, spec.model)[0].primary_metric)
                shown = f"{primary:.3f}" if isinstance(primary, float) else "-"
                say(f"  {target.label} on {dataset}: {shown}")
    except KeyboardInterrupt:
        raise
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"[:500]
        done = {d for label, d in summary.evaluated if label == target.label}
        for dataset in target.missing:
            if dataset not in done:
                summary.failed.append((target.label, dataset, error))
        say(f"extra evaluation of {target.label} failed: {error} (the next invocation of the sweep retries)")


def _skipped_tags(datasets: list[str], reason: str) -> list[Any]:
    from mlflow.entities import RunTag

    return [RunTag(layout.extra_eval_skipped_tag(d), reason[:5000]) for d in datasets]
