"""The JSON records a cell keeps in the results folder, as typed records: written and read only here.

Three files of the results folder (:mod:`mrbench.core.results_layout`) hold JSON that a later
process reads back:

===============================  =====================  ========================================
file                             class                  written by → read by
===============================  =====================  ========================================
``checkpoints/<run key>/         :class:`PendingRecord`  a cell whose store went down
pending/record.json``                                   (``runner._finish``, through
                                                        ``CellFolder.write_pending``) → the
                                                        cell's rerun (``CellFolder.read_pending``)
``checkpoint-<step>/             :class:`ResumeMarker`   the checkpoint callback, last
mrbench-resume.json``                                   (``resume.CheckpointWriter``) → the
                                                        cell's next attempt (``resume``'s
                                                        ``checkpoint_problem``,
                                                        ``latest_resume_point``,
                                                        ``resumable_step``, ``reopen_run``)
``eval_cache/<key>.json``        :class:`EvalCacheEntry` the first cell to evaluate a model →
                                                        the later ones (``eval_cache.write`` /
                                                        ``eval_cache.read``)
===============================  =====================  ========================================

Each has ``to_json()`` / ``from_json(data, what)`` (:class:`~mrbench.core.json_fields.RecordError`
naming ``what`` and the field for anything it cannot read; keys it does not know are ignored) and
``read`` / ``write`` for its file, written atomically (a reader never sees half of one). The JSON
shapes are those mrbench has always written.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from mrbench.core import layout
from mrbench.core.json_fields import RecordError, is_kind, mapping, optional, required
from mrbench.core.results_layout import RESUME_MARKER, step_dir_name

RECORD_VERSION = 1
"""The version of :class:`PendingRecord` this mrbench writes and reads."""
MARKER_VERSION = 1
"""The version of :class:`ResumeMarker` this mrbench writes and reads."""

_CHECKPOINT_DIR = "checkpoint_dir"  # a cell result's field: where its trained policy is


def _atomic_write(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file beside it, renamed into place."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=path.suffix)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def fsync_path(path: Path) -> None:
    """Flush ``path`` (a file, or a folder's entries) to the disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# --- pending/record.json -----------------------------------------------------------------------


def _record_version_problem(record: Mapping[str, Any], what: str, remedy: str) -> None:
    version = record.get("version")
    if version != RECORD_VERSION:
        raise RecordError(
            f"{what} has record version {version!r}, this mrbench writes {RECORD_VERSION}{remedy}"
        )


@dataclass(frozen=True)
class LogBatch:
    """One ``log_batch`` call a cell could not send: metrics, params and tags (each may be empty).

    JSON: ``{"op": "log", "metrics": [[key, value, timestamp_ms, step], ...], "params": {key:
    value}, "tags": {key: value}}`` (an empty part is left out).
    """

    metrics: tuple[tuple[str, float, int, int], ...] = ()
    params: Mapping[str, str] = field(default_factory=dict)
    tags: Mapping[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"op": "log"}
        if self.metrics:
            data["metrics"] = [list(point) for point in self.metrics]
        if self.params:
            data["params"] = dict(self.params)
        if self.tags:
            data["tags"] = dict(self.tags)
        return data


@dataclass(frozen=True)
class LogArtifact:
    """One artifact a cell could not upload: ``path``, its artifact path, which is also where the
    file waits under the cell's spool folder. JSON: ``{"op": "artifact", "path": path}``."""

    path: str

    def to_json(self) -> dict[str, Any]:
        return {"op": "artifact", "path": self.path}


PendingEntry = LogBatch | LogArtifact
"""What :class:`~mrbench.engine.runs.tracking.RunLog` keeps while the store is down."""


def pending_entry(data: Any, what: str) -> PendingEntry:
    """The entry JSON object ``data`` holds; a :class:`RecordError` naming ``what`` and the field.

    >>> pending_entry({"op": "log", "metrics": [["loss", 0.5, 1000, 2]]}, "record.json")
    LogBatch(metrics=(('loss', 0.5, 1000, 2),), params={}, tags={})
    >>> pending_entry({"op": "send"}, "record.json")
    Traceback (most recent call last):
    ...
    mrbench.core.json_fields.RecordError: record.json: 'op' should be 'log' or 'artifact', not 'send'
    """
    entry = mapping(data, what)
    op = required(entry, "op", str, what)
    if op == "artifact":
        return LogArtifact(required(entry, "path", str, what))
    if op != "log":
        raise RecordError(f"{what}: 'op' should be 'log' or 'artifact', not {op!r}")
    points = []
    for i, point in enumerate(optional(entry, "metrics", list, what, [])):
        kinds = (str, (int, float), int, int)
        if not isinstance(point, list) or len(point) != 4 or not all(map(is_kind, point, kinds)):
            raise RecordError(f"{what}: metric {i} should be [key, value, timestamp_ms, step], not {point!r}")
        key, value, timestamp, step = point
        points.append((key, float(value), timestamp, step))
    params, tags = (optional(entry, part, Mapping, what, {}) for part in ("params", "tags"))
    for part, values in (("params", params), ("tags", tags)):
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in values.items()):
            raise RecordError(f"{what}: {part!r} should map names to strings, not {dict(values)!r}")
    return LogBatch(tuple(points), dict(params), dict(tags))


