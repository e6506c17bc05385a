"""Run one cell (method × task × model × seed): evaluate, train with GRPO, evaluate again, log to MLflow.

Each cell is one MLflow run (a child of the sweep's parent run when there is one). The run is
ended FINISHED only after everything is logged; Ctrl-C, and a write that finds no room (a full
disk, the file size limit: :mod:`mrbench.engine.runs.run_guard`), end it KILLED, keeping its last
training checkpoint for the rerun to resume; any other error ends it FAILED, so a resumed sweep
knows exactly which cells to redo.

Checkpoint (``save``, not part of the run key): ``"final"`` (default) keeps the trained policy
and tokenizer in ``<results>/checkpoints/<run_key>/final/``, ``"every:N"`` also one every N
steps, ``"none"`` nothing; the run records it in its ``save`` and ``checkpoint_dir`` params and
``checkpoint/size_mb`` (see :mod:`mrbench.engine.cell.checkpoints`).

Tracking-store outages:

1. Every call to the store is retried with backoff for ``tracking_retry_s`` seconds (the
   argument, else the spec's :class:`~mrbench.engine.config.CellOptions` (a sweep's setting), else
   ``$MRBENCH_TRACKING_RETRY_S``, else 300; :class:`~mrbench.store.client.RetryingClient`), so
   a server restart costs nothing.
2. Past that bound the run's log goes offline (:class:`~mrbench.engine.runs.tracking.RunLog`):
   training and evaluation go on, and everything is kept to be sent at the end, when the store
   gets one more bounded try.
3. If it is still unreachable then, the checkpoint is on disk (per ``save``), what the run could
   not log is in ``<results>/checkpoints/<run_key>/pending/`` (``record.json`` and the artifact
   files it names), the run stays RUNNING in the store, and
   :class:`~mrbench.store.client.TrackingUnavailable` names both folders.
4. Running the same cell again (same run key and store: the same ``mrbench run`` command, or a
   resumed sweep) finds ``record.json``, sends it to that same run, ends the run FINISHED and
   returns its result (``recovered``) without loading a model or training. If the store is
   still down, the record stays for the next try; deleting ``pending/`` trains the cell afresh.

A store that is unreachable before the run exists fails the cell at once: nothing was computed.

One process at a time runs a cell (:mod:`mrbench.engine.cell.cell_claim`): :func:`run_cell` holds a lock
in the cell's folder (``cell.lock``, an ``flock`` that dies with its process) from start to end,
so a second ``mrbench run`` of the same cell and results folder, or a sweep cell beside it, is
refused at once (a :class:`~mrbench.core.errors.UserError`, exit 2) naming the host and pid that
run it, instead of training it twice. The cell's run carries its process's ``host``, ``pid`` and a
``heartbeat`` tag (refreshed every 30 s), so that, holding the lock, a cell ends KILLED the
RUNNING runs of its run key whose process is gone (``kill -9``, a power loss) and is refused when
one's process is alive elsewhere (another results folder, or another machine on the same tracking
server, by its heartbeat) before it opens its own run or reopens the killed one to resume it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from mrbench.core import layout
from mrbench.core.cell_records import PendingRecord
from mrbench.core.contracts import EvalResult, Task
from mrbench.core.errors import UserError
from mrbench.core.provenance import git_sha
from mrbench.core.records import RecordError
from mrbench.engine.cell import resume
from mrbench.engine.cell.cell_claim import CellClaim
from mrbench.engine.cell.cell_result import CellResult
from mrbench.engine.cell.checkpoints import CellFolder, SaveMode, folder_size_mb, parse_save, save_policy
from mrbench.engine.config import RunSpec
from mrbench.engine.evaluation import eval_cache
from mrbench.engine.evaluation.policy import (
    LoadedPolicy,
    cached_evaluation,
    evaluate_policy,
    load_for_evaluation,
)
from mrbench.engine.models.catalog import Precision
from mrbench.engine.processes.distributed import is_main_process, rank_client
from mrbench.engine.runs import console, phases
from mrbench.engine.runs.run_guard import ends_run_on_error
from mrbench.engine.runs.tracking import RunLog
from mrbench.engine.training.grpo_setup import grpo_config, train_dataset, vllm_engine_options
from mrbench.store.claims import holder_tags
from mrbench.store.client import RetryingClient, TrackingUnavailable, ensure_experiment

log = logging.getLogger(__name__)


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


class MlflowStepLogger:
    """A ``TrainerCallback``: forwards TRL's per-step logs to the cell's run through its :class:`RunLog`.

    Names follow :func:`mrbench.core.layout.step_metric`: ``rewards/<component>/...``, ``adv/...``
    and the weighted total ``reward`` keep theirs; every other number becomes ``train/<key>``.
    """

    def __init__(self, run_log: RunLog) -> None:
        from transformers import TrainerCallback

        self.run_log = run_log
        # Subclass at runtime so that importing this module does not import transformers.
        parent = self

        class _Callback(TrainerCallback):
            def on_log(self, args, state, control, logs=None, **kwargs):
                parent.log(logs or {}, state.global_step)

        self.callback = _Callback()

    def log(self, logs: dict[str, Any], step: int) -> None:
        self.run_log.metrics(
            {
                layout.step_metric(k): float(v)
                for k, v in logs.items()
                if isinstance(v, int | float) and not isinstance(v, bool) and v == v  # skip NaN
            },
            step,
        )


def run_cell(
    spec: RunSpec,
    *,
    tracking_uri: str,
    experiment: str,
    parent_run_id: str | None = None,
    sweep: str | None = None,
    progress: bool = True,
    save: str = "final",
    tracking_retry_s: float | None = None,
    checkpoint_every: int | None = None,
) -> CellResult:
    """Evaluate → train → evaluate one cell, logging everything to a new MLflow run.

    ``save``: ``"none" | "final" | "every:N"``; ``tracking_retry_s``: how long each call to the
    store is retried (see the module docstring for both, and for how an outage is recovered);
    ``checkpoint_every``: training checkpoints every N steps (0: none; None: ``spec.options``, a
    sweep's setting, else ``$MRBENCH_CHECKPOINT_EVERY`` or a tenth of the steps), from which the cell
    resumes if killed (:mod:`mrbench.engine.cell.resume`).
    The task is built here and closed (:meth:`~mrbench.core.contracts.Task.close`) when the cell
    ends, however it ends.
    """
    from mrbench.tasks import build_task

    started = time.perf_counter()
    save_mode = parse_save(save)
    check_one_device()
    precision = Precision.of(spec.train.precision)  # resolved once, before any run exists
    if spec.train.use_vllm:  # a setting this machine cannot run: say so before any run is created
        from mrbench.engine.evaluation.generation import require_vllm

        require_vllm()
    # An argument (mrbench run) wins over the spec's options (a sweep's settings); None: the env default.
    tracking_retry_s = spec.options.tracking_retry_s if tracking_retry_s is None else tracking_retry_s
    checkpoint_every = spec.options.checkpoint_every if checkpoint_every is None else checkpoint_every
    # Ranks > 0 of a multi-process cell log nothing and leave the cell folder to rank 0.
    client = rank_client(tracking_uri, tracking_retry_s)
    folder = CellFolder.for_this_rank(spec.run_key())
    # One process at a time runs the cell; a second is refused, naming the first (cell_claim).
    with CellClaim(folder, spec.label(), active=is_main_process()) as claim:
        record = folder.read_pending()
        if record is not None:
            return _finish_recorded(record, folder, client)
        # Library output goes to the cell log, attached to the run at the end (mrbench.engine.runs.console).
        with console.cell_output(folder.root):
            task = build_task(spec.task, spec.task_params)
            try:
                return _run_cell(
                    spec,
                    task,
                    started=started,
                    client=client,
                    folder=folder,
                    claim=claim,
                    save_mode=save_mode,
                    precision=precision,
                    experiment=experiment,
                    parent_run_id=parent_run_id,
                    sweep=sweep,
                    progress=progress,
                    checkpoint_every=checkpoint_every,
                )
            finally:
                task.close()


def check_one_device() -> None:
    """:class:`UserError` before any run exists when a one-process cell sees several GPUs (TRL would
    refuse them after the pre-training evaluation, or spread the reference model over them); the
    sweep and ``mrbench run`` give each cell process its own (:mod:`mrbench.engine.processes.devices`)."""
    import torch

    from mrbench.engine.processes.distributed import world_size

    if world_size() == 1 and torch.cuda.is_available() and torch.cuda.device_count() > 1:
        raise UserError(
            f"this one-process cell sees {torch.cuda.device_count()} GPUs and trains on one: set "
            "CUDA_VISIBLE_DEVICES to one GPU, or train the cell with --processes-per-cell N"
        )


@contextlib.contextmanager
def _trainer_output(folder: CellFolder, start: resume.CellStart) -> Iterator[str]:
    """TRL's ``output_dir``: the cell folder when it writes step checkpoints (an earlier attempt's
    go, unless this one resumes from them), else a temporary one."""
    if start.save.every or start.every:
        if start.resumed is None:
            folder.clear_step_checkpoints()
        folder.root.mkdir(parents=True, exist_ok=True)
        yield str(folder.root)
    else:
        with tempfile.TemporaryDirectory(prefix="mrbench-trl-") as out_dir:
            yield out_dir


@dataclass
class _CellRun:
    """One cell's open run, which the phases of :func:`_run_cell` read and add to: the spec and
    task, the cell folder, how the run started (:class:`~mrbench.engine.cell.resume.CellStart`), its
    log, its precision (resolved once: both evaluations and training use it), and the seconds the
    timed phases took."""

    spec: RunSpec
    task: Task
    folder: CellFolder
    start: resume.CellStart
    log: RunLog
    precision: Precision
    prepare_s: float = 0.0
    eval_s: float = 0.0
    train_s: float = 0.0

    @property
    def run_id(self) -> str:
        return self.start.run_id

    @property
    def save(self) -> SaveMode:
        """What the run keeps of the policy (a reopened run goes on with its own ``save``)."""
        return self.start.save


def _run_cell(
    spec: RunSpec,
    task: Task,
    *,
    started: float,
    client: RetryingClient,
    folder: CellFolder,
    claim: CellClaim,
    save_mode: SaveMode,
    precision: Precision,
    experiment: str,
    parent_run_id: str | None,
    sweep: str | None,
    progress: bool,
    checkpoint_every: int | None,
) -> CellResult:
    """The phases of one cell, in order. Once the run is open, any error ends it KILLED (Ctrl-C, no
    room on the disk) or FAILED and empties ``pending/``: a cell that did not complete has nothing
    to log later."""
    run = _open_run(
        spec,
        task,
        client,
        folder,
        claim,
        save_mode=save_mode,
        precision=precision,
        experiment=experiment,
        parent_run_id=parent_run_id,
        sweep=sweep,
        checkpoint_every=checkpoint_every,
    )
    with ends_run_on_error(client, run.run_id, cleanup=folder.clear_pending, writes_to=folder.root):
        _log_config(run)
        policy = _load_policy(run)
        before = _evaluate_before_training(run, policy)
        trainer = _train(run, policy, progress)
        checkpoint = _save_final_policy(run, trainer)
        after = _evaluate_after_training(run, trainer, policy.tokenizer)
        wall_s = time.perf_counter() - started
        _log_results(run, after, trainer, wall_s)
    return _complete(run, before, after, wall_s, checkpoint)


def _open_run(
    spec: RunSpec,
    task: Task,
    client: RetryingClient,
    folder: CellFolder,
    claim: CellClaim,
    *,
    save_mode: SaveMode,
    precision: Precision,
    experiment: str,
    parent_run_id: str | None,
    sweep: str | None,
    checkpoint_every: int | None,
) -> _CellRun:
    """A new run, or the run of this cell's last training checkpoint, reopened
    (:mod:`mrbench.engine.cell.resume`); the cell log attached to it and ``pending/`` emptied. Earlier
    attempts left RUNNING by a process that is gone are ended KILLED first, and one whose process
    is alive stops the cell (:mod:`mrbench.engine.cell.cell_claim`)."""
    experiment_id = ensure_experiment(experiment, client.tracking_uri, client=client)
    tags = cell_tags(spec, task, sweep) | holder_tags()  # whose process runs it, for the next claim
    if parent_run_id:
        tags[layout.PARENT_RUN_TAG] = parent_run_id
    claim.settle(client, experiment_id, spec.run_key())
    start = resume.start_run(
        client,
        folder,
        spec.run_key(),
        experiment_id,
        tags,
        spec.label(),
        save=save_mode,
        checkpoint_every=checkpoint_every,
        steps=spec.train.steps,
    )
    claim.opened(client.tracking_uri, start.run_id)
    console.attach_log(client, start.run_id)
    folder.clear_pending()  # what a process that died before writing its record left there
    run_log = RunLog(client, start.run_id, folder.pending)
    return _CellRun(spec, task, folder, start, run_log, precision)


def _log_config(run: _CellRun) -> None:
    """The run's params and ``config.json`` (a resumed run keeps what it logged)."""
    if run.start.resumed is not None:
        return
    spec = run.spec
    options = {layout.PARAM_SAVE: str(run.save), layout.PARAM_CHECKPOINT_EVERY: str(run.start.every)}
    run.log.params({**spec.flat_params(), **options})
    run.log.json_artifact({**spec.to_dict(), "run_key": spec.run_key()}, layout.CONFIG_ARTIFACT)


