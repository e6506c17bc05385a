"""One sweep cell in its own process: forked by the sweep's cell server
(:mod:`mrbench.sweeps.cell_server`, which calls :func:`run_worker`), or started as
``python -m mrbench.sweeps.cell_process PAYLOAD.json`` where there is no server.

The payload (a :class:`~mrbench.core.cell_protocol.CellPayload`, written by :func:`cell_payload`
in JSON) names the spec class and the cell function by ``"module:attr"``, the tracking store,
experiment and parent run, the thread budget, the processes per cell and where to write the
outcome (a :class:`~mrbench.core.cell_protocol.WorkerOutcome`). A cell of more than one process
is started from here with ``accelerate launch``
(:func:`mrbench.engine.processes.distributed.launch_cell`); its rank 0 logs, and its result comes
back here. Exit codes: 0 FINISHED, 1 FAILED, 130 KILLED (SIGINT). A
Ray task runs the same :func:`run_payload` (:mod:`mrbench.sweeps.executors.ray`).

A worker must not outlive its sweep: if the sweep process dies (even by ``kill -9``) the worker
gets SIGINT, so its run ends KILLED and a resumed sweep runs the cell again instead of racing
an orphan that could finish the same cell twice. A forked worker watches its parent, the cell
server, which in turn dies with the sweep.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
import traceback
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from mrbench.core.cell_protocol import EXIT_CODES, STATUSES, CellPayload, WorkerOutcome
from mrbench.core.errors import UserError
from mrbench.core.records import RecordError
from mrbench.core.registry import import_target
from mrbench.engine.processes.threads import apply_threads
from mrbench.kit.children import die_with_parent
from mrbench.sweeps.cell import Cell, CellContext

EXIT_FINISHED, EXIT_FAILED, EXIT_KILLED = (EXIT_CODES[status] for status in STATUSES)


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _interrupt_once(signum: int, frame: Any) -> None:
    """Stop-signal handler: raise KeyboardInterrupt once, then ignore SIGINT, SIGTERM and SIGHUP.

    SIGTERM reaches a worker directly when a scheduler (SLURM, Kubernetes, ``docker stop``)
    signals every process of the job; its run must end KILLED then too, not stay RUNNING.

    A worker often gets two: the parent-death signal and its parent watch (die_with_parent) both send
    one, and a Ctrl-C reaches the sweep's whole process group while the sweep also signals its
    workers. A second KeyboardInterrupt would land inside the handler that ends the run KILLED
    and leave it RUNNING in the store.
    """
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    raise KeyboardInterrupt


def check_processes_per_cell(
    cells: list[Cell], processes: int, distributed: str, *, here: bool = True
) -> None:
    """UserError, before anything runs, when ``processes`` > 1 cannot train ``cells``: with ``here``
    (the cells run on this machine, not on Ray's nodes) a GPU-only preset without CUDA or fewer GPUs
    than processes (named with the first cell); a cell whose ``train.prompts_per_step`` the
    processes cannot share."""
    if processes <= 1:
        return
    from mrbench.engine.processes.distributed import check_processes, per_process

    try:
        check_processes(processes, distributed, here=here)
    except UserError as exc:
        raise UserError(f"cell {cells[0].label}: {exc}" if cells else str(exc)) from None
    for cell in cells:
        train = getattr(cell.spec, "train", None)
        if train is not None:
            try:
                per_process(train.prompts_per_step, processes)
            except UserError as exc:
                raise UserError(f"cell {cell.label}: {exc}") from None


def failure_status(exc: Exception) -> str:
    """How a cell that raised ``exc`` ended: KILLED when a write found no room (its run ended KILLED
    and resumes from its last checkpoint, :mod:`mrbench.engine.runs.run_guard`), else FAILED."""
    from mrbench.store.faults import OutOfRoom

    return "KILLED" if isinstance(exc, OutOfRoom) else "FAILED"


def cell_payload(
    cell: Cell, ctx: CellContext, fn_path: str, threads: int, result: Path | None
) -> dict[str, Any]:
    """:func:`payload_of`'s JSON: what a worker process or Ray task is handed."""
    return payload_of(cell, ctx, fn_path, threads, result).to_json()


def payload_of(cell: Cell, ctx: CellContext, fn_path: str, threads: int, result: Path | None) -> CellPayload:
    """What a worker (process or Ray task) needs to run ``cell``.

    ``fn_path`` is the cell function's ``"module:attr"``; ``threads`` the worker's thread budget;
    ``result`` where :func:`main` writes the outcome (None for a Ray task, which returns it).
    """
    kwargs = {
        "tracking_uri": ctx.tracking_uri,
        "experiment": ctx.experiment,
        "parent_run_id": ctx.parent_run_id,
        "sweep": ctx.sweep,
        "progress": False,
    }
    return CellPayload.of(
        cell.spec,
        fn_path,
        kwargs,
        threads=threads,
        processes_per_cell=getattr(ctx, "processes_per_cell", 1),
        distributed=getattr(ctx, "distributed", "ddp"),
        result=str(result) if result else None,
        parent_pid=os.getpid(),
    )


def run_payload(payload: CellPayload, *, fork_ranks: bool = False) -> WorkerOutcome:
    """Run the cell described by ``payload``; return how it ended.

    ``fork_ranks``: a multi-process cell's ranks may be forked from this process where that is safe
    (:mod:`mrbench.engine.processes.rank_fork`): a worker process of its own, not a Ray task (whose worker
    holds threads). KeyboardInterrupt propagates (the cell function has ended its run KILLED).
    """
    threads = payload.threads
    if threads:  # before the cell function imports torch: its pool starts at this size
        apply_threads(threads, given=True)
    spec_cls = import_target(payload.spec_class)
    cell_fn = import_target(payload.cell_fn)
    if threads:  # a cell function module that imported torch already: resize its pool
        apply_threads(threads, given=True)
    spec = spec_cls.from_dict(payload.spec)
    started = time.perf_counter()
    kwargs = payload.cell_kwargs()
    try:
        if payload.processes_per_cell > 1:
            from mrbench.engine.processes.distributed import launch_cell

            outcome = launch_cell(
                spec,
                processes=payload.processes_per_cell,
                distributed=payload.distributed or "ddp",
                cell_fn=payload.cell_fn,
                threads=threads,
                fork=fork_ranks,
                **kwargs,
            )
            result: Any = SimpleNamespace(**outcome)
        else:
            result = cell_fn(spec, **kwargs)
    except KeyboardInterrupt:
        raise
    except Exception as exc:
        traceback.print_exc()  # into the cell's log file
        return WorkerOutcome(
            failure_status(exc), None, time.perf_counter() - started, f"{type(exc).__name__}: {exc}"[:2000]
        )
    return WorkerOutcome(
        getattr(result, "status", "FINISHED"), getattr(result, "run_id", None), time.perf_counter() - started
    )


def main(argv: list[str] | None = None) -> int:
    """Entry point; see the module docstring."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m mrbench.sweeps.cell_process PAYLOAD.json", file=sys.stderr)
        return 2
    return run_worker(read_payload(Path(args[0])))


def read_payload(path: Path) -> CellPayload:
    """The payload in file ``path`` (:class:`~mrbench.core.records.RecordError` when it is not one)."""
    try:
        data = json.loads(path.read_text())
    except ValueError as exc:
        raise RecordError(f"cell payload {path} is not JSON ({exc})") from None
    return CellPayload.from_json(data, f"cell payload {path}")


def run_worker(payload: CellPayload, parent_pid: int | None = None) -> int:
    """Run ``payload``'s cell as this whole process's work and return its exit code: 0 FINISHED,
    1 FAILED, 130 KILLED; the outcome goes to ``payload.result`` when it names a file.

    ``parent_pid``: the process this one must not outlive (default: the payload's: the sweep for
    ``python -m``; the cell server for a forked cell, :mod:`mrbench.sweeps.cell_server`); None in
    both: no watch.
    """
    # SIGINT is how a sweep stops its workers (explicitly, and as the parent-death signal). A
    # sweep started in the background inherits SIGINT ignored and passes that on; without this,
    # a worker would outlive a killed sweep and finish its cell a second time after a resume.
    for sig in STOP_SIGNALS:
        signal.signal(sig, _interrupt_once)
    watched = parent_pid or payload.parent_pid
    if watched:
        # SIGINT: the run ends KILLED, as on Ctrl-C; the watch gives up after 30 s with exit 130.
        die_with_parent(watched, signal.SIGINT, give_up_s=30.0, exit_code=EXIT_KILLED)
    try:
        outcome = run_payload(payload, fork_ranks=True)  # this process is the cell's alone
    except KeyboardInterrupt:
        outcome = WorkerOutcome("KILLED", None, 0.0, "interrupted")
    if payload.result:
        Path(payload.result).write_text(json.dumps(outcome.to_json()))
    if outcome.status == "FAILED":
        print(f"cell failed: {outcome.error}", file=sys.stderr)
    return outcome.exit_code


if __name__ == "__main__":
    sys.exit(main())
