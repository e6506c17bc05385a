"""Several processes opening one new sqlite store at the same moment all succeed.

Creating a store runs MLflow's table creation and migrations; without mrbench's lock two
processes doing it together fail with errors like "No such constraint: 'uq_experiments_name'"
(seen in CI when a test's client and a cell opened a fresh store together).
"""

from __future__ import annotations

import os
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
CHILD_MAKE_CACHE = (
    "from mrbench.store.empty_store import _make_template, template_path; _make_template(template_path())"
)


@pytest.mark.slow  # over 15 s: in .ci/run's slow command, keeping the default suite under 20 min
@pytest.mark.parametrize("cache", ["empty store cached", "empty cache", "no usable cache"])
def test_processes_opening_a_new_store_together_all_succeed(tmp_path: Path, cache: str) -> None:
    # mrbench.store.empty_store: a copy of the cached empty store; the empty store made by every
    # process at once, then copied; MLflow creating the store itself (the cache is a file).
    cache_dir = tmp_path / "cache"
    if cache == "empty store cached":
        env = {**os.environ, "MRBENCH_CACHE": str(cache_dir)}
        subprocess.run([sys.executable, "-c", CHILD_MAKE_CACHE], env=env, check=True, timeout=120)
        assert list(cache_dir.glob("mlflow-*-empty.db"))
    elif cache == "no usable cache":
        cache_dir.write_text("a file where the cache folder would be")
    env = {**os.environ, "MRBENCH_CACHE": str(cache_dir)}
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    go = tmp_path / "go"
    n = 4
    children = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, uri, str(go), str(tmp_path / f"ready{i}")],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
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
    assert len(list(cache_dir.glob("mlflow-*-empty.db"))) == (cache != "no usable cache")