def _load_policy(run: _CellRun) -> LoadedPolicy:
    """The cell's policy, prepared, seeded and loaded in float32 whatever the precision (the master
    weights: :func:`~mrbench.engine.evaluation.policy.load_for_evaluation`); its size logged."""
    policy = load_for_evaluation(run.spec.model, run.spec.seed)
    run.prepare_s = policy.prepare_s
    run.log.params({layout.PARAM_N_PARAMS: str(sum(p.numel() for p in policy.model.parameters()))})
    return policy


def _evaluate_before_training(run: _CellRun, policy: LoadedPolicy) -> EvalResult:
    """The pre-training evaluation, logged as ``eval_before/<m>`` and ``eval/<m>`` at step 0 with its
    samples; a resumed run's is read back, not evaluated (or logged) again."""
    t0 = time.perf_counter()
    logged_before = run.start.before()
    before = EvalResult(logged_before) if logged_before else _evaluate_before(run, policy)
    run.eval_s += time.perf_counter() - t0
    if not logged_before:
        run.log.metrics(
            {layout.eval_before_metric(k): v for k, v in before.metrics.items()}
            | {layout.eval_metric(k): v for k, v in before.metrics.items()},
            0,
        )
        run.log.json_artifact(before.samples, layout.EVAL_SAMPLES_BEFORE)
    return before


