"""The two-node Ray cluster tests: a head node and a worker node started with ``ray start`` as
separate processes (1 CPU each), running the real ``mrbench sweep --executor ray --ray-address …``
with fake cells: a sweep whose cells run on both nodes and land in the store once each, a Ray
worker killed mid-cell, and (slow) Ctrl-C on a cluster sweep.

Not collected by a plain ``pytest`` (the file name does not start with ``test_``):
``tests/sweeps/test_ray_cluster.py`` runs this file with pytest inside a network namespace of its
own (``unshare -n``), whose loopback device carries the nodes' address (:data:`ray_testing.NETNS_IP`),
so that every socket of the cluster stays inside it. By hand: ``pytest tests/sweeps/test_ray_cluster.py``
(as root), or this file directly with ``MRBENCH_TEST_RAY_CLUSTER=1`` on the machine's own network.

The cluster's processes are started without the tests' ``PYTHONPATH`` and ``MRBENCH_*``
variables: the fake cell and its scripted sleep reach the tasks only through the executor's
forwarding of the sweep's environment, as a plugin's cell function would.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient
from ray_testing import (
    NETNS_ENV,
    NODE_RECORD_ENV,
    OBJECT_STORE_BYTES,
    QUIET_RAY,
    free_port,
    ray_cli,
    ray_pids,
    stop_ray,
)
from sweep_testing import (
    REPO,
    RUN_KEY,
    assert_exactly_once_finished,
    child_statuses,
    cli_sweep,
    wait_for,
)

from mrbench.core import layout

NODE_SWEEP_CLI = Path(__file__).with_name("ray_testing.py")


@dataclass
class RayCluster:
    address: str
    temp_dir: str
    """Ray's temporary directory: its processes carry it on their command line."""
    env: dict[str, str]
    """What a driver on this machine needs (the cluster's token)."""


def _ray_start(args: list[str], env: dict[str, str]) -> None:
    done = subprocess.run([ray_cli(), "start", *args], env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


@pytest.fixture(scope="module")
def cluster() -> Iterator[RayCluster]:
    """A head node and a worker node, 1 CPU each, started by ``ray start`` on this machine.

    Ray (2.60) replaces a loopback address with the machine's routable one whenever a cluster can
    take a second node. Inside the tests' network namespace (``$MRBENCH_TEST_RAY_NETNS_IP`` set)
    the nodes are given the namespace's own address, the only one it has besides 127.0.0.1, so
    nothing leaves it. Outside, with ``MRBENCH_TEST_RAY_CLUSTER=1``, they listen on the machine's
    network address. Either way a random token (``RAY_AUTH_MODE=token``) keeps anyone else from
    joining or submitting work.
    """
    node_ip = os.environ.get(NETNS_ENV)
    if not node_ip and os.environ.get("MRBENCH_TEST_RAY_CLUSTER") != "1":
        pytest.skip(
            "the two-node Ray cluster runs inside a network namespace of its own "
            "(pytest tests/sweeps/test_ray_cluster.py), or on this machine's network address "
            "with MRBENCH_TEST_RAY_CLUSTER=1"
        )
    host = node_ip or "127.0.0.1"
    port = free_port()
    temp_dir = tempfile.mkdtemp(prefix="mrb-ray-")
    token = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(16)}
    node_env = {
        k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith(("MRBENCH_", "RAY_"))
    }
    node_env |= QUIET_RAY | token
    common = ["--num-cpus", "1", "--object-store-memory", OBJECT_STORE_BYTES, "--disable-usage-stats"]
    if node_ip:  # the namespace has no route out: Ray cannot find an address by itself there
        common += ["--node-ip-address", node_ip]
    # Ports of their own (not Ray's fixed defaults), so that another Ray on this machine (another
    # test run's) does not collide with this one: the head's client server and each node's agent.
    head_ports = ["--ray-client-server-port", str(free_port())]
    head_ports += ["--dashboard-agent-listen-port", str(free_port())]
    head = ["--head", "--port", str(port), "--include-dashboard", "false", "--temp-dir", temp_dir]
    try:
        _ray_start([*head, *head_ports, *common], node_env)
        worker_ports = ["--dashboard-agent-listen-port", str(free_port())]
        _ray_start(["--address", f"{host}:{port}", *worker_ports, *common], node_env)
        yield RayCluster(f"{host}:{port}", temp_dir, QUIET_RAY | token)
    finally:
        try:
            # The head's Ray client server has the GCS address on its command line, not temp_dir.
            stop_ray(temp_dir, f"--address={host}:{port} ")
        finally:
            shutil.rmtree(temp_dir, ignore_errors=True)


