"""``--executor ray``: every cell is one Ray task, on a local Ray or a cluster (``--ray-address``).

Ray is an optional extra (``pip install 'mrbench[ray]'``) imported only here, on use. Each task
runs :func:`mrbench.sweeps.cell_process.run_payload` — the same code path as a worker process —
and asks Ray for ``cpus_per_cell`` CPUs and ``gpus_per_cell`` GPUs (at least one per process for
a cell of several processes that uses GPUs: :func:`mrbench.engine.processes.devices.ray_gpus`). Ray's own
rule decides which worker process runs it: a cell with GPUs gets a fresh process, so that no GPU
memory carries over from one cell to the next; CPU-only cells reuse idle workers, as the local
executor runs its cells one after another in one process, so that only a worker's first cell pays
the imports.

What a task sees of this process: the cell function and spec class by their ``"module:attr"``
paths (importable on every node: installed there, or on the ``PYTHONPATH`` given here), and this
process's ``PYTHONPATH``, ``MRBENCH_*`` and ``MLFLOW_*`` variables, forwarded through the task's
runtime environment. Everything else (``HF_HOME``, ``CUDA_*``, cloud credentials) is the node's own,
as set where ``ray start`` ran. Cells log to the sweep's tracking URI, which on a multi-machine
cluster must be a tracking server every node can reach (an ``http(s)://`` URI), not a local sqlite
file; see ``docs/cluster.md``.

Failures: a task whose cell raises is reported FAILED with the error, and the other cells go on.
A task whose worker process or node dies (killed, out of memory, node lost) is not retried: it is
reported FAILED, and its run, which no process will end any more, is ended FAILED with the reason,
so that a rerun runs the cell again like any failed one.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

from mrbench.core.cell_protocol import CellPayload, WorkerOutcome
from mrbench.core.env import PREFIX
from mrbench.core.errors import UserError
from mrbench.core.records import RecordError
from mrbench.engine.processes.devices import ray_gpus
from mrbench.engine.processes.threads import threads_for
from mrbench.store.client import tracking_client
from mrbench.store.runs import end_runs, running_runs
from mrbench.sweeps.cell import Cell, CellContext, CellOutcome, callable_path, error_text
from mrbench.sweeps.cell_process import cell_payload, run_payload
from mrbench.sweeps.progress import SweepProgress

FORWARDED_PREFIXES = (PREFIX, "MLFLOW_")
"""Environment variables of the sweep process that every task gets too (besides ``PYTHONPATH``)."""
CANCEL_GRACE_S = 30.0  # how long cancelled cells may take to end their runs KILLED


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise UserError(
            "--executor ray needs Ray, which is an optional extra: pip install 'mrbench[ray]'"
        ) from None
    return ray


def _ray_cell(payload: dict[str, Any]) -> dict[str, Any]:
    """The Ray task body: run one cell from its payload (a :class:`CellPayload`'s JSON, see
    :mod:`mrbench.sweeps.cell_process`); return its :class:`WorkerOutcome`'s JSON."""
    return run_payload(CellPayload.from_json(payload, "the cell's Ray task payload")).to_json()


def _is_shared_uri(uri: str) -> bool:
    return uri.startswith(("http://", "https://", "databricks", "postgresql", "mysql", "mssql"))