def _evaluate_before(run: _CellRun, policy: LoadedPolicy) -> EvalResult:
    """The pre-training evaluation: read from :mod:`~mrbench.engine.evaluation.eval_cache` when another
    cell of the same (model, task settings, eval limit, precision) computed it, else computed and
    stored there (:func:`~mrbench.engine.evaluation.policy.cached_evaluation`)."""
    spec, task, limit = run.spec, run.task, run.spec.train.eval_limit
    key = eval_cache.cache_key(
        policy.path, spec.task, task.version, spec.task_params, limit, mixed_precision=run.precision.mixed
    )

    def compute() -> EvalResult:
        with phases.evaluation("eval before", policy.model, task, limit):
            return evaluate_policy(task, policy.model, policy.tokenizer, limit, run.precision)

    before, cached_from = cached_evaluation(key, compute, run.run_id)
    if cached_from is not None:
        run.log.tags({layout.tag(layout.EVAL_BEFORE_FROM): cached_from})
    return before


def _train(run: _CellRun, policy: LoadedPolicy, progress: bool) -> Any:
    """Train the policy with :class:`~mrbench.engine.training.trainer.MultiRewardGRPOTrainer` (from the
    cell's last training checkpoint when the run was reopened); returns the trainer."""
    import mrbench.methods as methods
    from mrbench.engine.models.tiny import TINY_PRESETS
    from mrbench.engine.training import cpu_logprob, shared_prefix
    from mrbench.engine.training.trainer import MultiRewardGRPOTrainer

    cpu_logprob.install()  # TRL's CPU log-prob folds in fewer passes, the same bits (engine.cpu_logprob)
    spec, task = run.spec, run.task
    step_logger = MlflowStepLogger(run.log)
    hooks = task.training_hooks()
    vllm_cap = _vllm_cap(spec, task, policy)
    # vllm_engine_options: vLLM generates in the cell's precision (TRL gives it no dtype).
    with _trainer_output(run.folder, run.start) as out_dir, vllm_engine_options(spec, run.precision):
        trainer = MultiRewardGRPOTrainer(
            # The one copy of the policy: the pre-training evaluation's model is the one trained
            # (TRL builds a reference model from its path when beta > 0).
            model=policy.model,
            reward_funcs=[c.fn for c in task.reward_components()],
            args=grpo_config(
                spec,
                task,
                out_dir,
                progress,
                save_every=run.save.every,
                vllm_max_length=vllm_cap,
                precision=run.precision,
            ),
            train_dataset=train_dataset(task.train_samples()),
            processing_class=policy.tokenizer,
            callbacks=[step_logger.callback, phases.training_callback()],
            method_fn=methods.get_method(spec.method).obj,
            method_params=spec.method_params,
            shadow_methods=None,  # compare with every other registered method, at its defaults
            # Each group's prompt encoded once (engine.shared_prefix); the same numbers up to rounding.
            shared_prefix=shared_prefix.enabled(
                spec.train.shared_prefix, spec.model, policy.model, tiny_presets=TINY_PRESETS
            ),
            **hooks,
        )
        checkpoints = resume.CheckpointWriter(
            trainer, run.folder, run.start, kill_after=spec.options.kill_after_checkpoint
        )
        trainer.add_callback(checkpoints.callback)
        t0 = time.perf_counter()
        trainer.train(resume_from_checkpoint=checkpoints.restore())
        run.train_s = time.perf_counter() - t0
    return trainer


