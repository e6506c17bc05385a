"""Resume: what each cell's earlier runs in the sweep's experiment say about running it again.

A cell whose run key has a FINISHED run is done and skipped. RUNNING runs left by a dead
invocation (kill -9, power loss) are marked KILLED, so the MLflow UI is truthful, and their
cells, like FAILED and KILLED ones, run again. An invocation of the same sweep that is still
alive on this host (its parent run's host and pid tags) is refused.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

from mrbench.core import layout
from mrbench.core.errors import UserError
from mrbench.sweeps.cell import Cell


def search_all(client: Any, experiment_id: str, filter_string: str = "") -> list[Any]:
    """Every run of the experiment that matches ``filter_string`` (all result pages)."""
    runs, token = [], None
    while True:
        page = client.search_runs(
            [experiment_id], filter_string=filter_string, max_results=1000, page_token=token
        )
        runs.extend(page)
        token = page.token
        if not token:
            return runs


def _pid_alive(pid: int, started_ms: int) -> bool:
    """True if ``pid`` runs on this host and was started before the run it recorded (PID reuse guard)."""
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError, OSError):
        return False
    try:
        import psutil

        return psutil.Process(pid).create_time() <= started_ms / 1000.0 + 5.0
    except Exception:  # psutil missing or the process just ended
        return True


def _refuse_live_invocation(runs: list[Any]) -> None:
    """UserError if a RUNNING parent run of this sweep belongs to a live process on this host."""
    host = socket.gethostname()
    for run in runs:
        tags = run.data.tags
        if (
            run.info.status == "RUNNING"
            and layout.read_tag(tags, layout.ROLE) == layout.ROLE_SWEEP
            and layout.read_tag(tags, layout.HOST) == host
        ):
            pid = int(layout.read_tag(tags, layout.PID, "0") or 0)
            if pid and pid != os.getpid() and _pid_alive(pid, run.info.start_time):
                raise UserError(
                    f"sweep {layout.read_tag(tags, layout.SWEEP)!r} is already running here (pid {pid}, "
                    f"MLflow run {run.info.run_id}); wait for it or stop it before running it again"
                )


def resume_states(
    client: Any, experiment_id: str, cells: list[Cell], *, mark_stale: bool
) -> tuple[dict[str, str], int]:
    """Resume state per run key (``"done"``, ``"re-run (FAILED)"``, …) and how many stale RUNNING runs were
    marked KILLED (only with ``mark_stale``). Refuses (UserError) while another invocation of this
    sweep is alive on this host."""
    runs = search_all(client, experiment_id)
    if mark_stale:
        _refuse_live_invocation(runs)
    finished: set[str] = set()
    last: dict[str, str] = {}
    stale = 0
    for run in sorted(runs, key=lambda r: r.info.start_time or 0):
        status = run.info.status
        if status == "RUNNING" and mark_stale:
            # Left by an invocation that died (kill -9, power loss): no process will ever end it.
            client.set_terminated(run.info.run_id, "KILLED")
            stale += 1
            status = "KILLED"
        key = layout.read_tag(run.data.tags, layout.RUN_KEY)
        if not key:
            continue
        last[key] = status
        if status == "FINISHED":
            finished.add(key)
    states = {}
    for cell in cells:
        if cell.key in finished:
            states[cell.key] = "done"
        elif cell.key in last:
            states[cell.key] = f"re-run ({last[cell.key]})"
        else:
            states[cell.key] = "to run"
    return states, stale


def peek_states(uri: str, name: str, cells: list[Cell]) -> dict[str, str] | None:
    """Resume states for a dry run, read-only; None when the store does not exist yet or is unreachable."""
    if uri.startswith("sqlite:///") and not Path(uri.removeprefix("sqlite:///")).exists():
        return None
    try:
        from mlflow.tracking import MlflowClient

        client = MlflowClient(tracking_uri=uri)
        experiment = client.get_experiment_by_name(name)
        if experiment is None:
            return None
        return resume_states(client, experiment.experiment_id, cells, mark_stale=False)[0]
    except Exception:  # a dry run only informs; the real run checks the store properly
        return None
