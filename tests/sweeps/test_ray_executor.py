"""The Ray executor for real: a local Ray running real micro cells, and a two-node Ray cluster
(head and worker started with ``ray start`` as separate processes) running the real
``mrbench sweep`` command with fake cells, including a Ray worker killed mid-cell.

Ray is part of the ``dev`` extra, so these run under the README's test command. Every Ray here
is small (1 CPU per node, an 80 MB object store, no dashboard, no usage stats), has its own
short temporary directory (Ray's socket paths must fit in 107 bytes), and is stopped in a
``finally``; the fixtures then check that none of its processes is left.

The cluster's processes are started without the tests' ``PYTHONPATH`` and ``MRBENCH_*``
variables: the fake cell (``fakes:fake_cell``) and its scripted sleep reach the tasks only through
the executor's forwarding of the sweep's environment, as a plugin's cell function would.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import ray
from fakes import fake_cell
from mlflow.tracking import MlflowClient
from sweep_testing import (
    REPO,
    RUN_KEY,
    assert_exactly_once_finished,
    child_statuses,
    cli_sweep,
    quiet,
    small,
    sweep,
    wait_for,
)

from mrbench.core import layout
from mrbench.core.errors import UserError
from mrbench.sweeps.executors.ray import fits_somewhere, task_env
from mrbench.sweeps.orchestrator import run_sweep
from mrbench.sweeps.spec import SweepSpec, build_sweep_spec

OBJECT_STORE_BYTES = str(80 * 1024 * 1024)
QUIET_RAY = {"RAY_USAGE_STATS_ENABLED": "0"}
LOCAL_TOKEN = secrets.token_hex(16)  # one per test process: Ray caches the token it first reads


def _ray_cli() -> str:
    """The ``ray`` command of this interpreter's environment."""
    here = Path(sys.executable).with_name("ray")
    return str(here) if here.exists() else (shutil.which("ray") or "ray")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _ray_pids(temp_dir: str) -> set[int]:
    """The processes of the Ray whose temporary directory is ``temp_dir``: those with it on their
    command line (GCS, raylets, log monitor) and all their descendants (agents and workers, which
    retitle themselves ``ray::…``)."""
    found = subprocess.run(["pgrep", "-f", temp_dir], capture_output=True, text=True)
    pids = {int(pid) for pid in found.stdout.split()} - {os.getpid()}
    todo = list(pids)
    while todo:
        children = subprocess.run(["pgrep", "-P", str(todo.pop())], capture_output=True, text=True)
        for child in map(int, children.stdout.split()):
            if child not in pids:
                pids.add(child)
                todo.append(child)
    return pids


def _alive(pids: set[int]) -> set[int]:
    alive = set()
    for pid in pids:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            continue
        alive.add(pid)
    return alive


