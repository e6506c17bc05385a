"""Several processes opening one new sqlite store at the same moment all succeed.

Creating a store runs MLflow's table creation and migrations; without mrbench's lock two
processes doing it together fail with errors like "No such constraint: 'uq_experiments_name'"
(seen in CI when a test's client and a cell opened a fresh store together).
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

# Each child imports mrbench first (the slow part), then waits for the go file, so that all of
# them open the store within milliseconds of each other.
CHILD = """
import sys, time
from pathlib import Path
import pytest

from mrbench.store.client import check_tracking_reachable
go = Path(sys.argv[2])
Path(sys.argv[3]).touch()
while not go.exists():
    time.sleep(0.005)
check_tracking_reachable(sys.argv[1])
"""


@pytest.mark.slow  # over 15 s: in .ci/run's slow command, keeping the default suite under 20 min
def test_processes_opening_a_new_store_together_all_succeed(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    go = tmp_path / "go"
    n = 4
    children = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, uri, str(go), str(tmp_path / f"ready{i}")],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i in range(n)
    ]
    deadline = time.monotonic() + 120
    while len(list(tmp_path.glob("ready*"))) < n and time.monotonic() < deadline:
        time.sleep(0.01)
    go.touch()
    for child in children:
        out, _ = child.communicate(timeout=120)
        assert child.returncode == 0, out[-2000:]
    # The store is complete: the default experiment exists exactly once.
    assert [e.name for e in MlflowClient(uri).search_experiments()] == ["Default"]