def _vllm_cap(spec: RunSpec, task: Task, policy: LoadedPolicy) -> int | None:
    """vLLM's context with ``use_vllm``, else None
    (:func:`mrbench.engine.evaluation.generation.vllm_context_cap`)."""
    if not spec.train.use_vllm:
        return None
    from mrbench.engine.evaluation.generation import vllm_context_cap

    budget = spec.train.max_completion_length or task.max_completion_tokens
    positions = getattr(policy.model.config, "max_position_embeddings", None)
    return vllm_context_cap(task, policy.tokenizer, budget, positions)


def _save_final_policy(run: _CellRun, trainer: Any) -> str:
    """With a final save, the trained policy in ``final/`` (with the task settings its model was
    built for), recorded in the run; its folder, or "". Saved before anything else can fail: the
    trained policy is what costs."""
    from mrbench.engine.models.catalog import model_task_settings

    if not run.save.final:
        return ""
    built_for = model_task_settings(run.spec.model)
    checkpoint = str(save_policy(trainer, run.folder.final, task_settings=built_for))
    run.log.params({layout.PARAM_CHECKPOINT_DIR: checkpoint})
    run.log.metrics({layout.CHECKPOINT_SIZE_MB: folder_size_mb(run.folder.final)}, run.spec.train.steps)
    return checkpoint


