"""Run one cell (method × task × model × seed): evaluate, train with GRPO, evaluate again, log to MLflow.

Each cell is one MLflow run (a child of the sweep's parent run when there is one). The run is
ended FINISHED only after everything is logged; Ctrl-C ends it KILLED and any other error
FAILED, so a resumed sweep knows exactly which cells to redo.
"""

from __future__ import annotations

import dataclasses
import json
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

from mrbench.core import layout
from mrbench.core.contracts import EvalResult, Sample, Task
from mrbench.engine.config import RunSpec
from mrbench.engine.tracking import ensure_experiment, git_sha, log_json_artifact


@dataclass
class CellResult:
    """What a finished cell reports back to the CLI or a sweep."""

    run_id: str
    run_key: str
    status: str
    metrics_before: dict[str, float] = field(default_factory=dict)
    metrics_after: dict[str, float] = field(default_factory=dict)
    wall_s: float = 0.0
    primary_metric: str = ""


def cell_tags(spec: RunSpec, task: Task, sweep: str | None) -> dict[str, str]:
    """The ``mrbench.*`` tags every cell run carries (what reports and resume search on)."""
    return layout.cell_tags(
        method=spec.method,
        task=spec.task,
        task_version=task.version,
        model=spec.model,
        seed=spec.seed,
        run_key=spec.run_key(),
        git_sha=git_sha(),
        sweep=sweep,
        primary_metric=task.primary_metric,
        lower_is_better=task.lower_is_better,
        reward_components=[c.name for c in task.reward_components()],
    )


def cell_params(spec: RunSpec) -> dict[str, str]:
    """The MLflow params of a cell: names, hyper-parameters, task settings and training settings."""
    return layout.cell_params(
        method=spec.method,
        task=spec.task,
        model=spec.model,
        seed=spec.seed,
        method_params=spec.method_params,
        task_params=spec.task_params,
        train=dataclasses.asdict(spec.train),
    )


class MlflowStepLogger:
    """A ``TrainerCallback``: forwards TRL's per-step logs to the cell's MLflow run.

    Names follow :func:`mrbench.core.layout.step_metric`: ``rewards/<component>/...``, ``adv/...``
    and the weighted total ``reward`` keep theirs; every other number becomes ``train/<key>``.
    """

    def __init__(self, client: Any, run_id: str) -> None:
        from transformers import TrainerCallback

        self.client = client
        self.run_id = run_id
        # Subclass at runtime so that importing this module does not import transformers.
        parent = self

        class _Callback(TrainerCallback):
            def on_log(self, args, state, control, logs=None, **kwargs):
                parent.log(logs or {}, state.global_step)

        self.callback = _Callback()

    def log(self, logs: dict[str, Any], step: int) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        metrics = [
            Metric(layout.step_metric(k), float(v), now, step)
            for k, v in logs.items()
            if isinstance(v, int | float) and not isinstance(v, bool) and v == v  # skip NaN
        ]
        if metrics:
            self.client.log_batch(self.run_id, metrics=metrics)


def _build_dataset(samples: list[Sample]) -> Any:
    """One dataset row per sample: ``prompt``, ``sample_id`` and the sample's columns."""
    from datasets import Dataset

    rows = [{"prompt": s.prompt, "sample_id": s.id, **s.columns} for s in samples]
    return Dataset.from_list(rows)


def _grpo_config(spec: RunSpec, task: Task, output_dir: str, progress: bool) -> Any:
    import torch
    from trl import GRPOConfig

    train = spec.train
    on_gpu = torch.cuda.is_available()
    return GRPOConfig(
        output_dir=output_dir,
        max_steps=train.steps,
        per_device_train_batch_size=train.prompts_per_step * train.num_generations,
        gradient_accumulation_steps=train.gradient_accumulation_steps,
        num_generations=train.num_generations,
        learning_rate=train.learning_rate,
        # Short runs: a decaying schedule would spend half the steps at a low rate.
        lr_scheduler_type="constant",
        beta=train.beta,
        temperature=train.temperature,
        max_completion_length=train.max_completion_length or task.max_completion_tokens,
        reward_weights=[c.weight for c in task.reward_components()],
        logging_steps=1,
        report_to=[],
        save_strategy="no",
        seed=spec.seed,
        use_cpu=not on_gpu,
        bf16=train.bf16 and on_gpu,
        gradient_checkpointing=False,
        disable_tqdm=not progress,
        dataloader_num_workers=0,
        remove_unused_columns=False,
        log_completions=False,
    )


def evaluate_model(task: Task, model: Any, tokenizer: Any, limit: int) -> EvalResult:
    """The task's own evaluation of ``model`` with greedy decoding (first ``limit`` eval samples, 0 = all)."""
    from mrbench.engine.generation import HFGenerator

    samples = task.eval_samples()
    if limit:
        samples = samples[:limit]
    return task.evaluate(HFGenerator(model, tokenizer), samples)


def run_cell(
    spec: RunSpec,
    *,
    tracking_uri: str,
    experiment: str,
    parent_run_id: str | None = None,
    sweep: str | None = None,
    progress: bool = True,
) -> CellResult:
    """Evaluate → train → evaluate one cell, logging everything to a new MLflow run.

    The task is built here and closed (:meth:`~mrbench.core.contracts.Task.close`) when the cell
    ends, however it ends.
    """
    from mrbench.tasks import build_task

    started = time.perf_counter()
    task = build_task(spec.task, spec.task_params)
    try:
        return _run_cell(
            spec,
            task,
            started=started,
            tracking_uri=tracking_uri,
            experiment=experiment,
            parent_run_id=parent_run_id,
            sweep=sweep,
            progress=progress,
        )
    finally:
        task.close()


