"""Where a cell keeps its trained policy, and what its run could not log while the store was down.

One folder per run key under the results folder — never in git (``results/`` is ignored) and
never an MLflow artifact (a policy can be gigabytes)::

    <results>/checkpoints/<run_key>/
        final/               the trained policy and its tokenizer (save "final", the default)
        checkpoint-<step>/   while the cell trains: its training checkpoints (policy, optimizer,
                             scheduler, RNG state, step, and mrbench-resume.json naming its run;
                             see mrbench.engine.cell.resume); once it is FINISHED, only those of save
                             "every:N" stay, model only
        README.md            TRL's model card, written with the step checkpoints (kept with "every:N")
        pending/record.json  what the run could not log past the retry bound (only after an outage)
        pending/<artifact>   the artifact files that record names

The run names ``final/`` in its ``checkpoint_dir`` param and logs its size as
``checkpoint/size_mb`` (:mod:`mrbench.core.layout`). Size note: a policy takes about 2 bytes per
parameter in bf16 and 4 in fp32 (a 7B model's ``final/`` is ~15 GB in bf16), and ``every:N`` keeps
one more per N steps; size the disk, or save ``none``. A run key has one folder: running the cell
again replaces its checkpoint.

``record.json`` is a :class:`mrbench.core.cell_records.PendingRecord`
(:meth:`CellFolder.write_pending`, :meth:`CellFolder.read_pending`). A moved results folder: it also
names the results folder it was written in, and reading it in another one (the folder was moved)
re-roots its paths under that folder — the store it names when that was the folder's own
``mlflow.db``, the ``checkpoint_dir`` of its result and of its pending params — so the rerun
finishes the run in the moved store (see :mod:`mrbench.store.local`).
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from mrbench.core.cell_records import PendingRecord
from mrbench.core.errors import UserError
from mrbench.core.model_marker import ModelMarker
from mrbench.core.ranks import is_main_process
from mrbench.core.results_layout import STEP_PREFIX, CellPaths
from mrbench.store.faults import require_room
from mrbench.store.local import results_dir
from mrbench.store.uri import store_uri

SAVE_MODES = "none | final | every:N"


@dataclass(frozen=True)
class SaveMode:
    """What a cell keeps of its trained policy: nothing, the final one, or also one every ``every`` steps.

    >>> parse_save("every:10"), str(parse_save("final"))
    (SaveMode(final=True, every=10), 'final')
    """

    final: bool
    every: int = 0

    def __str__(self) -> str:
        if self.every:
            return f"every:{self.every}"
        return "final" if self.final else "none"


def parse_save(text: str) -> SaveMode:
    """``"none"``, ``"final"`` or ``"every:N"`` (N ≥ 1: a checkpoint every N steps, and the final one)."""
    value = text.strip().lower()
    if value in ("none", "final"):
        return SaveMode(final=value == "final")
    kind, _, every = value.partition(":")
    if kind == "every" and every.isdigit() and int(every) >= 1:
        return SaveMode(final=True, every=int(every))
    raise UserError(f"--save {text!r}: expected {SAVE_MODES} (N ≥ 1)")


@dataclass(frozen=True)
class CellFolder(CellPaths):
    """The checkpoint folder of one run key (see the module docstring for its layout)."""

    @classmethod
    def for_run_key(cls, run_key: str) -> CellFolder:
        """``<results>/checkpoints/<run_key>`` (not created until something is written)."""
        return cls(CellPaths.of(results_dir(), run_key).root)

    @classmethod
    def for_this_rank(cls, run_key: str) -> CellFolder:
        """:meth:`for_run_key` on rank 0, its :class:`ReplicaFolder` on the other ranks of a cell."""
        return rank_folder(cls.for_run_key(run_key))

    def read_pending(self) -> PendingRecord | None:
        """The pending record an earlier attempt left, or None; its paths re-rooted here when it was
        written in another results folder (see the module docstring). A record that cannot be read
        or is of another version: a :class:`~mrbench.core.records.RecordError` naming the file and
        the folder to delete."""
        record = PendingRecord.read(self.record_path)
        return record.rerooted(self.results, store_uri) if record is not None else None

    def write_pending(self, record: PendingRecord) -> Path:
        """Write ``record`` (naming this results folder) to :attr:`record_path`, atomically; return
        that path."""
        return replace(record, results_dir=str(self.results)).write(self.record_path)

    def clear_pending(self) -> None:
        """Remove ``pending/`` (and the cell folder when nothing else is in it)."""
        shutil.rmtree(self.pending, ignore_errors=True)
        if self.root.is_dir() and not any(self.root.iterdir()):
            self.root.rmdir()

    def step_checkpoints(self) -> list[tuple[int, Path]]:
        """The ``checkpoint-<step>`` folders, ``(step, path)`` by increasing step."""
        if not self.root.is_dir():
            return []
        found = []
        for path in self.root.glob(STEP_PREFIX + "*"):
            step = path.name.removeprefix(STEP_PREFIX)
            if path.is_dir() and step.isdigit():
                found.append((int(step), path))
        return sorted(found)

    def clear_step_checkpoints(self) -> None:
        """Remove the ``checkpoint-<step>`` folders of an earlier attempt (a new one writes its own)."""
        if self.root.is_dir():
            for path in self.root.glob(STEP_PREFIX + "*"):
                shutil.rmtree(path, ignore_errors=True)


def save_policy(trainer: Any, folder: Path, *, task_settings: Mapping[str, Any] | None = None) -> Path:
    """Save ``trainer``'s model and tokenizer (``Trainer.save_model``) as ``folder``, replacing it whole.

    Written next to it first and then moved into place, so ``folder`` always holds one complete
    checkpoint (the earlier one until the new one is complete). ``task_settings``: the task settings
    the model was built for (:func:`mrbench.engine.models.catalog.model_task_settings`), kept in the
    folder's ``mrbench_model.json`` so that evaluating the checkpoint later uses them too.
    """
    partial = folder.with_name(folder.name + ".partial")
    if not getattr(trainer, "is_world_process_zero", lambda: True)():
        # Another rank of a multi-process cell: it joins the save (a sharded model is gathered by
        # every rank) and leaves the files to rank 0.
        trainer.save_model(str(partial))
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(partial, ignore_errors=True)
    weights = _weight_bytes(trainer)
    require_room(folder, _with_margin(weights), largest_file=weights, what="the trained policy")
    trainer.save_model(str(partial))
    if task_settings:
        ModelMarker(dict(task_settings)).write(partial)
    old = folder.with_name(folder.name + ".old")
    shutil.rmtree(old, ignore_errors=True)
    if folder.exists():
        folder.rename(old)
    partial.rename(folder)
    shutil.rmtree(old, ignore_errors=True)
    return folder


def require_room_for_checkpoint(trainer: Any, folder: Path) -> None:
    """:class:`~mrbench.store.faults.OutOfRoom` before ``trainer`` writes a training checkpoint into
    the cell folder ``folder`` if it would not fit on the disk (the previous one stays until the
    new one is complete, so both must fit) or its largest file would pass ``ulimit -f``.

    Its size: the largest ``checkpoint-<step>`` already in ``folder``; for the first one, the
    weights as stored plus the optimizer's state (Adam: two float32 tensors per trained
    parameter, read from the optimizer), plus a tenth and 1 MiB for the tokenizer and the rest.
    """
    weights = _weight_bytes(trainer)
    state = getattr(getattr(trainer, "optimizer", None), "state", None) or {}
    optimizer = sum(_tensor_bytes(values.values()) for values in state.values())
    if not optimizer:  # no step taken yet: Adam's two moments
        optimizer = 2 * 4 * sum(p.numel() for p in trainer.model.parameters() if p.requires_grad)
    written = CellFolder(folder).step_checkpoints()
    need = max((_size(path) for _, path in written), default=0) or _with_margin(weights + optimizer)
    require_room(folder, need, largest_file=max(weights, optimizer), what="a training checkpoint")


def _weight_bytes(trainer: Any) -> int:
    """The bytes of ``trainer``'s model's parameters as they are stored (0 without a model)."""
    model = getattr(trainer, "model", None)
    return _tensor_bytes(model.parameters()) if model is not None else 0


def _tensor_bytes(tensors: Any) -> int:
    return sum(t.numel() * t.element_size() for t in tensors if hasattr(t, "element_size"))


def _with_margin(n_bytes: int) -> int:
    return n_bytes + n_bytes // 10 + 2**20


def _size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def folder_size_mb(folder: Path) -> float:
    """Total size of the files under ``folder`` in MB (10⁶ bytes)."""
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 1e6


@dataclass(frozen=True)
class ReplicaFolder(CellFolder):
    """Rank > 0's view of the cell folder: same paths (TRL's per-rank files of a step checkpoint go
    there), but it reads no record and removes or writes nothing of rank 0's."""

    def read_pending(self) -> PendingRecord | None:
        return None

    def write_pending(self, record: PendingRecord) -> Path:
        return self.record_path

    def clear_pending(self) -> None:
        return None

    def clear_step_checkpoints(self) -> None:
        return None


def rank_folder(folder: CellFolder) -> CellFolder:
    """``folder`` on rank 0, its :class:`ReplicaFolder` on the other ranks."""
    return folder if is_main_process() else ReplicaFolder(folder.root)
