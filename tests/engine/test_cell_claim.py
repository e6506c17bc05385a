"""One cell, one process: a second ``mrbench run`` of a cell that is running is refused, naming who
runs it, and a rerun ends the attempts whose process is gone KILLED (issue 25).

The holder is a real ``mrbench run`` (:mod:`hold_cell_cli`) that opens its run and then holds the
cell where it would load the policy, until the test kills it.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from mrbench.core import layout
from mrbench.engine.cell.cell_claim import LOCK_NAME, CellClaim, CellHeld
from mrbench.engine.cell.checkpoints import CellFolder
from mrbench.engine.cell.runner import run_cell
from mrbench.engine.config import resolve_spec
from mrbench.store.claims import STALE_AFTER_S
from mrbench.store.client import ensure_experiment

HERE = Path(__file__).resolve().parent
EXPERIMENT = "claim"
TASK_PARAMS = {"n_train": "16", "n_eval": "4"}
TRAIN = {"steps": "2", "num_generations": "2", "prompts_per_step": "2", "eval_limit": "4"}
RUN_KEY = layout.tag(layout.RUN_KEY)


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("MRBENCH_RESULTS", str(tmp_path / "results"))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.delenv("MRBENCH_CHECKPOINT_EVERY", raising=False)
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    MlflowClient(uri).search_experiments(max_results=1)  # the store exists before any process races on it
    return uri


def _run_args(model_dir: Path, uri: str, seed: int) -> list[str]:
    args = ["run", "--method", "gdpo", "--task", "tool-calling", "--model", str(model_dir)]
    args += ["--seed", str(seed), "--tracking-uri", uri, "--experiment", EXPERIMENT, "--quiet"]
    args += [x for k, v in TASK_PARAMS.items() for x in ("--task-param", f"{k}={v}")]
    return args + [x for k, v in TRAIN.items() for x in ("--train", f"{k}={v}")]


def _hold(model_dir: Path, uri: str, seed: int, tmp_path: Path) -> tuple[subprocess.Popen, str]:
    """A ``mrbench run`` holding the cell, and its run id, once its run is open."""
    ready = tmp_path / f"ready-{seed}"
    log = (tmp_path / f"holder-{seed}.log").open("wb")
    command = [
        sys.executable,
        str(HERE / "hold_cell_cli.py"),
        str(ready),
        "--",
        *_run_args(model_dir, uri, seed),
    ]
    proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ))
    deadline = time.monotonic() + 180
    while not ready.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise AssertionError((tmp_path / f"holder-{seed}.log").read_text()[-3000:])
        time.sleep(0.05)
    return proc, ready.read_text()


def _runs(uri: str) -> list:
    client = MlflowClient(uri)
    return client.search_runs([client.get_experiment_by_name(EXPERIMENT).experiment_id])


@pytest.mark.slow
def test_a_cell_already_running_is_refused_naming_its_holder(
    micro_model_dir: Path, store: str, tmp_path: Path
) -> None:
    holder, run_id = _hold(micro_model_dir, store, 5, tmp_path)
    (cell_log,) = (tmp_path / "results" / "checkpoints").glob("*/cell.log")
    cell_log.write_bytes(b"the holder's library output\n")  # what the holder's capture wrote so far
    try:
        second = subprocess.run(
            [sys.executable, "-m", "mrbench", *_run_args(micro_model_dir, store, 5)],
            capture_output=True,
            text=True,
            timeout=300,
            env=dict(os.environ),
        )
        assert holder.poll() is None  # still holding the cell
    finally:
        holder.kill()
        holder.wait()
    output = second.stdout + second.stderr
    assert second.returncode == 2, output
    assert f"pid {holder.pid} on host {socket.gethostname()}" in output, output
    assert "Traceback" not in output, output
    assert cell_log.read_bytes().startswith(b"the holder's library output")  # not emptied by the second
    # The second invocation trained nothing and opened no run: the holder's is the cell's only one.
    assert [r.info.run_id for r in _runs(store)] == [run_id]


@pytest.mark.slow
def test_a_rerun_ends_an_attempt_killed_with_sigkill_killed(
    micro_model_dir: Path, store: str, tmp_path: Path
) -> None:
    holder, dead_run = _hold(micro_model_dir, store, 8, tmp_path)
    holder.send_signal(signal.SIGKILL)
    assert holder.wait() == -signal.SIGKILL
    assert MlflowClient(store).get_run(dead_run).info.status == "RUNNING"  # nothing could end it

    spec = resolve_spec("gdpo", "tool-calling", str(micro_model_dir), 8, task_params=TASK_PARAMS, train=TRAIN)
    assert MlflowClient(store).get_run(dead_run).data.tags[RUN_KEY] == spec.run_key()
    result = run_cell(spec, tracking_uri=store, experiment=EXPERIMENT, progress=False)
    assert result.status == "FINISHED" and result.run_id != dead_run
    statuses = {r.info.run_id: r.info.status for r in _runs(store)}
    assert statuses == {dead_run: "KILLED", result.run_id: "FINISHED"}


# ------------------------------------------------------------------ the claim's two parts, quickly


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_the_lock_names_its_holder_and_goes_with_the_claim(tmp_path: Path) -> None:
    folder = CellFolder(tmp_path / "cell")
    with CellClaim(folder, "m|t|x|s0"):
        info = json.loads((folder.root / LOCK_NAME).read_text())
        assert (info["pid"], info["host"]) == (os.getpid(), socket.gethostname())
        with pytest.raises(CellHeld, match=f"pid {os.getpid()}"), CellClaim(folder, "m|t|x|s0"):
            pass  # another thread of this process: refused too
        other = subprocess.run(
            [sys.executable, "-c", CLAIM_IN_CHILD, str(folder.root)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert other.returncode == 2 and f"pid {os.getpid()} on host {socket.gethostname()}" in other.stdout
    assert not (folder.root / LOCK_NAME).exists()
    with CellClaim(folder, "m|t|x|s0"):  # free again
        pass


CLAIM_IN_CHILD = """
import sys
from pathlib import Path
from mrbench.core.errors import UserError
from mrbench.engine.cell.cell_claim import CellClaim
from mrbench.engine.cell.checkpoints import CellFolder
try:
    with CellClaim(CellFolder(Path(sys.argv[1])), "m|t|x|s0"):
        sys.exit(0)