def _run_cell(
    spec: RunSpec,
    task: Task,
    *,
    started: float,
    tracking_uri: str,
    experiment: str,
    parent_run_id: str | None,
    sweep: str | None,
    progress: bool,
) -> CellResult:
    from mlflow.entities import Metric, Param
    from mlflow.tracking import MlflowClient

    import mrbench.methods as methods
    from mrbench.engine.models import load_model, load_tokenizer, prepare_model
    from mrbench.engine.trainer import MultiRewardGRPOTrainer

    client = MlflowClient(tracking_uri=tracking_uri)
    experiment_id = ensure_experiment(experiment, tracking_uri)
    tags = cell_tags(spec, task, sweep)
    if parent_run_id:
        tags[layout.PARENT_RUN_TAG] = parent_run_id
    run = client.create_run(experiment_id, tags=tags, run_name=spec.label())
    run_id = run.info.run_id
    try:
        client.log_batch(run_id, params=[Param(k, v[:6000]) for k, v in cell_params(spec).items()])
        config = {**spec.to_dict(), "run_key": spec.run_key()}
        log_json_artifact(client, run_id, config, layout.CONFIG_ARTIFACT)

        t0 = time.perf_counter()
        model_path = prepare_model(spec.model)
        prepare_s = time.perf_counter() - t0
        import torch
        from transformers import set_seed

        set_seed(spec.seed)
        tokenizer = load_tokenizer(model_path)
        model = load_model(model_path)
        if torch.cuda.is_available():
            model = model.to("cuda")

        t0 = time.perf_counter()
        before = evaluate_model(task, model, tokenizer, spec.train.eval_limit)
        eval_s = time.perf_counter() - t0
        now = int(time.time() * 1000)
        client.log_batch(
            run_id,
            metrics=[
                Metric(layout.eval_before_metric(k), float(v), now, 0) for k, v in before.metrics.items()
            ]
            + [Metric(layout.eval_metric(k), float(v), now, 0) for k, v in before.metrics.items()],
        )
        log_json_artifact(client, run_id, before.samples, layout.EVAL_SAMPLES_BEFORE)

        step_logger = MlflowStepLogger(client, run_id)
        hooks = task.training_hooks()
        with tempfile.TemporaryDirectory(prefix="mrbench-trl-") as out_dir:
            trainer = MultiRewardGRPOTrainer(
                # With a KL term TRL builds the reference model from a path; otherwise reuse the loaded one.
                model=model_path if spec.train.beta > 0 else model,
                reward_funcs=[c.fn for c in task.reward_components()],
                args=_grpo_config(spec, task, out_dir, progress),
                train_dataset=_build_dataset(task.train_samples()),
                processing_class=tokenizer,
                callbacks=[step_logger.callback],
                method_fn=methods.get_method(spec.method).obj,
                method_params=spec.method_params,
                **hooks,
            )
            t0 = time.perf_counter()
            trainer.train()
            train_s = time.perf_counter() - t0

        t0 = time.perf_counter()
        after = evaluate_model(task, trainer.model, tokenizer, spec.train.eval_limit)
        eval_s += time.perf_counter() - t0
        now = int(time.time() * 1000)
        wall_s = time.perf_counter() - started
        perf = {
            layout.PERF_WALL_S: wall_s,
            layout.PERF_TRAIN_S: train_s,
            layout.PERF_EVAL_S: eval_s,
            layout.PERF_MODEL_PREPARE_S: prepare_s,
        }
        client.log_batch(
            run_id,
            metrics=[
                Metric(layout.eval_metric(k), float(v), now, spec.train.steps)
                for k, v in after.metrics.items()
            ]
            + [Metric(k, float(v), now, spec.train.steps) for k, v in perf.items()],
        )
        log_json_artifact(client, run_id, after.samples, layout.EVAL_SAMPLES_AFTER)
        components = [c.name for c in task.reward_components()]
        diagnostics = trainer.diag_accumulator.summary(components)
        log_json_artifact(client, run_id, diagnostics, layout.DIAGNOSTICS_ARTIFACT)
        log_json_artifact(client, run_id, trainer.completion_log(), layout.COMPLETIONS_ARTIFACT)
        client.set_terminated(run_id, "FINISHED")
    except KeyboardInterrupt:
        client.set_terminated(run_id, "KILLED")
        raise
    except BaseException as exc:
        try:
            client.set_tag(run_id, layout.tag(layout.ERROR), f"{type(exc).__name__}: {exc}"[:4000])
        finally:
            client.set_terminated(run_id, "FAILED")
        raise
    return CellResult(
        run_id=run_id,
        run_key=spec.run_key(),
        status="FINISHED",
        metrics_before=dict(before.metrics),
        metrics_after=dict(after.metrics),
        wall_s=wall_s,
        primary_metric=task.primary_metric,
    )


def dump_result(result: CellResult) -> str:
    """JSON of a :class:`CellResult` (for worker processes)."""
    return json.dumps(result.__dict__)
