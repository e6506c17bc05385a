"""One sweep cell in its own process: forked by the sweep's cell server
(:mod:`mrbench.sweeps.cell_server`, which calls :func:`run_worker`), or started as
``python -m mrbench.sweeps.cell_process PAYLOAD.json`` where there is no server.

The payload (written by :func:`cell_payload`, in JSON) names the spec class and the cell function
by ``"module:attr"``, the tracking store, experiment and parent run, the thread budget, the
processes per cell and where to write the result. A cell of more than one process is started
from here with ``accelerate launch`` (:func:`mrbench.engine.processes.distributed.launch_cell`); its rank 0
logs, and its result comes back here. Exit codes: 0 FINISHED, 1 FAILED, 130 KILLED (SIGINT). A
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
import threading
import time
import traceback
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from mrbench.core.errors import UserError
from mrbench.core.registry import import_target
from mrbench.engine.processes.threads import apply_threads
from mrbench.sweeps.cell import Cell, CellContext

EXIT_FINISHED, EXIT_FAILED, EXIT_KILLED = 0, 1, 130


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _interrupt_once(signum: int, frame: Any) -> None:
    """Stop-signal handler: raise KeyboardInterrupt once, then ignore SIGINT, SIGTERM and SIGHUP.

    SIGTERM reaches a worker directly when a scheduler (SLURM, Kubernetes, ``docker stop``)
    signals every process of the job; its run must end KILLED then too, not stay RUNNING.

    A worker often gets two: the parent-death signal and the parent watcher below both send
    one, and a Ctrl-C reaches the sweep's whole process group while the sweep also signals its
    workers. A second KeyboardInterrupt would land inside the handler that ends the run KILLED
    and leave it RUNNING in the store.
    """
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    raise KeyboardInterrupt


def _die_with_parent(parent_pid: int) -> None:
    """Deliver SIGINT to this process when ``parent_pid`` exits."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            pr_set_pdeathsig = 1
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(pr_set_pdeathsig, signal.SIGINT)
        except OSError:
            pass

    # Portable fallback (and for a parent that died before prctl took effect): poll the parent.
    def watch() -> None:
        while True:
            if os.getppid() != parent_pid:
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(30)  # the run is being ended KILLED; if that hangs, give up hard
                os._exit(130)
            time.sleep(0.5)

    threading.Thread(target=watch, daemon=True, name="parent-watch").start()


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
    """What a worker (process or Ray task) needs to run ``cell``: JSON-ready.

    ``fn_path`` is the cell function's ``"module:attr"``; ``threads`` the worker's thread budget;
    ``result`` where :func:`main` writes the outcome (None for a Ray task, which returns it).
    """
    spec_cls = type(cell.spec)
    return {
        "processes_per_cell": getattr(ctx, "processes_per_cell", 1),
        "distributed": getattr(ctx, "distributed", "ddp"),
        "spec": cell.spec.to_dict(),
        "spec_class": f"{spec_cls.__module__}:{spec_cls.__qualname__}",
        "cell_fn": fn_path,
        "tracking_uri": ctx.tracking_uri,
        "experiment": ctx.experiment,
        "parent_run_id": ctx.parent_run_id,
        "sweep": ctx.sweep,
        "threads": threads,
        "result": str(result) if result else None,
        "parent_pid": os.getpid(),
    }


def run_payload(payload: dict[str, Any], *, fork_ranks: bool = False) -> dict[str, Any]:
    """Run the cell described by ``payload``; return ``{"status", "run_id", "wall_s", "error"}``.

    ``fork_ranks``: a multi-process cell's ranks may be forked from this process where that is safe
    (:mod:`mrbench.engine.processes.rank_fork`): a worker process of its own, not a Ray task (whose worker
    holds threads). KeyboardInterrupt propagates (the cell function has ended its run KILLED).
    """
    threads = int(payload.get("threads") or 0)
    if threads:  # before the cell function imports torch: its pool starts at this size
        apply_threads(threads, given=True)
    spec_cls = import_target(payload["spec_class"])
    cell_fn = import_target(payload["cell_fn"])
    if threads:  # a cell function module that imported torch already: resize its pool
        apply_threads(threads, given=True)
    spec = spec_cls.from_dict(payload["spec"])
    started = time.perf_counter()
    kwargs = {
        "tracking_uri": payload["tracking_uri"],
        "experiment": payload["experiment"],
        "parent_run_id": payload.get("parent_run_id"),
        "sweep": payload.get("sweep"),
        "progress": False,
    }
    processes = int(payload.get("processes_per_cell") or 1)
    try:
        if processes > 1:
            from mrbench.engine.processes.distributed import launch_cell

            outcome = launch_cell(
                spec,
                processes=processes,
                distributed=payload.get("distributed") or "ddp",
                cell_fn=payload["cell_fn"],
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
        return {
            "status": failure_status(exc),
            "run_id": None,
            "wall_s": time.perf_counter() - started,
            "error": f"{type(exc).__name__}: {exc}"[:2000],
        }
    return {
        "status": getattr(result, "status", "FINISHED"),
        "run_id": getattr(result, "run_id", None),
        "wall_s": time.perf_counter() - started,
        "error": None,
    }


def main(argv: list[str] | None = None) -> int:
    """Entry point; see the module docstring."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m mrbench.sweeps.cell_process PAYLOAD.json", file=sys.stderr)
        return 2
    payload = json.loads(Path(args[0]).read_text())
    parent = payload.get("parent_pid")
    return run_worker(payload, int(parent) if parent else None)


def run_worker(payload: dict[str, Any], parent_pid: int | None) -> int:
    """Run ``payload``'s cell as this whole process's work and return its exit code: 0 FINISHED,
    1 FAILED, 130 KILLED; the result goes to ``payload["result"]`` when it names a file.

    ``parent_pid``: the process this one must not outlive (the sweep for ``python -m``, the cell
    server for a forked cell, :mod:`mrbench.sweeps.cell_server`); None: no watch.
    """
    # SIGINT is how a sweep stops its workers (explicitly, and as the parent-death signal). A
    # sweep started in the background inherits SIGINT ignored and passes that on; without this,
    # a worker would outlive a killed sweep and finish its cell a second time after a resume.
    for sig in STOP_SIGNALS:
        signal.signal(sig, _interrupt_once)
    if parent_pid:
        _die_with_parent(parent_pid)
    result_path = Path(payload["result"]) if payload.get("result") else None
    try:
        result = run_payload(payload, fork_ranks=True)  # this process is the cell's alone
    except KeyboardInterrupt:
        result = {"status": "KILLED", "run_id": None, "wall_s": 0.0, "error": "interrupted"}
    if result_path is not None:
        result_path.write_text(json.dumps(result))
    if result["status"] == "FAILED":
        print(f"cell failed: {result['error']}", file=sys.stderr)
    return {"FINISHED": EXIT_FINISHED, "KILLED": EXIT_KILLED}.get(result["status"], EXIT_FAILED)


if __name__ == "__main__":
    sys.exit(main())