def _driver_env(cluster: RayCluster, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    return env | cluster.env | extra


def _drive(command: list[str], cluster: RayCluster, **extra: str) -> subprocess.CompletedProcess[str]:
    """Run a driver command against ``cluster`` to its end; fail the test unless it exits 0."""
    done = subprocess.run(
        command, cwd=REPO, env=_driver_env(cluster, **extra), capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


def node_sweep(uri: str, name: str, *extra: str) -> list[str]:
    """:func:`sweep_testing.cli_sweep` with :func:`ray_testing.node_cell` as the cell function."""
    return [sys.executable, str(NODE_SWEEP_CLI), *cli_sweep(uri, name, *extra)[2:]]


def test_two_node_cluster_runs_a_sweep_on_both_nodes_to_the_end_once(
    cluster: RayCluster, store: str, tmp_path: Path
) -> None:
    record = tmp_path / "nodes"
    record.mkdir()
    command = node_sweep(store, "cluster", "--executor", "ray", "--ray-address", cluster.address)
    command += ["--seeds", "0,1"]
    # A second per cell: while one node runs a cell, Ray places the next on the other.
    done = _drive(command, cluster, MRBENCH_FAKE_CELL_SECONDS="1", **{NODE_RECORD_ENV: str(record)})
    # A sqlite store would not do on a real cluster (this one is on one machine).
    assert "is local to this machine" in " ".join(done.stdout.split())
    statuses = child_statuses(store, "cluster")
    assert len(statuses) == 6
    assert_exactly_once_finished(store, "cluster", list(statuses))
    ran_on = {path.name: path.read_text() for path in record.iterdir()}
    assert set(ran_on) == set(statuses), (ran_on, statuses)
    assert len(set(ran_on.values())) == 2, f"the cells did not run on both nodes: {ran_on}"
    again = _drive(command, cluster)
    assert "6 already FINISHED (skipped)" in again.stdout
    assert child_statuses(store, "cluster") == statuses


def _cell_workers(cluster: RayCluster) -> list[int]:
    """The cluster's Ray workers running a cell now (Ray titles a busy worker ``ray::<task name>``)."""
    found = subprocess.run(["pgrep", "-f", "^ray::_ray_cell"], capture_output=True, text=True)
    return sorted({int(pid) for pid in found.stdout.split()} & ray_pids(cluster.temp_dir))


def test_killed_ray_worker_fails_its_cell_and_a_rerun_runs_only_it(cluster: RayCluster, store: str) -> None:
    command = cli_sweep(store, "ray-kill", "--executor", "ray", "--ray-address", cluster.address)
    proc = subprocess.Popen(
        command,
        cwd=REPO,
        env=_driver_env(cluster, MRBENCH_FAKE_CELL_SECONDS="8"),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        # Two cells at a time: one CPU each, one CPU per node.
        running = wait_for(store, "ray-kill", lambda s: sum("RUNNING" in v for v in s.values()) == 2, 120)
        assert len(running) == 2, running  # the third waits for a CPU
        deadline = time.monotonic() + 30
        while len(_cell_workers(cluster)) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        victim = _cell_workers(cluster)[0]
        os.kill(victim, signal.SIGKILL)
        out, _ = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 1, out[-3000:]
    assert "1 cell(s) did not finish" in out, out[-3000:]
    statuses = child_statuses(store, "ray-kill")
    assert len(statuses) == 3
    assert sorted(v[-1] for v in statuses.values()) == ["FAILED", "FINISHED", "FINISHED"], statuses
    (lost,) = [k for k, v in statuses.items() if v == ["FAILED"]]
    client = MlflowClient(tracking_uri=store)
    (lost_run,) = [
        r
        for r in client.search_runs([client.get_experiment_by_name("ray-kill").experiment_id])
        if r.data.tags.get(RUN_KEY) == lost
    ]
    assert "WorkerCrashedError" in lost_run.data.tags[layout.tag(layout.ERROR)]
    # The rerun runs the lost cell only.
    again = _drive(command, cluster)
    assert "2 already FINISHED (skipped)" in again.stdout and "1 to run" in again.stdout
    after = child_statuses(store, "ray-kill")
    assert after[lost] == ["FAILED", "FINISHED"]
    assert {k: v for k, v in after.items() if k != lost} == {k: v for k, v in statuses.items() if k != lost}


def _default_sigint() -> None:
    """SIGINT with its default disposition in a child (a background shell starts it ignored)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.slow
def test_ctrl_c_on_a_cluster_sweep_kills_its_cells_and_leaves_none_running(
    cluster: RayCluster, store: str
) -> None:
    command = cli_sweep(store, "ray-int", "--executor", "ray", "--ray-address", cluster.address)
    cell_seconds = 8
    proc = subprocess.Popen(
        command,
        cwd=REPO,
        env=_driver_env(cluster, MRBENCH_FAKE_CELL_SECONDS=str(cell_seconds)),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=_default_sigint,
    )
    try:
        running = wait_for(store, "ray-int", lambda s: sum("RUNNING" in v for v in s.values()) == 2, 120)
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, out[-3000:]
    ended = child_statuses(store, "ray-int")
    assert [ended[k] for k in running] == [["KILLED"], ["KILLED"]], ended
    time.sleep(cell_seconds + 1)  # a task that outlived the sweep would have finished its cell by now
    assert child_statuses(store, "ray-int") == ended
    _drive(command, cluster)
    assert_exactly_once_finished(store, "ray-int", list(child_statuses(store, "ray-int")))