def _wait_gone(pids: set[int], timeout_s: float) -> set[int]:
    """Wait up to ``timeout_s`` for ``pids`` to end; return those still alive."""
    deadline = time.monotonic() + timeout_s
    while _alive(pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    return _alive(pids)


def _command(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _terminate(pids: set[int], grace_s: float) -> None:
    """SIGTERM to ``pids``, then SIGKILL to those still alive after ``grace_s``."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10.0)):
        for pid in _alive(pids):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        if not _wait_gone(pids, wait_s):
            return


def _stop_ray(temp_dir: str, grace_s: float = 10.0) -> None:
    """Stop the Ray of ``temp_dir``, and only it, as ``ray stop`` does (the raylets first, then the
    agents and monitors, the GCS last; SIGTERM, then SIGKILL to what is left after ``grace_s``),
    then fail the test if any of its processes is still alive. ``ray stop`` itself would stop
    every Ray on the machine, such as another test run's."""
    pids = _ray_pids(temp_dir)
    raylets = {pid for pid in pids if "/raylet " in _command(pid)}
    gcs = {pid for pid in pids if "gcs_server " in _command(pid)}
    for stage in (raylets, pids - raylets - gcs, gcs):
        _terminate(stage, grace_s)
    assert not _alive(pids), f"Ray processes left behind: {sorted(_alive(pids))}"


# ------------------------------------------------------------------------------ a local Ray


@pytest.fixture
def local_ray() -> Iterator[None]:
    """A local Ray in this process with 1 CPU, shut down (and checked gone) after the test."""
    temp_dir = tempfile.mkdtemp(prefix="mrb-ray-")
    with pytest.MonkeyPatch.context() as mp:
        for key, value in QUIET_RAY.items():
            mp.setenv(key, value)
        # Ray turns token authentication on for a local Ray (the mode is read once per process, so
        # it is left to Ray) and would save a new token under ~/.ray: it gets this one instead.
        mp.setenv("RAY_AUTH_TOKEN", LOCAL_TOKEN)
        mp.delenv("RAY_AUTH_MODE", raising=False)
        mp.delenv("RAY_ADDRESS", raising=False)
        try:
            # address="local": a new Ray, even if a `ray start` cluster runs on this machine.
            ray.init(
                address="local",
                num_cpus=1,
                include_dashboard=False,
                log_to_driver=False,
                object_store_memory=int(OBJECT_STORE_BYTES),
                _temp_dir=temp_dir,
            )
            yield
        finally:
            pids = _ray_pids(temp_dir)
            ray.shutdown()
            try:
                assert not _wait_gone(pids, 30.0), f"Ray processes left behind: {sorted(_alive(pids))}"
            finally:
                _stop_ray(temp_dir)  # nothing to stop unless the check above failed
                shutil.rmtree(temp_dir, ignore_errors=True)


def test_task_env_forwards_plugins_and_mrbench_settings_only() -> None:
    env = {
        "PYTHONPATH": "/plugins",
        "MRBENCH_RESULTS": "/r",
        "MLFLOW_S3_ENDPOINT_URL": "http://s3",
        "HOME": "/",
    }
    assert task_env(env) == {
        "PYTHONPATH": "/plugins",
        "MRBENCH_RESULTS": "/r",
        "MLFLOW_S3_ENDPOINT_URL": "http://s3",
    }


def test_cpus_per_cell_is_a_sweep_setting(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("executor: ray\ngpus_per_cell: 1\ncpus_per_cell: 4\n")
    spec = build_sweep_spec(config=path)
    assert (spec.executor, spec.gpus_per_cell, spec.cpus_per_cell) == ("ray", 1.0, 4.0)
    assert build_sweep_spec().cpus_per_cell == 1.0
    path.write_text("cpus_per_cell: 0\n")
    with pytest.raises(UserError, match=r"'cpus_per_cell'.*a number > 0"):
        build_sweep_spec(config=path)


def test_local_ray_runs_a_small_sweep_of_real_cells(
    local_ray: None, store: str, micro_model_dir: Path
) -> None:
    """Real training cells (micro model, 2 steps) as Ray tasks, then a rerun that skips them all."""
    assert fits_somewhere(ray.nodes(), 1, 0)
    assert not fits_somewhere(ray.nodes(), 2, 0) and not fits_somewhere(ray.nodes(), 1, 1)
    spec = SweepSpec(
        name="ray-real",
        methods=("grpo", "gdpo"),
        tasks=("tool-calling",),
        models=(str(micro_model_dir),),
        seeds=(0,),
        task_params={"tool-calling": {"n_train": 16, "n_eval": 4}},
        train={"steps": 2, "num_generations": 2, "prompts_per_step": 2, "eval_limit": 4},
        executor="ray",
        report=False,
    )
    outcome = run_sweep(spec, tracking_uri=store, console=quiet())
    assert [(o.status, o.error) for o in outcome.outcomes] == [("FINISHED", None)] * 2
    keys = [c.key for c in outcome.grid.cells]
    assert_exactly_once_finished(store, "ray-real", keys)
    client = MlflowClient(tracking_uri=store)
    for result in outcome.outcomes:
        run = client.get_run(result.run_id)
        assert run.data.tags[RUN_KEY] == result.cell.key
        assert run.data.tags[layout.PARENT_RUN_TAG] == outcome.parent_run_id
        assert {layout.eval_metric("exact_match"), layout.REWARD} <= set(run.data.metrics)
    again = run_sweep(spec, tracking_uri=store, console=quiet())
    assert again.outcomes == [] and len(again.skipped) == 2
    assert_exactly_once_finished(store, "ray-real", keys)


@pytest.mark.slow
def test_local_ray_runs_fake_cells_and_reports_a_failing_one(local_ray: None, store: str) -> None:
    """One failing cell is reported FAILED with its error; the others finish."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MRBENCH_FAKE_CELL_FAIL", "gdpo|*|s1")
        outcome = sweep(small("ray-fake", executor="ray"), store, cell_fn=fake_cell)
    by_label = {o.cell.label: o for o in outcome.outcomes}
    assert by_label["gdpo|tool-calling|tiny|s1"].status == "FAILED"
    assert "scripted failure" in (by_label["gdpo|tool-calling|tiny|s1"].error or "")
    assert sorted(o.status for o in outcome.outcomes) == ["FAILED", "FINISHED", "FINISHED", "FINISHED"]
    assert outcome.exit_code == 1


# ---------------------------------------------------------------------- a two-node cluster


@dataclass
class RayCluster:
    address: str
    temp_dir: str
    """Ray's temporary directory: its processes carry it on their command line."""
    env: dict[str, str]
    """What a driver on this machine needs (the cluster's token)."""


def _ray_start(args: list[str], env: dict[str, str]) -> None:
    done = subprocess.run([_ray_cli(), "start", *args], env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


@pytest.fixture(scope="module")
def cluster() -> Iterator[RayCluster]:
    """A head node and a worker node, 1 CPU each, started by ``ray start`` on this machine.

    Ray (2.60) replaces a loopback address with the machine's routable one whenever a cluster can
    take a second node, so the nodes listen beyond 127.0.0.1 whatever address they are given;
    a random token (``RAY_AUTH_MODE=token``) keeps anyone else from joining or submitting work.
    Because its nodes then talk over the machine's network address rather than loopback, the
    cluster starts only where that is allowed: set ``MRBENCH_TEST_RAY_CLUSTER=1`` (the development
    machines and CI of this project keep test traffic on loopback, so there it is skipped).
    """
    if os.environ.get("MRBENCH_TEST_RAY_CLUSTER") != "1":
        pytest.skip(
            "a two-node Ray 2.60 cluster listens on the machine's network address, not loopback; "
            "opt in with MRBENCH_TEST_RAY_CLUSTER=1"
        )
    port = _free_port()
    temp_dir = tempfile.mkdtemp(prefix="mrb-ray-")
    token = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(16)}
    node_env = {
        k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith(("MRBENCH_", "RAY_"))
    }
    node_env |= QUIET_RAY | token
    common = ["--num-cpus", "1", "--object-store-memory", OBJECT_STORE_BYTES, "--disable-usage-stats"]
    # Ports of their own (not Ray's fixed defaults), so that another Ray on this machine (another
    # test run's) does not collide with this one: the head's client server and each node's agent.
    head_ports = ["--ray-client-server-port", str(_free_port())]
    head_ports += ["--dashboard-agent-listen-port", str(_free_port())]
    head = ["--head", "--port", str(port), "--include-dashboard", "false", "--temp-dir", temp_dir]
    try:
        _ray_start([*head, *head_ports, *common], node_env)
        worker_ports = ["--dashboard-agent-listen-port", str(_free_port())]
        _ray_start(["--address", f"127.0.0.1:{port}", *worker_ports, *common], node_env)
        yield RayCluster(f"127.0.0.1:{port}", temp_dir, QUIET_RAY | token)
    finally:
        try:
            _stop_ray(temp_dir)
        finally:
            shutil.rmtree(temp_dir, ignore_errors=True)


def _driver_env(cluster: RayCluster, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    return env | cluster.env | extra


def _drive(command: list[str], cluster: RayCluster) -> subprocess.CompletedProcess[str]:
    """Run a driver command against ``cluster`` to its end; fail the test unless it exits 0."""
    done = subprocess.run(
        command, cwd=REPO, env=_driver_env(cluster), capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


def test_two_node_cluster_runs_a_sweep_to_the_end_once(cluster: RayCluster, store: str) -> None:
    count = f"import ray; ray.init(address={cluster.address!r}); print(len(ray.nodes()))"
    nodes = _drive([sys.executable, "-c", count], cluster)
    assert nodes.stdout.strip().splitlines()[-1] == "2", nodes.stdout + nodes.stderr
    command = cli_sweep(store, "cluster", "--executor", "ray", "--ray-address", cluster.address)
    done = _drive([*command, "--seeds", "0,1"], cluster)
    # A sqlite store would not do on a real cluster (this one is on one machine).
    assert "is local to this machine" in " ".join(done.stdout.split())
    statuses = child_statuses(store, "cluster")
    assert len(statuses) == 6
    assert_exactly_once_finished(store, "cluster", list(statuses))
    again = _drive([*command, "--seeds", "0,1"], cluster)
    assert "6 already FINISHED (skipped)" in again.stdout
    assert child_statuses(store, "cluster") == statuses


def _cell_workers(cluster: RayCluster) -> list[int]:
    """The cluster's Ray workers running a cell now (Ray titles a busy worker ``ray::<task name>``)."""
    found = subprocess.run(["pgrep", "-f", "^ray::_ray_cell"], capture_output=True, text=True)
    return sorted({int(pid) for pid in found.stdout.split()} & _ray_pids(cluster.temp_dir))


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
