"""SIGTERM and SIGHUP end `run`, `sweep` and `ui` like Ctrl-C: runs end KILLED, workers and servers
stop, and the exit code is 128 + the signal (143 SIGTERM, 129 SIGHUP). Real processes throughout:
the installed `mrbench` script for `run` and `ui`, the real sweep command over fake cells."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from cli_procs import (
    alive,
    children,
    default_stop_signals,
    descendants,
    in_group,
    listening,
    mrbench_script,
    wait_until,
)
from mlflow.tracking import MlflowClient

from mrbench.core import layout

pytestmark = pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads processes from /proc (Linux)")

TESTS = Path(__file__).resolve().parents[1]
FAKE_SWEEP_CLI = TESTS / "sweeps" / "fake_sweep_cli.py"


@pytest.fixture
def store(new_store, tmp_path: Path) -> str:
    """A fresh store per test (a copy: no migration to wait for)."""
    return new_store(tmp_path / "store")


def runs_of(uri: str, experiment: str) -> list:
    client = MlflowClient(tracking_uri=uri)
    found = client.get_experiment_by_name(experiment)
    return client.search_runs([found.experiment_id]) if found else []


def stop(proc: subprocess.Popen) -> None:
    """Kill what a failed test left: the process and its group."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@pytest.mark.slow  # over 15 s: in .ci/run's slow command, keeping the default suite under 20 min
def test_sigterm_to_run_marks_its_run_killed_and_exits_143(
    micro_model_dir: Path, store: str, tmp_path: Path
) -> None:
    uri = store
    # code-generation: its sandbox runs completions in processes of their own sessions.
    args = ["--model", str(micro_model_dir), "--task", "code-generation", "--tracking-uri", uri]
    args += ["--experiment", "sigterm-run", "--steps", "5000", "--quiet"]
    args += ["--train", "num_generations=2", "--train", "prompts_per_step=2", "--train", "eval_limit=2"]
    env = {**os.environ, "MRBENCH_RESULTS": str(tmp_path / "results"), "OMP_NUM_THREADS": "1"}
    log = (tmp_path / "run.log").open("w")
    proc = subprocess.Popen(
        [mrbench_script(), "run", *args],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,  # its own process group: every process it starts is found there
        preexec_fn=default_stop_signals,
    )
    try:
        # Mid-training: the run has logged a training step and the sandbox scores completions.
        started = wait_until(
            lambda: (
                any(layout.REWARD in r.data.metrics for r in runs_of(uri, "sigterm-run"))
                and descendants(proc.pid)
            ),
            timeout_s=300,
            what="a training step of the run, with its sandbox started",
            every_s=0.5,
        )
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=120)
    finally:
        stop(proc)
        log.close()
    output = (tmp_path / "run.log").read_text()
    assert code == 143, output[-3000:]
    assert "run interrupted" in output and "interrupted by SIGTERM" in output
    assert "Traceback" not in output
    assert [r.info.status for r in runs_of(uri, "sigterm-run")] == ["KILLED"]
    assert in_group(proc.pid) == [] and alive(started) == []


def fake_sweep(uri: str, name: str, workers: int, tmp_path: Path) -> subprocess.Popen:
    """The real `sweep` command over fake cells of 30 s each, in its own process group."""
    env = {
        **os.environ,
        "MRBENCH_RESULTS": str(tmp_path / "results"),
        "MRBENCH_FAKE_CELL_SECONDS": "30",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")])),
    }
    argv = [sys.executable, str(FAKE_SWEEP_CLI), "sweep", "--name", name, "--tracking-uri", uri]
    argv += ["--methods", "grpo,gdpo,corrgrpo", "--tasks", "tool-calling", "--models", "tiny"]
    argv += ["--seeds", "0", "--steps", "3", "--no-report", "--workers", str(workers)]
    log = (tmp_path / f"{name}.log").open("w")
    proc = subprocess.Popen(
        argv,
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,
        preexec_fn=default_stop_signals,
    )
    log.close()
    return proc


@pytest.mark.parametrize(
    ("workers", "signal_workers"),
    [
        pytest.param(1, False, id="in-process-cell"),
        pytest.param(2, True, id="workers-signalled-too", marks=pytest.mark.slow),  # ~11 s: CI's slow stage
    ],
)
def test_sigterm_to_sweep_marks_its_runs_killed_and_exits_143(
    store: str, tmp_path: Path, workers: int, signal_workers: bool
) -> None:
    uri = store
    name = f"sigterm-{workers}"
    proc = fake_sweep(uri, name, workers, tmp_path)
    try:
        wait_until(
            lambda: (
                sum(
                    r.info.status == "RUNNING" and layout.tag(layout.ROLE) not in r.data.tags
                    for r in runs_of(uri, name)
                )
                == workers
            ),
            timeout_s=120,
            what=f"{workers} running cell(s)",
        )
        # One worker runs in the sweep itself; more run as children of the sweep's cell server.
        workers_pids = descendants(proc.pid) if workers > 1 else []
        assert len(workers_pids) == (workers + 1 if workers > 1 else 0)  # the cell server and its cells
        # SLURM at the end of an allocation, or `docker stop` of a container running the whole
        # tree, signals every process, the workers (in their own sessions) included.
        for pid in [proc.pid, *(workers_pids if signal_workers else [])]:
            os.kill(pid, signal.SIGTERM)
        code = proc.wait(timeout=120)
    finally:
        stop(proc)
    output = (tmp_path / f"{name}.log").read_text()
    assert code == 143, output[-3000:]
    assert "interrupted by SIGTERM" in output and "Traceback" not in output
    statuses = sorted(r.info.status for r in runs_of(uri, name))
    assert statuses == ["KILLED"] * (workers + 1), statuses  # the cells' runs and the parent run
    assert alive(workers_pids) == [] and in_group(proc.pid) == []


@pytest.mark.slow  # a real mlflow ui server (~9 s); CI's slow stage runs it
def test_sighup_to_ui_stops_its_server_and_exits_129(store: str, tmp_path: Path) -> None:
    import socket

    uri = store
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    log = (tmp_path / "ui.log").open("w")
    proc = subprocess.Popen(
        [mrbench_script(), "ui", "--port", str(port), "--tracking-uri", uri],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=default_stop_signals,
    )
    try:

        def answers() -> bool:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2) as response:
                    return response.status == 200
            except OSError:
                return False

        wait_until(answers, timeout_s=180, what="the MLflow UI to answer", every_s=0.5)
        (server,) = children(proc.pid)  # `mlflow ui`, leading its own group of server processes
        server_group = in_group(server)
        assert len(server_group) >= 2  # the web server and its workers
        proc.send_signal(signal.SIGHUP)  # the terminal went away
        code = proc.wait(timeout=60)
    finally:
        stop(proc)
        log.close()
    output = (tmp_path / "ui.log").read_text()
    assert code == 129, output[-3000:]
    assert "stopping the MLflow UI" in output and "Traceback" not in output
    assert in_group(server) == [] and alive(server_group) == []
    assert not listening(port)
