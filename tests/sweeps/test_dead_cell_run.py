"""A sweep's worker that dies without ending its run (SIGKILL, a crash): the sweep ends that run
the moment it sees the worker's exit, KILLED for a signal (it resumes from its checkpoint) and
FAILED for a crash, so that the store never shows it RUNNING after the sweep is over."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient
from server_cells import TinySpec
from store_cells import run_then_die
from test_cell_server import Quiet

from mrbench.core import layout
from mrbench.store.empty_store import seed_new_store
from mrbench.sweeps import cell_server
from mrbench.sweeps.cell import Cell, CellContext
from mrbench.sweeps.executors.local import run_processes

HERE = Path(__file__).resolve().parent


def test_a_dead_workers_run_is_ended_as_soon_as_the_sweep_sees_its_exit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The cells are children of the sweep's cell server, which preloads only the cell's module.
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")])))
    monkeypatch.delenv("MRBENCH_CELL_SERVER", raising=False)
    monkeypatch.setattr(cell_server, "preload_modules", lambda fn: ["store_cells"])
    seed_new_store(tmp_path / "mlflow.db")  # a copy of the empty store: no schema migration
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    client = MlflowClient(uri)
    experiment_id = client.create_experiment("dead")
    parent = client.create_run(experiment_id).info.run_id
    ctx = CellContext(uri, "dead", parent, "dead", run_then_die, tmp_path / "logs")
    cells = [Cell(TinySpec(seed=s)) for s in range(3)]
    seen = {}
    for outcome in run_processes(cells, ctx, 2, Quiet()):
        # at the moment the sweep reports the cell, its run says how it ended
        (run,) = client.search_runs(
            [experiment_id], f"tags.`{layout.tag(layout.RUN_KEY)}` = '{outcome.cell.key}'"
        )
        seen[outcome.cell.spec.seed] = (outcome.status, run.info.status)
    assert seen == {0: ("FINISHED", "FINISHED"), 1: ("FAILED", "FAILED"), 2: ("KILLED", "KILLED")}
    error = layout.read_tag(
        client.search_runs([experiment_id], "attributes.status = 'KILLED'")[0].data.tags, layout.ERROR
    )
    assert "code -9 (SIGKILL)" in error, error


def test_a_worker_killed_by_a_signal_is_killed_and_a_crash_failed(tmp_path: Path) -> None:
    from mrbench.sweeps.executors.local import _process_outcome

    cell, nothing = Cell(TinySpec(seed=0)), tmp_path / "no-result.json"
    for code, status, says in [
        (
            -signal.SIGXFSZ,
            "KILLED",
            "code -25 (SIGXFSZ)",
        ),  # past `ulimit -f` in a writer that does not ignore it
        (-signal.SIGTERM, "KILLED", "code -15 (SIGTERM)"),
        (-signal.SIGSEGV, "FAILED", "code -11 (SIGSEGV)"),
        (3, "FAILED", "code 3;"),
    ]:
        outcome = _process_outcome(cell, code, nothing, 1.0, "cell.log")
        assert (outcome.status, says in (outcome.error or "")) == (status, True), (code, outcome)
