"""What a new invocation of a sweep does with the RUNNING runs it finds: a run whose own process is
alive (a `mrbench run` of the cell, by the run's host, pid and heartbeat tags) is left RUNNING and
its cell is held by that process; one whose process is gone is ended KILLED."""

from __future__ import annotations

import subprocess
from pathlib import Path

from mlflow.tracking import MlflowClient
from server_cells import TinySpec

from mrbench.core import layout
from mrbench.store.claims import holder_tags
from mrbench.store.empty_store import seed_new_store
from mrbench.sweeps.cell import Cell
from mrbench.sweeps.resume import resume_states


def test_mark_stale_leaves_a_live_mrbench_run_alone_and_ends_a_dead_one(tmp_path: Path) -> None:
    seed_new_store(tmp_path / "mlflow.db")
    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    experiment_id = client.create_experiment("stale")
    live, dead = Cell(TinySpec(seed=0)), Cell(TinySpec(seed=1))
    ended = subprocess.Popen(["true"])  # a process that has ended: its pid names no one
    ended.wait()
    dead_tags = holder_tags() | {layout.tag(layout.PID): str(ended.pid)}
    runs = {}
    for cell, tags in ((live, holder_tags()), (dead, dead_tags)):  # `mrbench run`: no parent run
        tags = {layout.tag(layout.RUN_KEY): cell.key, **tags}
        runs[cell.key] = client.create_run(experiment_id, tags=tags).info.run_id

    resume = resume_states(client, experiment_id, [live, dead], mark_stale=True)

    assert client.get_run(runs[live.key]).info.status == "RUNNING"  # this process runs it
    assert client.get_run(runs[dead.key]).info.status == "KILLED"
    assert resume.stale_killed == 1
    assert resume.states[live.key].startswith("held by pid "), resume.states
    assert resume.states[dead.key] == "re-run (KILLED)"