except UserError as exc:
    print(exc)
    sys.exit(2)
"""


def test_running_attempts_are_ended_killed_unless_their_process_lives(store: str, tmp_path: Path) -> None:
    client = MlflowClient(store)
    experiment_id = ensure_experiment(EXPERIMENT, store)
    now = time.time()

    def attempt(host: str, pid: int | None, beat: float | None, key: str = "k1") -> str:
        tags = {RUN_KEY: key, layout.tag(layout.HOST): host}
        if pid is not None:
            tags[layout.tag(layout.PID)] = str(pid)
        if beat is not None:
            tags[layout.tag(layout.HEARTBEAT)] = f"{beat:.0f}"
        return client.create_run(experiment_id, tags=tags).info.run_id

    here = socket.gethostname()
    dead_here = attempt(here, _dead_pid(), now)
    stale_there = attempt("another-machine", 7, now - STALE_AFTER_S - 60)
    unknown = attempt(here, None, None)  # written before cells' runs named their process
    other_key = attempt(here, _dead_pid(), now, key="k2")
    mine = attempt(here, os.getpid(), now)  # this process left it (its store was down): not alive
    claim = CellClaim(CellFolder(tmp_path / "k1"), "m|t|x|s0")
    with claim:
        assert sorted(claim.settle(client, experiment_id, "k1")) == sorted([dead_here, stale_there, mine])
    status = {r: client.get_run(r).info.status for r in (dead_here, stale_there, unknown, other_key, mine)}
    assert status == {
        dead_here: "KILLED",
        stale_there: "KILLED",
        unknown: "RUNNING",
        other_key: "RUNNING",
        mine: "KILLED",
    }

    live_there = attempt("another-machine", 7, now - 60, key="k3")
    with CellClaim(CellFolder(tmp_path / "k3"), "m|t|x|s3") as claim:
        with pytest.raises(CellHeld, match=f"pid 7 on host another-machine \\(MLflow run {live_there}\\)"):
            claim.settle(client, experiment_id, "k3")
    live_here = attempt(here, os.getppid(), now, key="k4")
    with CellClaim(CellFolder(tmp_path / "k4"), "m|t|x|s4") as claim:
        with pytest.raises(CellHeld, match=f"pid {os.getppid()} on host {here}"):
            claim.settle(client, experiment_id, "k4")
    assert client.get_run(live_there).info.status == client.get_run(live_here).info.status == "RUNNING"
