"""What crosses a process boundary to run one cell, as typed records: written and read only here.

A cell runs in another process than the one that decided to run it: a sweep's worker (a process
started as ``python -m mrbench.sweeps.cell_process``, a child forked by the sweep's cell server, a
Ray task) or a rank of a multi-process cell (started by ``accelerate launch`` or forked,
:mod:`mrbench.engine.processes.distributed`). Both are handed one :class:`CellPayload` (JSON, in a
file or as a Ray task's argument) and answer with a JSON record:

==========================  =====================================  ===============================
record                      written by                             read by
==========================  =====================================  ===============================
:class:`CellPayload`        the sweep's executors; a cell's        the worker; every rank
                            launcher (``launch_cell``)
:class:`WorkerOutcome`      a worker (``run_payload``)             the local and Ray executors
:class:`RankEnd`            each rank (rank 0 always, another      the launcher (``launch_cell``)
                            only when it failed or was stopped)
==========================  =====================================  ===============================

``from_json`` raises :class:`~mrbench.core.json_fields.RecordError` naming the record and the field
for anything it cannot read. Keys a record does not know are ignored.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from mrbench.core.json_fields import RecordError, mapping, optional, required

DEFAULT_CELL_FN = "mrbench.engine.cell.runner:run_cell"
"""The ``"module:attr"`` of the cell function a sweep and ``mrbench run`` run by default."""

FINISHED, FAILED, KILLED = "FINISHED", "FAILED", "KILLED"
STATUSES = (FINISHED, FAILED, KILLED)
"""How a cell that ran ended (its MLflow run's status)."""
EXIT_CODES = {FINISHED: 0, FAILED: 1, KILLED: 130}
"""A worker process's exit code for each status (130: as a process ended by SIGINT)."""


class CellSpec(Protocol):
    """What sweeps and launchers use of a cell's spec (:class:`mrbench.engine.config.RunSpec`, or a
    test's stand-in): the grid coordinates, the run key, and a JSON form its class reads back."""

    method: str
    task: str
    model: str
    seed: int

    def run_key(self) -> str: ...

    def to_dict(self) -> dict[str, Any]: ...


def class_path(cls: type) -> str:
    """``"module:qualname"`` of ``cls``, as :func:`mrbench.core.registry.import_target` reads it.

    >>> class_path(RecordError)
    'mrbench.core.json_fields:RecordError'
    """
    return f"{cls.__module__}:{cls.__qualname__}"


@dataclass(frozen=True)
class CellTracking:
    """Where a cell logs: the cell function's ``tracking_uri``, ``experiment``, ``parent_run_id`` and
    ``sweep`` keyword arguments (``parent_run_id``/``sweep``: None outside a sweep)."""

    tracking_uri: str
    experiment: str
    parent_run_id: str | None = None
    sweep: str | None = None

    KEYS: ClassVar[tuple[str, ...]] = ("tracking_uri", "experiment", "parent_run_id", "sweep")

    def kwargs(self) -> dict[str, Any]:
        return {key: getattr(self, key) for key in self.KEYS}


@dataclass(frozen=True)
class CellPayload:
    """Everything a worker or a rank needs to run one cell.

    Attributes:
        spec: the spec's :meth:`~CellSpec.to_dict`; ``spec_class``: its class's ``"module:attr"``
            (whose ``from_dict`` reads it back).
        cell_fn: the cell function's ``"module:attr"``.
        tracking: where the cell logs (None: the cell function takes no such arguments, as a
            test's toy cell).
        options: the cell function's other keyword arguments, JSON values (``progress``, and what
            ``mrbench run`` adds: ``save``, ``checkpoint_every``, ``tracking_retry_s``, …).
        threads: the cell's thread budget (0: the process's default).
        processes_per_cell: the processes that train the cell (> 1: a worker launches them).
        distributed: the ``accelerate`` preset of a multi-process cell.
        result: the file the outcome goes to (None: returned, as a Ray task does). A rank other
            than 0 writes ``<stem>-rank<r>.json`` beside it.
        parent_pid: the process this one must not outlive (a worker's sweep or cell server, a
            rank's launcher); None: no watch.
    """

    spec: Mapping[str, Any]
    spec_class: str
    cell_fn: str = DEFAULT_CELL_FN
    tracking: CellTracking | None = None
    options: Mapping[str, Any] = field(default_factory=dict)
    threads: int = 0
    processes_per_cell: int = 1
    distributed: str = "ddp"
    result: str | None = None
    parent_pid: int | None = None

    @classmethod
    def of(cls, spec: CellSpec, cell_fn: str, kwargs: Mapping[str, Any], **fields: Any) -> CellPayload:
        """The payload that runs ``cell_fn(spec, **kwargs)``; ``fields``: the other attributes.
        ``kwargs`` with ``tracking_uri`` and ``experiment`` make :attr:`tracking`."""
        options = dict(kwargs)
        tracking = None
        if "tracking_uri" in options and "experiment" in options:
            tracking = CellTracking(*(options.pop(key, None) for key in CellTracking.KEYS))
        return cls(spec.to_dict(), class_path(type(spec)), cell_fn, tracking, options, **fields)

    def cell_kwargs(self) -> dict[str, Any]:
        """The cell function's keyword arguments: :attr:`tracking`'s, then :attr:`options`."""
        return {**(self.tracking.kwargs() if self.tracking else {}), **self.options}

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "spec": dict(self.spec),
            "spec_class": self.spec_class,
            "cell_fn": self.cell_fn,
        }
        if self.tracking is not None:
            data |= self.tracking.kwargs()
        return data | {
            "options": dict(self.options),
            "threads": self.threads,
            "processes_per_cell": self.processes_per_cell,
            "distributed": self.distributed,
            "result": self.result,
            "parent_pid": self.parent_pid,
        }

    @classmethod
    def from_json(cls, data: Any, what: str) -> CellPayload:
        """Read a payload; :class:`RecordError` naming ``what`` and the field it cannot read."""
        payload = mapping(data, what)
        tracking = None
        if payload.get("tracking_uri") is not None or payload.get("experiment") is not None:
            tracking = CellTracking(
                required(payload, "tracking_uri", str, what),
                required(payload, "experiment", str, what),
                optional(payload, "parent_run_id", str, what, None),
                optional(payload, "sweep", str, what, None),
            )
        processes = optional(payload, "processes_per_cell", int, what, 1)
        if processes < 1:
            raise RecordError(f"{what}: 'processes_per_cell' should be at least 1, not {processes}")
        return cls(
            spec=dict(required(payload, "spec", Mapping, what)),
            spec_class=required(payload, "spec_class", str, what),
            cell_fn=optional(payload, "cell_fn", str, what, DEFAULT_CELL_FN),
            tracking=tracking,
            options=dict(optional(payload, "options", Mapping, what, {})),
            threads=optional(payload, "threads", int, what, 0),
            processes_per_cell=processes,
            distributed=optional(payload, "distributed", str, what, "ddp"),
            result=optional(payload, "result", str, what, None),
            parent_pid=optional(payload, "parent_pid", int, what, None),
        )