def _evaluate_after_training(run: _CellRun, trainer: Any, tokenizer: Any) -> EvalResult:
    """The evaluation of the trained policy (logged by :func:`_log_results`)."""
    limit = run.spec.train.eval_limit
    t0 = time.perf_counter()
    with phases.evaluation("eval after", trainer.model, run.task, limit):
        after = evaluate_policy(run.task, trainer.model, tokenizer, limit, run.precision)
    run.eval_s += time.perf_counter() - t0
    return after


def _log_results(run: _CellRun, after: EvalResult, trainer: Any, wall_s: float) -> None:
    """At the last step: ``eval/<m>`` after training and the ``perf/...`` timings; the samples after
    training, ``diagnostics.json``, the completion log and every training batch's rewards
    (``rewards.npz``) as artifacts."""
    perf = {
        layout.PERF_WALL_S: wall_s,
        layout.PERF_TRAIN_S: run.train_s,
        layout.PERF_EVAL_S: run.eval_s,
        layout.PERF_MODEL_PREPARE_S: run.prepare_s,
    }
    run.log.metrics({layout.eval_metric(k): v for k, v in after.metrics.items()} | perf, run.spec.train.steps)
    run.log.json_artifact(after.samples, layout.EVAL_SAMPLES_AFTER)
    record = trainer.training_record([c.name for c in run.task.reward_components()])
    run.log.json_artifact(record.diagnostics, layout.DIAGNOSTICS_ARTIFACT)
    run.log.json_artifact(record.completions, layout.COMPLETIONS_ARTIFACT)
    run.log.file_artifact(layout.REWARDS_ARTIFACT, record.rewards.save)


