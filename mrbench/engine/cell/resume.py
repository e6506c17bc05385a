"""Resume inside a cell: a training checkpoint every N steps, and a killed cell going on from its last one.

While a cell trains, every ``checkpoint_every`` optimizer steps the trainer writes
``<results>/checkpoints/<run_key>/checkpoint-<step>/`` (transformers' own layout: the policy and
its optimizer state, ``optimizer.pt`` or, for an FSDP or DeepSpeed cell, their own files (see
:mod:`mrbench.engine.cell.checkpoint_layout`), ``scheduler.pt``, ``rng_state.pth`` and
``trainer_state.json`` with the step),
then mrbench adds :data:`MARKER` (:class:`mrbench.core.cell_records.ResumeMarker`), written
atomically once everything else is on disk: the run key, the MLflow run id, store and experiment,
the number of processes, the size of every file of the checkpoint, and mrbench's own running
state (the means that go to ``diagnostics.json``; the
rewards so far, for ``rewards.npz``, in :data:`mrbench.engine.training.reward_log.CHECKPOINT_FILE`). A
checkpoint without it is partial. A multi-process cell (:mod:`mrbench.engine.processes.distributed`) writes
the same checkpoint with one ``rng_state_<rank>.pth`` per process; rank 0 writes the marker once
every rank has saved, and when the cell runs again rank 0 alone picks (and cleans) the checkpoint
and sends its choice to the other ranks, so that every rank resumes from the same one.
Once a checkpoint is complete the previous one goes, so a cell keeps one (plus the model-only ones
``--save every:N`` asks for); when the cell is FINISHED its training state goes too.

How often: ``checkpoint_every`` N ≥ 1, 0 for none, or "auto" (the default): a tenth of the steps,
rounded up (30 steps: every 3), so a killed cell repeats at most a tenth of its training and
writes at most ten checkpoints. ``mrbench run --checkpoint-every N``, or a sweep's
``checkpoint_every`` setting (``mrbench sweep --checkpoint-every N``), which reaches each cell with
its spec (:class:`mrbench.engine.config.CellOptions`); when neither is given,
``$MRBENCH_CHECKPOINT_EVERY``, else "auto". Not part of the run key: it changes what a cell keeps,
not what it computes (a resumed cell computes what an uninterrupted one would, see below).

Running a cell whose folder holds a complete checkpoint of a run that did not end (RUNNING: its
process was killed; KILLED: Ctrl-C, or marked so by a resumed sweep) reopens that run: status
RUNNING again, its params kept (its ``save`` and ``checkpoint_every`` win over the new call's),
tags refreshed (a sweep's cell joins the new invocation's parent run) plus ``resumed_from``; the
pre-training evaluation is read back from the run, not repeated; training goes on with
``trainer.train(resume_from_checkpoint=...)``. Metrics of the steps after the checkpoint that the
killed attempt had logged are logged again at the same steps (MLflow keeps both points; a reader
takes the latest per step, as the report does). ``perf/*`` and TRL's end-of-training summary
(``train/train_loss``, ``train/train_runtime``, ...) describe the last attempt only.

Exactness: transformers restores the policy, optimizer, scheduler and the python, numpy and torch
RNG states and skips the batches already seen in the current epoch; mrbench restores its
diagnostics and, for a checkpoint past the first epoch, advances the data sampler's own generator
through the epochs before (transformers builds a fresh sampler, which would deal epoch 0's order
again). On a CPU with the same thread count, a resumed cell's step metrics, advantages, completions
and final evaluation equal an uninterrupted run's bit for bit (``tests/engine/test_resume_cell.py``).

A checkpoint that cannot be used (files missing or of another size than written, a truncated
safetensors file, the RNG state of one of the cell's processes missing, :data:`MARKER` missing,
unreadable, or naming another run key or another number of processes) gets one warning naming
its folder and is deleted; the cell resumes from the newest good one, or trains from scratch.
A checkpoint whose run is FINISHED, FAILED, gone, or in another store or experiment is not resumed
either (one warning): the cell trains from scratch in a new run, as before.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mrbench.core import env, layout
from mrbench.core.cell_records import ResumeMarker, fsync_path
from mrbench.core.errors import UserError
from mrbench.core.records import RecordError
from mrbench.core.results_layout import RESUME_MARKER
from mrbench.engine.cell import checkpoint_layout
from mrbench.engine.cell.checkpoints import CellFolder, SaveMode, parse_save, require_room_for_checkpoint

log = logging.getLogger(__name__)

MARKER = RESUME_MARKER
"""mrbench's file in a training checkpoint, written last: the checkpoint is complete once it exists."""
AUTO_CHECKPOINTS = 10
"""``checkpoint_every`` "auto": this many checkpoints over a cell's steps (every ceil(steps / 10))."""
# transformers' names in a checkpoint folder that every layout has; the model and optimizer state
# are in the layout of the cell's --distributed preset (mrbench.engine.cell.checkpoint_layout).
_REQUIRED = ("scheduler.pt", "trainer_state.json")
_RNG_GLOB = "rng_state*.pth"