@dataclass(frozen=True)
class PendingRecord:
    """What a cell's run could not log while its store was down, for a rerun of the cell to log.

    Attributes:
        run_id: the run it belongs to.
        tracking_uri: the store that run is in (None only in records that never name one).
        result: the cell's result (``CellResult``'s fields; None only in records without one).
        pending: the log entries not sent yet, in order (:data:`PendingEntry`).
        results_dir: the results folder the record was written in (None: not recorded); reading
            it in another one re-roots its paths (:meth:`rerooted`).
    """

    run_id: str
    tracking_uri: str | None = None
    result: Mapping[str, Any] | None = None
    pending: tuple[PendingEntry, ...] = ()
    results_dir: str | None = None

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"run_id": self.run_id}
        if self.tracking_uri is not None:
            data["tracking_uri"] = self.tracking_uri
        if self.result is not None:
            data["result"] = dict(self.result)
        data["pending"] = [entry.to_json() for entry in self.pending]
        if self.results_dir is not None:
            data["results_dir"] = self.results_dir
        return data | {"version": RECORD_VERSION}

    @classmethod
    def from_json(cls, data: Any, what: str) -> PendingRecord:
        """Read a record of :data:`RECORD_VERSION`; :class:`RecordError` naming ``what`` and the field."""
        record = mapping(data, what)
        _record_version_problem(record, what, "")
        pending = optional(record, "pending", list, what, [])
        result = optional(record, "result", Mapping, what, None)
        return cls(
            run_id=required(record, "run_id", str, what),
            tracking_uri=optional(record, "tracking_uri", str, what, None),
            result=dict(result) if result is not None else None,
            pending=tuple(pending_entry(e, f"{what}: pending entry {i}") for i, e in enumerate(pending)),
            results_dir=optional(record, "results_dir", str, what, None),
        )

    @classmethod
    def read(cls, path: Path) -> PendingRecord | None:
        """The record at ``path`` (None when there is none); a :class:`RecordError` naming the file
        and the folder to delete when it cannot be read or is of another version."""
        folder = path.parent
        if not path.exists():
            return None
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise RecordError(f"cannot read {path}: {exc}; delete {folder} to run again") from None
        if isinstance(data, Mapping):
            remedy = f"; log it with the mrbench that wrote it, or delete {folder}"
            _record_version_problem(data, str(path), remedy)
        try:
            return cls.from_json(data, str(path))
        except RecordError as exc:
            raise RecordError(f"{exc}; delete {folder} to run again") from None

    def write(self, path: Path) -> Path:
        """Write the record to ``path``, atomically (its folder is made); return ``path``."""
        path.parent.mkdir(parents=True, exist_ok=True)
        _atomic_write(path, json.dumps(self.to_json(), indent=1))
        return path

    def rerooted(self, results: Path, store_uri: Callable[[Path], str]) -> PendingRecord:
        """This record read in results folder ``results``: when it was written in another one (the
        folder was moved), its paths under that one re-rooted under ``results``: the store when it
        was that folder's own (``store_uri(folder)``), the result's and the pending params'
        ``checkpoint_dir``.

        >>> record = PendingRecord("r", "sqlite:////a/mlflow.db", {"checkpoint_dir": "/a/c/final"},
        ...                        results_dir="/a")
        >>> moved = record.rerooted(Path("/b"), lambda p: f"sqlite:///{p}/mlflow.db")
        >>> moved.tracking_uri, moved.result["checkpoint_dir"], moved.results_dir
        ('sqlite:////b/mlflow.db', '/b/c/final', '/b')
        """
        if self.results_dir is None or Path(self.results_dir) == results:
            return self
        old = Path(self.results_dir)

        def moved(path: str) -> str:
            return str(results / Path(path).relative_to(old)) if Path(path).is_relative_to(old) else path

        tracking_uri = self.tracking_uri
        if tracking_uri == store_uri(old):
            tracking_uri = store_uri(results)
        result = self.result
        if result is not None and result.get(_CHECKPOINT_DIR):
            result = {**result, _CHECKPOINT_DIR: moved(result[_CHECKPOINT_DIR])}
        pending: list[PendingEntry] = []
        for entry in self.pending:
            if isinstance(entry, LogBatch) and layout.PARAM_CHECKPOINT_DIR in entry.params:
                params = entry.params
                params = {**params, layout.PARAM_CHECKPOINT_DIR: moved(params[layout.PARAM_CHECKPOINT_DIR])}
                entry = replace(entry, params=params)
            pending.append(entry)
        return replace(
            self, tracking_uri=tracking_uri, result=result, pending=tuple(pending), results_dir=str(results)
        )


