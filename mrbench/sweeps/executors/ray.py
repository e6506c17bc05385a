"""``--executor ray``: every cell is one Ray task, on a local Ray or a cluster (``--ray-address``).

Ray is an optional extra (``pip install 'mrbench[ray]'``) imported only here, on use. Each task
runs :func:`mrbench.sweeps.cell_process.run_payload` — the same code path as a worker process — and
logs to the sweep's tracking URI, which on a multi-machine cluster must be a tracking server
every node can reach (an ``http(s)://`` URI), not a local sqlite file. A cell that needs several
GPUs asks for them with ``gpus_per_cell`` and can launch ``accelerate`` itself.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from mrbench.core.errors import UserError
from mrbench.sweeps.cell import Cell, CellContext, CellOutcome, callable_path
from mrbench.sweeps.cell_process import cell_payload, run_payload
from mrbench.sweeps.progress import SweepProgress


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise UserError(
            "--executor ray needs Ray, which is an optional extra: pip install 'mrbench[ray]'"
        ) from None
    return ray


def _ray_cell(payload: dict[str, Any]) -> dict[str, Any]:
    """The Ray task body: run one cell from its payload (see :mod:`mrbench.sweeps.cell_process`)."""
    return run_payload(payload)


def _is_shared_uri(uri: str) -> bool:
    return uri.startswith(("http://", "https://", "databricks", "postgresql", "mysql", "mssql"))


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
    (``None`` starts a local Ray). On KeyboardInterrupt the pending tasks are cancelled (a running
    cell gets KeyboardInterrupt and ends its run KILLED) before the interrupt propagates.
    """
    ray = _import_ray()
    if address and not _is_shared_uri(ctx.tracking_uri):
        progress.console.print(
            f"[yellow]warning[/yellow]: tracking URI {ctx.tracking_uri!r} is local to this machine; cells on "
            "other Ray nodes cannot log to it. Use --tracking-uri http://<server> for a cluster."
        )
    if not ray.is_initialized():
        ray.init(address=address, include_dashboard=False, log_to_driver=True)
    remote = ray.remote(_ray_cell).options(num_gpus=gpus_per_cell, num_cpus=cpus_per_cell, max_retries=0)
    fn_path = callable_path(ctx.cell_fn)
    threads = max(1, int(cpus_per_cell))
    refs: dict[Any, tuple[Cell, float]] = {}
    for cell in cells:
        # Claimed when submitted: Ray starts tasks as resources free up, out of this process's sight.
        skipped = ctx.held(cell)
        if skipped is not None:
            progress.skip(skipped)
            yield skipped
            continue
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
                progress.finish(outcome)
                yield outcome
    except BaseException:
        for ref in pending:
            ray.cancel(ref)
        # Give cancelled cells time to end their runs KILLED before the sweep marks leftovers.
        ray.wait(pending, num_returns=len(pending), timeout=30.0)
        raise


def _outcome(ray: Any, ref: Any, cell: Cell, wall_s: float) -> CellOutcome:
    try:
        data = ray.get(ref)
    except ray.exceptions.TaskCancelledError:
        return CellOutcome(cell, "KILLED", None, wall_s, "cancelled")
    except ray.exceptions.RayTaskError as exc:
        cause = exc.cause if getattr(exc, "cause", None) is not None else exc
        status = "KILLED" if isinstance(cause, KeyboardInterrupt) else "FAILED"
        return CellOutcome(cell, status, None, wall_s, f"{type(cause).__name__}: {cause}"[:500])
    except ray.exceptions.RayError as exc:  # worker or node died
        return CellOutcome(cell, "FAILED", None, wall_s, f"{type(exc).__name__}: {exc}"[:500])
    return CellOutcome(
        cell, data["status"], data.get("run_id"), data.get("wall_s", wall_s), data.get("error")
    )