def parse_checkpoint_every(text: str) -> int | None:
    """``"auto"`` → None, ``"N"`` (0 ≤ N ≤ :data:`~mrbench.core.limits.STEPS_MAX`) → N; anything
    else a :class:`UserError` (:func:`mrbench.core.env.steps_or_auto`, as ``$MRBENCH_CHECKPOINT_EVERY``)."""
    try:
        return env.steps_or_auto(text)
    except ValueError as exc:
        raise UserError(f"checkpoint every {text!r}: expected {exc}") from None


def resolve_checkpoint_every(value: int | None, steps: int) -> int:
    """Steps between training checkpoints (0: none): ``value`` (an option or a sweep's setting),
    else ``$MRBENCH_CHECKPOINT_EVERY`` (the default when none is given), else "auto", a tenth of
    ``steps`` rounded up.

    >>> resolve_checkpoint_every(None, 30), resolve_checkpoint_every(None, 1900)
    (3, 190)
    """
    if value is None:
        value = env.CHECKPOINT_EVERY.get()
    if value is None:
        return max(1, -(-steps // AUTO_CHECKPOINTS))
    if value < 0:
        raise UserError(f"checkpoint every {value}: expected a number of steps ≥ 0 (0: no checkpoints)")
    return value


# --------------------------------------------------------------------------- checking a checkpoint


def _safetensors_problem(path: Path) -> str | None:
    """Why ``path`` is not a complete safetensors file (header and tensor data), or None."""
    size = path.stat().st_size
    try:
        with path.open("rb") as fh:
            (n,) = struct.unpack("<Q", fh.read(8))
            if n > size - 8:
                return f"{path.name} is truncated (header)"
            header = json.loads(fh.read(n))
    except (struct.error, ValueError):
        return f"{path.name} has no readable safetensors header"
    ends = [t["data_offsets"][1] for k, t in header.items() if k != "__metadata__"]
    if 8 + n + max(ends, default=0) != size:
        return f"{path.name} is truncated ({size} bytes, its header says {8 + n + max(ends, default=0)})"
    return None


def checkpoint_problem(path: Path, run_key: str) -> str | None:
    """Why the training checkpoint ``path`` cannot be resumed by the cell ``run_key`` (run by this
    many processes); None if it can."""
    from mrbench.engine.processes.distributed import world_size

    if not (path / MARKER).is_file():
        return f"{MARKER} is missing (the checkpoint was not completed)"
    try:
        marker = ResumeMarker.read(path)
    except RecordError as exc:
        return str(exc)
    if marker.run_key != run_key:
        return f"{MARKER} names run key {marker.run_key!r}, not {run_key}"
    if marker.folder_name != path.name:
        return f"{MARKER} names step {marker.step!r}"
    files = marker.files
    for name, size in files.items():
        file = path / name
        if not file.is_file():
            return f"{name} is missing"
        if file.stat().st_size != size:
            return f"{name} has {file.stat().st_size} bytes, {size} were written"
    for name in _REQUIRED:
        if name not in files:
            return f"{name} is missing"
    processes = marker.processes
    if processes != world_size():
        # Each process restores its own RNG state: another count would not go on as it would have.
        return f"it was written by {processes} processes, this cell runs {world_size()}"
    rngs = ["rng_state.pth"] if processes == 1 else [f"rng_state_{r}.pth" for r in range(processes)]
    missing = [name for name in rngs if name not in files]
    if missing:
        return f"its RNG state is missing ({', '.join(missing)})"
    problem = checkpoint_layout.state_problem(files, marker.step, processes)
    if problem:
        return problem
    for name in sorted(files):
        if name.endswith(".safetensors"):
            problem = _safetensors_problem(path / name)
            if problem:
                return problem
    return None


def _is_training_checkpoint(path: Path) -> bool:
    """True for a (possibly partial) training checkpoint; False for a model-only one kept by
    ``--save every:N`` once its cell finished (trainer state, no optimizer, no marker)."""
    if (path / MARKER).exists() or checkpoint_layout.has_optimizer_state(path):
        return True
    return not (path / "trainer_state.json").exists()


@dataclass(frozen=True)
class ResumePoint:
    """A complete training checkpoint of this cell: its folder, step and marker."""

    path: Path
    step: int
    marker: ResumeMarker


def latest_resume_point(folder: CellFolder, run_key: str) -> ResumePoint | None:
    """The newest complete training checkpoint of ``folder``; every unusable one newer than it gets
    one warning naming it and is deleted. None when there is none."""
    for step, path in reversed(folder.step_checkpoints()):
        if not _is_training_checkpoint(path):
            continue
        problem = checkpoint_problem(path, run_key)
        if problem is None:
            return ResumePoint(path, step, ResumeMarker.read(path))
        log.warning("checkpoint %s is unusable (%s): deleted; looking for an earlier one", path, problem)
        shutil.rmtree(path, ignore_errors=True)
    return None


def resumable_step(run_key: str, run_id: str) -> int | None:
    """The step of the newest checkpoint of cell ``run_key`` whose marker names run ``run_id``, read
    only (nothing is checked beyond the marker, nothing deleted): what a sweep prints before it runs."""
    for step, path in reversed(CellFolder.for_run_key(run_key).step_checkpoints()):
        try:
            marker = ResumeMarker.read(path)
        except RecordError:
            continue
        if marker.run_key == run_key and marker.run_id == run_id:
            return step
    return None


# --------------------------------------------------------------------------- reopening the run


@dataclass(frozen=True)
class Resumed:
    """A run being resumed: its id, the checkpoint, the options it was started with, and what its
    pre-training evaluation logged (empty: not logged, evaluate again)."""

    run_id: str
    point: ResumePoint
    save: str
    checkpoint_every: int
    metrics_before: dict[str, float]


def reopen_run(
    client: Any,
    folder: CellFolder,
    run_key: str,
    experiment_id: str,
    tags: dict[str, str],
    *,
    save: str,
    checkpoint_every: int,
) -> Resumed | None:
    """The run to resume for cell ``run_key`` (set RUNNING again, ``tags`` and ``resumed_from``
    set), or None when the cell trains from scratch (see the module docstring)."""
    from mlflow.exceptions import MlflowException

    point = latest_resume_point(folder, run_key)
    if point is None:
        return None
    marker, run_id = point.marker, point.marker.run_id
    run, reason = None, ""
    if marker.tracking_uri != client.tracking_uri or marker.experiment_id != experiment_id:
        reason = f"its run {run_id} is in {marker.tracking_uri}, experiment {marker.experiment_id}"
    else:
        try:
            run = client.get_run(run_id)
        except MlflowException:
            reason = f"its run {run_id} is not in the store"
    if run is not None:
        if run.info.lifecycle_stage == "deleted":
            reason = f"its run {run_id} was deleted"
        elif run.info.status in ("FINISHED", "FAILED"):
            reason = f"its run {run_id} ended {run.info.status}"
    if reason:
        log.warning("checkpoint %s is not resumed (%s): training from scratch", point.path, reason)
        return None
    assert run is not None
    params = run.data.params
    kept_save = params.get(layout.PARAM_SAVE, save)
    kept_every = int(params.get(layout.PARAM_CHECKPOINT_EVERY, checkpoint_every))
    if (kept_save, kept_every) != (save, checkpoint_every):
        log.warning(
            "run %s was started with save %s and checkpoint every %d; it goes on with those",
            run_id,
            kept_save,
            kept_every,
        )
    steps = [*layout.split_list(layout.read_tag(run.data.tags, layout.RESUMED_FROM)), str(point.step)]
    from mlflow.entities import RunTag

    client.update_run(run_id, status="RUNNING")
    values = {**tags, layout.tag(layout.RESUMED_FROM): layout.join_list(steps)}
    client.log_batch(run_id, tags=[RunTag(k, v) for k, v in values.items()])
    before = {
        layout.strip_prefix(layout.EVAL_BEFORE, k): v
        for k, v in run.data.metrics.items()
        if k.startswith(layout.EVAL_BEFORE)
    }
    log.warning("resuming run %s from %s (step %d)", run_id, point.path, point.step)
    return Resumed(run_id, point, kept_save, kept_every, before)


@dataclass(frozen=True)
class CellStart:
    """How a cell's run starts: its id, store and experiment, the options it goes on with, the
    checkpoint cadence (0: none), and what it resumes (None: a new run)."""

    run_id: str
    run_key: str
    tracking_uri: str
    experiment_id: str
    save: SaveMode
    every: int
    resumed: Resumed | None

    def before(self) -> dict[str, float] | None:
        """The pre-training evaluation the resumed run logged (None: evaluate now)."""
        return (
            self.resumed.metrics_before if self.resumed is not None and self.resumed.metrics_before else None
        )


def start_run(
    client: Any,
    folder: CellFolder,
    run_key: str,
    experiment_id: str,
    tags: dict[str, str],
    run_name: str,
    *,
    save: SaveMode,
    checkpoint_every: int | None,
    steps: int,
) -> CellStart:
    """Reopen the run of the cell's last complete checkpoint (:func:`reopen_run`), else create a new
    one. In a multi-process cell rank 0 alone decides (it checks, deletes and reopens) and the
    other ranks take its decision: the same checkpoint, cadence and pre-training evaluation."""
    from mrbench.engine.processes.distributed import from_rank0, is_main_process

    every = resolve_checkpoint_every(checkpoint_every, steps)
    resumed = None
    if is_main_process():
        resumed = reopen_run(
            client, folder, run_key, experiment_id, tags, save=str(save), checkpoint_every=every
        )
    resumed = from_rank0(resumed)
    if resumed is not None:
        return CellStart(
            resumed.run_id if is_main_process() else "",  # ranks > 0 log nothing: no run id
            run_key,
            client.tracking_uri,
            experiment_id,
            parse_save(resumed.save),
            resumed.checkpoint_every,
            resumed,
        )
    run_id = client.create_run(experiment_id, tags=tags, run_name=run_name).info.run_id
    return CellStart(run_id, run_key, client.tracking_uri, experiment_id, save, every, None)


# --------------------------------------------------------------------------- writing checkpoints


def _strip(path: Path) -> None:
    """Make the checkpoint ``path`` model-only (its marker first: never a marker without its files)."""
    (path / MARKER).unlink(missing_ok=True)
    for training in checkpoint_layout.training_only(path):
        if training.is_dir():
            shutil.rmtree(training)
        else:
            training.unlink()
    for rng in path.glob(_RNG_GLOB):
        rng.unlink()


class CheckpointWriter:
    """Asks the trainer for a checkpoint every ``every`` steps (and every ``keep_every``, for save
    every:N), completes each with :data:`MARKER`, and then removes the previous one (a kept one
    becomes model-only). ``callback`` is the ``TrainerCallback`` to add to the trainer.

    ``kill_after``: a rehearsed crash (:attr:`mrbench.engine.config.CellOptions.kill_after_checkpoint`):
    on a first attempt (not a resumed one), once the checkpoint of that step is complete, the
    process group of the cell's main process gets SIGKILL (a one-process cell and its worker; in a
    multi-process cell rank 0, each rank being a session of its own, and the others fail with it),
    as a machine failure would end it; the next attempt resumes from that checkpoint."""

    def __init__(
        self, trainer: Any, folder: CellFolder, start: CellStart, *, kill_after: int | None = None
    ) -> None:
        from transformers import TrainerCallback

        from mrbench.engine.processes.distributed import barrier

        self.trainer, self.folder, self.start = trainer, folder, start
        self.every, self.keep_every, self.resumed = start.every, start.save.every, start.resumed
        self.kill_after = kill_after if start.resumed is None else None
        if self.kill_after is not None:
            check_can_kill_group()
        writer = self

        class _Callback(TrainerCallback):  # subclassed here: importing this module imports no transformers
            def on_train_begin(self, args, state, control, train_dataloader=None, **kwargs):
                if writer.resumed is not None and train_dataloader is not None:
                    _replay_sampler_epochs(
                        train_dataloader, state.global_step, args.gradient_accumulation_steps
                    )

            def on_step_end(self, args, state, control, **kwargs):
                step = state.global_step
                if any(n and step % n == 0 for n in (writer.every, writer.keep_every)):
                    control.should_save = True
                if control.should_save and args.should_save:  # it fits, or the run ends KILLED now
                    require_room_for_checkpoint(writer.trainer, writer.folder.root)

            def on_save(self, args, state, control, **kwargs):
                # Every rank has saved its part (its RNG state) before rank 0 vouches for the whole.
                barrier()
                if args.should_save:  # the main process (ranks > 0 leave the folder to rank 0)
                    writer.complete(
                        Path(args.output_dir) / f"checkpoint-{state.global_step}", state.global_step
                    )

        self.callback = _Callback()

    def complete(self, path: Path, step: int) -> None:
        """Write :data:`MARKER` into the checkpoint ``path`` the trainer has just written, then
        retire the earlier ones."""
        from mrbench.engine.processes.distributed import world_size

        # The rewards so far (for rewards.npz) go into the folder, the rest into the marker.
        diagnostics, batches_scored = self.trainer.save_running_state(path)
        files = {}
        for file in sorted(p for p in path.rglob("*") if p.is_file() and p.name != MARKER):
            fsync_path(file)  # the marker must never outlive, on disk, the files it vouches for
            files[str(file.relative_to(path))] = file.stat().st_size
        start = self.start
        ResumeMarker(
            run_key=start.run_key,
            run_id=start.run_id,
            tracking_uri=start.tracking_uri,
            experiment_id=start.experiment_id,
            step=step,
            processes=world_size(),
            files=files,
            diagnostics=diagnostics,
            batches_scored=batches_scored,
        ).write(path)
        for older, older_path in self.folder.step_checkpoints():
            if older >= step:
                continue
            if self.keep_every and older % self.keep_every == 0:
                _strip(older_path)
            else:
                shutil.rmtree(older_path, ignore_errors=True)
        if self.kill_after == step:
            log.warning("rehearsed crash: SIGKILL to the cell's process group after checkpoint %d", step)
            logging.shutdown()  # the cell log keeps the line above
            os.killpg(os.getpgrp(), signal.SIGKILL)

    def restore(self) -> str | None:
        """Put mrbench's running state of the resumed checkpoint back into the trainer; return the
        checkpoint folder for ``trainer.train(resume_from_checkpoint=...)`` (None: not resuming)."""
        if self.resumed is None:
            return None
        point = self.resumed.point
        self.trainer.restore_running_state(point.path, point.marker.diagnostics, point.marker.batches_scored)
        return str(point.path)


def check_can_kill_group() -> None:
    """:class:`UserError` unless this process's group is a session of its own (a sweep's worker
    process, its ranks included): a rehearsed crash kills the whole group, which must not hold the
    sweep or the user's shell."""
    if os.getpgrp() != os.getsid(0):
        raise UserError(
            "kill_after_checkpoint kills the cell's process group: run the cell in a worker process of "
            "its own (a sweep with --workers 2 or more), not in the sweep's or the shell's process"
        )


def _replay_sampler_epochs(dataloader: Any, global_step: int, accumulation: int) -> None:
    """Advance the training sampler through the epochs finished before ``global_step``.

    transformers resumes in epoch ``global_step // steps_per_epoch`` with a newly built sampler;
    TRL's sampler draws each epoch's order from its own seeded generator, so without this the
    resumed epoch would be dealt epoch 0's order. Each ``iter`` of a sampler is one epoch's draw.
    """
    steps_per_epoch = max(len(dataloader) // accumulation + int(len(dataloader) % accumulation > 0), 1)
    sampler = dataloader
    while getattr(sampler, "batch_sampler", None) is not None:
        sampler = sampler.batch_sampler
    sampler = getattr(sampler, "sampler", None)
    if sampler is None:
        return
    for _ in range(global_step // steps_per_epoch):
        next(iter(sampler), None)


def finish_checkpoints(folder: CellFolder, save: SaveMode) -> None:
    """The cell is complete: drop its training state. The checkpoints ``save`` keeps (every:N)
    become model-only; the others go, and so does TRL's model card unless ``save`` is every:N.
    Only the main process of a multi-process cell touches the folder."""
    from mrbench.engine.processes.distributed import is_main_process

    if not is_main_process():
        return
    for step, path in folder.step_checkpoints():
        if save.every and step % save.every == 0:
            _strip(path)
        else:
            shutil.rmtree(path, ignore_errors=True)
    if not save.every:
        (folder.root / "README.md").unlink(missing_ok=True)