# --- checkpoint-<step>/mrbench-resume.json -----------------------------------------------------


@dataclass(frozen=True)
class ResumeMarker:
    """mrbench's file in a training checkpoint, written last: the checkpoint is complete once it
    exists (see :mod:`mrbench.engine.cell.resume`).

    Attributes:
        run_key, run_id, tracking_uri, experiment_id: the cell and the run it belongs to.
        step: the checkpoint's step (its folder is ``checkpoint-<step>``).
        processes: the processes that wrote it (one RNG state each).
        files: every other file of the checkpoint (path relative to it) → its size in bytes.
        diagnostics: mrbench's running diagnostics (the trainer's accumulator as JSON).
        batches_scored: the batches the trainer had scored.

    >>> marker = ResumeMarker("k", "r", "sqlite:///x.db", "1", 4, 1, {"scheduler.pt": 3}, {}, 8)
    >>> ResumeMarker.from_json(marker.to_json(), RESUME_MARKER) == marker
    True
    """

    run_key: str
    run_id: str
    tracking_uri: str
    experiment_id: str
    step: int
    processes: int = 1
    files: Mapping[str, int] = field(default_factory=dict)
    diagnostics: Any = None
    batches_scored: int = 0

    @property
    def folder_name(self) -> str:
        """``checkpoint-<step>``: the name of the folder it belongs in."""
        return step_dir_name(self.step)

    def to_json(self) -> dict[str, Any]:
        return {
            "version": MARKER_VERSION,
            "run_key": self.run_key,
            "run_id": self.run_id,
            "tracking_uri": self.tracking_uri,
            "experiment_id": self.experiment_id,
            "step": self.step,
            "processes": self.processes,
            "files": dict(self.files),
            "trainer": {"diagnostics": self.diagnostics, "batches_scored": self.batches_scored},
        }

    @classmethod
    def from_json(cls, data: Any, what: str) -> ResumeMarker:
        """Read a marker of :data:`MARKER_VERSION`; :class:`RecordError` naming ``what`` and the field."""
        marker = mapping(data, what)
        if marker.get("version") != MARKER_VERSION:
            raise RecordError(
                f"{what} has version {marker.get('version')!r}, this mrbench reads {MARKER_VERSION}"
            )
        files = required(marker, "files", Mapping, what)
        for name, size in files.items():
            if not is_kind(size, int):
                raise RecordError(f"{what}: 'files' gives {name!r} the size {size!r}, not a number of bytes")
        trainer = required(marker, "trainer", Mapping, what)
        if "diagnostics" not in trainer:
            raise RecordError(f"{what}: 'trainer' has no 'diagnostics'")
        return cls(
            run_key=required(marker, "run_key", str, what),
            run_id=required(marker, "run_id", str, what),
            tracking_uri=required(marker, "tracking_uri", str, what),
            experiment_id=required(marker, "experiment_id", str, what),
            step=required(marker, "step", int, what),
            processes=optional(marker, "processes", int, what, 1),
            files={str(name): size for name, size in files.items()},
            diagnostics=trainer["diagnostics"],
            batches_scored=required(trainer, "batches_scored", int, f"{what}: 'trainer'"),
        )

    @classmethod
    def read(cls, checkpoint: Path) -> ResumeMarker:
        """The marker of the checkpoint folder ``checkpoint``; a :class:`RecordError` naming the
        marker (``… is unreadable``, or the field) when it cannot be read."""
        try:
            data = json.loads((checkpoint / RESUME_MARKER).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            raise RecordError(f"{RESUME_MARKER} is unreadable") from None
        return cls.from_json(data, RESUME_MARKER)

    def write(self, checkpoint: Path) -> Path:
        """Write the marker into ``checkpoint``, atomically and durably (the marker, then the
        folder, synced to disk): last, once the files it names are synced."""
        path = checkpoint / RESUME_MARKER
        partial = path.with_name(path.name + ".partial")
        partial.write_text(json.dumps(self.to_json()), encoding="utf-8")
        fsync_path(partial)
        partial.replace(path)
        fsync_path(checkpoint)
        return path


# --- eval_cache/<key>.json ---------------------------------------------------------------------


@dataclass(frozen=True)
class EvalCacheEntry:
    """A pre-training evaluation kept for reuse: its metrics, its samples, and the run that
    computed it (:mod:`mrbench.engine.evaluation.eval_cache`).

    >>> entry = EvalCacheEntry({"exact_match": 0.5}, [{"id": "a"}], "run-1")
    >>> EvalCacheEntry.from_json(entry.to_json(), "entry") == entry
    True
    """

    metrics: dict[str, float]
    samples: list[dict[str, Any]]
    run_id: str
    """The run that computed it."""

    def to_json(self) -> dict[str, Any]:
        return {"metrics": self.metrics, "samples": self.samples, "run_id": self.run_id}

    @classmethod
    def from_json(cls, data: Any, what: str) -> EvalCacheEntry:
        entry = mapping(data, what)
        metrics = required(entry, "metrics", Mapping, what)
        for name, value in metrics.items():
            if not is_kind(value, (int, float)):
                raise RecordError(f"{what}: metric {name!r} is {value!r}, not a number")
        samples = required(entry, "samples", list, what)
        run_id = required(entry, "run_id", str, what)
        if not run_id:
            raise RecordError(f"{what}: 'run_id' is empty")
        return cls(
            dict(metrics),
            [dict(mapping(s, f"{what}: sample {i}")) for i, s in enumerate(samples)],
            run_id,
        )

    @classmethod
    def read(cls, path: Path) -> EvalCacheEntry | None:
        """The entry at ``path``; None when it is absent or damaged (evaluate again, and overwrite it).

        >>> EvalCacheEntry.read(Path("/no/such/entry.json")) is None
        True
        """
        try:
            return cls.from_json(json.loads(path.read_text(encoding="utf-8")), str(path))
        except (OSError, ValueError, RecordError):
            return None

    def write(self, path: Path) -> Path:
        """Write the entry to ``path``, atomically (its folder is made); return ``path``."""
        path.parent.mkdir(parents=True, exist_ok=True)
        _atomic_write(path, json.dumps(self.to_json()))
        return path