@dataclass(frozen=True)
class WorkerOutcome:
    """How a worker's cell ended: ``status`` (:data:`STATUSES`), its run (None when it failed
    before it had one, or was stopped), the seconds it ran, and the error that ended it."""

    status: str
    run_id: str | None = None
    wall_s: float = 0.0
    error: str | None = None

    @property
    def exit_code(self) -> int:
        """The worker process's exit code: 0 FINISHED, 130 KILLED (SIGINT), else 1."""
        return EXIT_CODES.get(self.status, 1)

    def to_json(self) -> dict[str, Any]:
        return {"status": self.status, "run_id": self.run_id, "wall_s": self.wall_s, "error": self.error}

    @classmethod
    def from_json(cls, data: Any, what: str) -> WorkerOutcome:
        outcome = mapping(data, what)
        status = required(outcome, "status", str, what)
        if status not in STATUSES:
            raise RecordError(f"{what}: 'status' should be one of {', '.join(STATUSES)}, not {status!r}")
        return cls(
            status,
            optional(outcome, "run_id", str, what, None),
            float(optional(outcome, "wall_s", (int, float), what, 0.0)),
            optional(outcome, "error", str, what, None),
        )


@dataclass(frozen=True)
class RankEnd:
    """How one rank of a multi-process cell ended: its cell function's ``result`` (rank 0, as a
    JSON object), or the ``error`` that ended it (``user_error``: a :class:`UserError`, whose
    message is the error; ``out_of_room``: an ``OutOfRoom``'s errno, strerror and filename), or
    ``interrupted`` (stopped: its run ended KILLED)."""

    result: Mapping[str, Any] | None = None
    error: str | None = None
    user_error: bool = False
    out_of_room: tuple[int | None, str | None, str | None] | None = None
    interrupted: bool = False

    def to_json(self) -> dict[str, Any]:
        if self.result is not None:
            return {"result": dict(self.result)}
        if self.error is not None:
            data: dict[str, Any] = {"error": self.error, "user_error": self.user_error}
            if self.out_of_room is not None:
                data["out_of_room"] = list(self.out_of_room)
            return data
        return {"interrupted": self.interrupted}

    @classmethod
    def from_json(cls, data: Any, what: str) -> RankEnd:
        end = mapping(data, what)
        room = optional(end, "out_of_room", list, what, None)
        if room is not None and len(room) != 3:
            raise RecordError(f"{what}: 'out_of_room' should be [errno, strerror, filename], not {room!r}")
        result = optional(end, "result", Mapping, what, None)
        return cls(
            result=dict(result) if result is not None else None,
            error=optional(end, "error", str, what, None),
            user_error=optional(end, "user_error", bool, what, False),
            out_of_room=tuple(room) if room is not None else None,  # type: ignore[arg-type]
            interrupted=optional(end, "interrupted", bool, what, False),
        )