def _complete(
    run: _CellRun, before: EvalResult, after: EvalResult, wall_s: float, checkpoint: str
) -> CellResult:
    """The cell is complete: drop its training state, then send what the run kept and end it
    FINISHED (:func:`_finish`): from here on nothing it computed may be lost."""
    resume.finish_checkpoints(run.folder, run.save)  # the training state is not needed any more
    result = CellResult(
        run_id=run.run_id,
        run_key=run.spec.run_key(),
        status="FINISHED",
        metrics_before=dict(before.metrics),
        metrics_after=dict(after.metrics),
        wall_s=wall_s,
        primary_metric=run.task.primary_metric,
        checkpoint_dir=checkpoint,
    )
    _finish(run.log, run.folder, result)
    return result


def _outage_message(exc: TrackingUnavailable, run_id: str, folder: CellFolder, checkpoint: str) -> str:
    kept = f"the trained policy is in {checkpoint}" if checkpoint else "the policy was not kept (save none)"
    return (
        f"{exc}. The cell is complete: {kept}, and what run {run_id} could not log is in "
        f"{folder.pending}. Run the same cell again once the store answers (the same `mrbench run` "
        "command, or resume the sweep) to log it and end the run FINISHED without training again."
    )


def _finish_recorded(record: PendingRecord, folder: CellFolder, client: RetryingClient) -> CellResult:
    """Send what an earlier attempt of this cell could not log, end its run FINISHED, return its result."""
    run_id = record.run_id
    for name, value in (("tracking_uri", record.tracking_uri), ("result", record.result)):
        if value is None:
            raise RecordError(
                f"{folder.record_path}: {name!r} is missing; delete {folder.pending} to run again"
            )
    if record.tracking_uri != client.tracking_uri:
        raise UserError(
            f"{folder.record_path} holds what run {run_id} could not log to {record.tracking_uri}, "
            f"not {client.tracking_uri}: use --tracking-uri {record.tracking_uri} to finish that run, "
            f"or delete {folder.pending} to train the cell again"
        )
    try:
        recorded = CellResult.from_mapping(record.result, f"{folder.record_path}: 'result'")
    except RecordError as exc:
        raise RecordError(f"{exc}; delete {folder.pending} to run again") from None
    result = dataclasses.replace(recorded, recovered=True)
    log.warning("run %s: logging what an earlier attempt kept in %s (no training)", run_id, folder.pending)
    _finish(RunLog(client, run_id, folder.pending, record.pending), folder, result)
    return result


def _finish(run_log: RunLog, folder: CellFolder, result: CellResult) -> None:
    """Send what ``run_log`` kept, end its run FINISHED and remove the cell's ``pending/`` folder.

    When that fails (the store still unreachable past the bound, Ctrl-C while waiting for it, or
    any other error) a :class:`~mrbench.core.cell_records.PendingRecord` is written instead, for a
    rerun of the cell to finish the job: the run, its store, ``result`` and the log entries not
    sent yet (see :class:`~mrbench.engine.runs.tracking.RunLog`).
    """
    try:
        run_log.flush()
        run_log.client.set_terminated(run_log.run_id, "FINISHED")
    except BaseException as exc:
        kept = PendingRecord(
            run_log.run_id,
            run_log.client.tracking_uri,
            dataclasses.asdict(result) | {"recovered": False},
            tuple(run_log.pending),
        )
        folder.write_pending(kept)
        if isinstance(exc, TrackingUnavailable):
            message = _outage_message(exc, run_log.run_id, folder, result.checkpoint_dir)
            raise TrackingUnavailable(message) from None
        log.warning("run %s: what it could not log is kept in %s", run_log.run_id, folder.pending)
        raise
    folder.clear_pending()


def dump_result(result: CellResult) -> str:
    """JSON of a :class:`CellResult` (for worker processes)."""
    return json.dumps(result.__dict__)