def task_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The variables of ``environ`` (default: this process's) forwarded to every cell's task.

    >>> task_env({"PYTHONPATH": "/plugins", "MRBENCH_RESULTS": "/r", "HOME": "/root"})
    {'PYTHONPATH': '/plugins', 'MRBENCH_RESULTS': '/r'}
    """
    environ = dict(os.environ) if environ is None else environ
    return {k: v for k, v in environ.items() if k == "PYTHONPATH" or k.startswith(FORWARDED_PREFIXES)}


def fits_somewhere(nodes: list[dict[str, Any]], cpus: float, gpus: float) -> bool:
    """Whether a live node among ``nodes`` (as :func:`ray.nodes` lists them) has ``cpus`` CPUs and
    ``gpus`` GPUs in all: Ray cannot place a cell that asks for more than any node has.

    >>> node = {"Alive": True, "Resources": {"CPU": 8.0, "GPU": 1.0}}
    >>> fits_somewhere([node], 4, 1), fits_somewhere([node], 4, 2)
    (True, False)
    """
    return any(
        node.get("Alive")
        and node.get("Resources", {}).get("CPU", 0.0) >= cpus
        and node.get("Resources", {}).get("GPU", 0.0) >= gpus
        for node in nodes
    )


def run_ray(
    cells: list[Cell],
    ctx: CellContext,
    progress: SweepProgress,
    *,
    address: str | None = None,
    gpus_per_cell: float = 0.0,
    cpus_per_cell: float = 1.0,
) -> Iterator[CellOutcome]:
    """Submit every cell as a Ray task and yield outcomes as they complete.

    Uses the already-initialised Ray if there is one, else ``ray.init(address=address)``
    (``None`` starts a local Ray, shut down again when the cells are done). Each cell is claimed
    when it is submitted (Ray starts tasks as resources free up, out of this process's sight). On
    KeyboardInterrupt the pending tasks are cancelled (a running cell gets KeyboardInterrupt and
    ends its run KILLED) before the interrupt propagates.
    """
    ray = _import_ray()
    if not cells:
        return  # nothing to run: no need to start or join a Ray
    if address and not _is_shared_uri(ctx.tracking_uri):
        progress.console.print(
            f"[yellow]warning[/yellow]: tracking URI {ctx.tracking_uri!r} is local to this machine; cells on "
            "other Ray nodes cannot log to it. Use --tracking-uri http://<server> for a cluster."
        )
    started_here = not ray.is_initialized()
    if started_here:
        try:
            ray.init(address=address, include_dashboard=False, log_to_driver=True)
        except ConnectionError as exc:
            raise UserError(f"cannot connect to the Ray cluster at {address!r}: {exc}") from None
    try:
        yield from _run_tasks(ray, cells, ctx, progress, gpus_per_cell, cpus_per_cell)
    finally:
        if started_here:
            ray.shutdown()


def _run_tasks(
    ray: Any,
    cells: list[Cell],
    ctx: CellContext,
    progress: SweepProgress,
    gpus_per_cell: float,
    cpus_per_cell: float,
) -> Iterator[CellOutcome]:
    # A cell of several processes that uses GPUs gets one per process, whatever gpus_per_cell says.
    gpus_per_cell = ray_gpus(gpus_per_cell, getattr(ctx, "processes_per_cell", 1))
    options: dict[str, Any] = {
        "num_cpus": cpus_per_cell,
        "num_gpus": gpus_per_cell,
        "max_retries": 0,  # a rerun of the sweep resumes a lost cell; a retry here would race its run
    }
    env = task_env()
    if env:
        options["runtime_env"] = {"env_vars": env}
    remote = ray.remote(**options)(_ray_cell)
    if not fits_somewhere(ray.nodes(), cpus_per_cell, gpus_per_cell):
        # Ray would hold such tasks pending, silently, until a node that fits joins (an autoscaler
        # may add one), so this is a warning, not an error.
        progress.console.print(
            f"[yellow]warning[/yellow]: no node of the Ray cluster has {cpus_per_cell:g} CPU(s) and "
            f"{gpus_per_cell:g} GPU(s) (cpus_per_cell, gpus_per_cell): the cells wait until one joins"
        )
    fn_path = callable_path(ctx.cell_fn)
    refs: dict[Any, tuple[Cell, float]] = {}
    for cell in cells:
        skipped = ctx.held(cell)
        if skipped is not None:
            progress.skip(skipped)
            yield skipped
            continue
        # The thread policy (mrbench.engine.processes.threads): one for a tiny model, else the task's CPUs.
        threads = threads_for(getattr(cell.spec, "model", ""), share=max(1, int(cpus_per_cell)))
        ref = remote.remote(cell_payload(cell, ctx, fn_path, threads, None))
        refs[ref] = (cell, time.perf_counter())
        progress.start(cell)
    pending = list(refs)
    try:
        while pending:
            ready, pending = ray.wait(pending, num_returns=1, timeout=1.0)
            for ref in ready:
                cell, t0 = refs[ref]
                outcome = _outcome(ray, ref, cell, time.perf_counter() - t0)
                if outcome.status == "FAILED" and outcome.run_id is None:
                    _end_lost_runs(ctx, cell, outcome.error or "the cell's Ray task failed")
                progress.finish(outcome)
                yield outcome
    except BaseException:
        for ref in pending:
            ray.cancel(ref)
        if pending:
            # Give cancelled cells time to end their runs KILLED before the sweep marks leftovers.
            ray.wait(pending, num_returns=len(pending), timeout=CANCEL_GRACE_S)
        raise


def _outcome(ray: Any, ref: Any, cell: Cell, wall_s: float) -> CellOutcome:
    try:
        data = ray.get(ref)
    except ray.exceptions.TaskCancelledError:
        return CellOutcome(cell, "KILLED", None, wall_s, "cancelled")
    except ray.exceptions.RayTaskError as exc:
        cause = exc.cause if getattr(exc, "cause", None) is not None else exc
        status = "KILLED" if isinstance(cause, KeyboardInterrupt) else "FAILED"
        return CellOutcome(cell, status, None, wall_s, error_text(cause))
    except ray.exceptions.RayError as exc:  # the worker process or its node died
        return CellOutcome(cell, "FAILED", None, wall_s, error_text(exc))
    try:
        ended = WorkerOutcome.from_json(data, "the cell's Ray task outcome")
    except RecordError as exc:
        return CellOutcome(cell, "FAILED", None, wall_s, str(exc))
    return CellOutcome(cell, ended.status, ended.run_id, ended.wall_s, ended.error)


def _end_lost_runs(ctx: CellContext, cell: Cell, error: str) -> None:
    """End FAILED, with ``error``, the RUNNING run(s) of ``cell`` under this invocation's parent run:
    left by a task whose process died, they would otherwise stay RUNNING until the next invocation.
    Ray's word that the task is over decides, not the runs' liveness tags: Ray keeps a worker process
    after its task, and a remote node's last heartbeat is younger than the staleness bound."""
    client = tracking_client(ctx.tracking_uri)
    experiment = client.get_experiment_by_name(ctx.experiment)
    if experiment is None:
        return
    runs = running_runs(client, experiment.experiment_id, cell.key, parent_run_id=ctx.parent_run_id)
    end_runs(client, runs, "FAILED", error)
