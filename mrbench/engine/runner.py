"""Run one cell (method × task × model × seed): evaluate, train with GRPO, evaluate again, log to MLflow.

Each cell is one MLflow run (a child of the sweep's parent run when there is one). The run is
ended FINISHED only after everything is logged; Ctrl-C ends it KILLED and any other error
FAILED, so a resumed sweep knows exactly which cells to redo.
"""

from __future__ import annotations

import json
import logging
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

from mrbench.engine.config import RunSpec
from mrbench.engine.tracking import TAG_PREFIX, ensure_experiment, git_sha, log_json_artifact

log = logging.getLogger(__name__)


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


def cell_tags(spec: RunSpec, task: Any, sweep: str | None) -> dict[str, str]:
    """The ``mrbench.*`` tags every cell run carries (what reports and resume search on)."""
    components = [c.name for c in task.reward_components()]
    return {
        f"{TAG_PREFIX}method": spec.method,
        f"{TAG_PREFIX}task": spec.task,
        f"{TAG_PREFIX}task_version": str(task.version),
        f"{TAG_PREFIX}model": spec.model,
        f"{TAG_PREFIX}seed": str(spec.seed),
        f"{TAG_PREFIX}run_key": spec.run_key(),
        f"{TAG_PREFIX}git_sha": git_sha(),
        f"{TAG_PREFIX}sweep": sweep or "",
        f"{TAG_PREFIX}primary_metric": task.primary_metric,
        f"{TAG_PREFIX}lower_is_better": ",".join(sorted(task.lower_is_better)),
        f"{TAG_PREFIX}reward_components": ",".join(components),
    }


class MlflowStepLogger:
    """A ``TrainerCallback``: forwards TRL's per-step logs to the cell's MLflow run with namespaced keys.

    ``rewards/<component>/...`` and ``adv/...`` keep their names, the weighted total ``reward``
    too; every other number becomes ``train/<key>``.
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

    @staticmethod
    def metric_name(key: str) -> str:
        if key.startswith(("rewards/", "adv/")) or key in ("reward", "reward_std"):
            return key
        return f"train/{key}"

    def log(self, logs: dict[str, Any], step: int) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        metrics = [
            Metric(self.metric_name(k), float(v), now, step)
            for k, v in logs.items()
            if isinstance(v, int | float) and not isinstance(v, bool) and v == v  # skip NaN
        ]
        if metrics:
            self.client.log_batch(self.run_id, metrics=metrics)


def _build_dataset(samples: list[Any]) -> Any:
    from datasets import Dataset

    rows = [{"prompt": s.prompt, "sample_id": s.id, **s.columns} for s in samples]
    return Dataset.from_list(rows)


def _grpo_config(spec: RunSpec, task: Any, output_dir: str, progress: bool) -> Any:
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


def evaluate_model(task: Any, model: Any, tokenizer: Any, limit: int) -> Any:
    """The task's own evaluation of ``model`` with greedy decoding (first ``limit`` eval samples, 0 = all)."""
    from mrbench.engine.generation import HFGenerator

    samples = task.eval_samples()
    if limit:
        samples = samples[:limit]
    return task.evaluate(HFGenerator(model, tokenizer), samples)


def _completion_log(trainer: Any) -> list[dict[str, Any]]:
    """The last generation batch as rows: prompt, completion, per-component rewards, advantage."""
    from mrbench.core.contracts import completion_text

    logs = trainer._logs
    prompts, completions = list(logs["prompt"]), list(logs["completion"])
    advantages = list(logs["advantages"])
    rewards = {name: list(values) for name, values in logs["rewards"].items()}
    rows = []
    for i, (prompt, completion) in enumerate(zip(prompts, completions, strict=False)):
        last_user = prompt[-1]["content"] if isinstance(prompt, list) and prompt else str(prompt)
        rows.append(
            {
                "prompt": last_user,
                "completion": completion_text(completion),
                "rewards": {name: values[i] if i < len(values) else None for name, values in rewards.items()},
                "advantage": advantages[i] if i < len(advantages) else None,
            }
        )
    return rows


def run_cell(
    spec: RunSpec,
    *,
    tracking_uri: str,
    experiment: str,
    parent_run_id: str | None = None,
    sweep: str | None = None,
    progress: bool = True,
) -> CellResult:
    """Evaluate → train → evaluate one cell, logging everything to a new MLflow run."""
    from mlflow.entities import Metric, Param
    from mlflow.tracking import MlflowClient

    import mrbench.methods as methods
    from mrbench.engine.models import load_model, load_tokenizer, prepare_model
    from mrbench.engine.trainer import MultiRewardGRPOTrainer
    from mrbench.tasks import build_task

    started = time.perf_counter()
    client = MlflowClient(tracking_uri=tracking_uri)
    experiment_id = ensure_experiment(experiment, tracking_uri)
    task = build_task(spec.task, spec.task_params)
    tags = cell_tags(spec, task, sweep)
    if parent_run_id:
        tags["mlflow.parentRunId"] = parent_run_id
    run = client.create_run(experiment_id, tags=tags, run_name=spec.label())
    run_id = run.info.run_id
    try:
        client.log_batch(run_id, params=[Param(k, v[:6000]) for k, v in spec.flat_params().items()])
        log_json_artifact(client, run_id, {**spec.to_dict(), "run_key": spec.run_key()}, "config.json")

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
            metrics=[Metric(f"eval_before/{k}", float(v), now, 0) for k, v in before.metrics.items()]
            + [Metric(f"eval/{k}", float(v), now, 0) for k, v in before.metrics.items()],
        )
        log_json_artifact(client, run_id, before.samples, "eval/samples_before.jsonl")

        step_logger = MlflowStepLogger(client, run_id)
        hooks = task.training_hooks() if hasattr(task, "training_hooks") else {}
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
            "perf/wall_s": wall_s,
            "perf/train_s": train_s,
            "perf/eval_s": eval_s,
            "perf/model_prepare_s": prepare_s,
        }
        client.log_batch(
            run_id,
            metrics=[Metric(f"eval/{k}", float(v), now, spec.train.steps) for k, v in after.metrics.items()]
            + [Metric(k, float(v), now, spec.train.steps) for k, v in perf.items()],
        )
        log_json_artifact(client, run_id, after.samples, "eval/samples_after.jsonl")
        components = [c.name for c in task.reward_components()]
        log_json_artifact(client, run_id, trainer.diag_accumulator.summary(components), "diagnostics.json")
        log_json_artifact(client, run_id, _completion_log(trainer), "samples/completions.jsonl")
        client.set_terminated(run_id, "FINISHED")
    except KeyboardInterrupt:
        client.set_terminated(run_id, "KILLED")
        raise
    except BaseException as exc:
        try:
            client.set_tag(run_id, f"{TAG_PREFIX}error", f"{type(exc).__name__}: {exc}"[:4000])
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
