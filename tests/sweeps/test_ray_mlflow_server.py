"""A shared tracking server for real: ``mlflow server`` on 127.0.0.1 (sqlite database, artifacts
served by the server from their own folder), the real ``mrbench sweep --executor ray`` training
real micro cells that log to it over HTTP, then ``mrbench report`` reading the sweep back from it.

The server runs with the flags ``docs/cluster.md`` gives for a shared server, with a sqlite file
in place of PostgreSQL. The sweep command starts its own local Ray (``ray_address: local``) in a
temporary directory of its own (``RAY_TMPDIR``), kept on loopback (``tests/conftest.py``), with a
random token; the test checks that none of that Ray's processes outlives the command.
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
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient
from sweep_testing import RUN_KEY, assert_exactly_once_finished, child_statuses

from mrbench.core import layout

METHODS = ("grpo", "gdpo", "corrgrpo")
SERVER_START_S = 90.0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def _stop_group(proc: subprocess.Popen[bytes], grace_s: float = 5.0) -> None:
    """SIGTERM to the process group ``proc`` leads (the server and its workers), SIGKILL after ``grace_s``."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=grace_s)
            return
        except subprocess.TimeoutExpired:
            continue


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``http://127.0.0.1:PORT`` of a real ``mlflow server`` (sqlite backend, served artifacts)."""
    root = tmp_path_factory.mktemp("mlflow-server")
    port = _free_port()
    command = [
        sys.executable,
        "-m",
        "mlflow",
        "server",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--workers",
        "1",
        "--backend-store-uri",
        f"sqlite:///{root / 'mlflow.db'}",
        "--artifacts-destination",
        str(root / "artifacts"),
    ]
    log = (root / "server.log").open("wb")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    proc = subprocess.Popen(
        command, cwd=root, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + SERVER_START_S
        while not _answers(url):
            assert proc.poll() is None, (root / "server.log").read_text()[-3000:]
            assert time.monotonic() < deadline, (
                "mlflow server did not answer: " + (root / "server.log").read_text()[-3000:]
            )
            time.sleep(0.3)
        yield url
    finally:
        _stop_group(proc)
        log.close()


def _ray_pids(temp_dir: str) -> set[int]:
    found = subprocess.run(["pgrep", "-f", temp_dir], capture_output=True, text=True)
    return {int(pid) for pid in found.stdout.split()} - {os.getpid()}


def _mrbench(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "mrbench", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


@pytest.mark.slow  # about 60 s on a quiet 2-core machine, most of it starting the server, Ray and the CLI
def test_ray_sweep_of_real_cells_and_its_report_through_a_tracking_server(
    mlflow_server: str, micro_model_dir: Path, tmp_path: Path
) -> None:
    config = tmp_path / "served.yaml"
    config.write_text(
        "name: served\n"
        f"methods: [{', '.join(METHODS)}]\n"
        "tasks: [tool-calling]\n"
        f"models: [{micro_model_dir}]\n"
        "seeds: [0]\n"
        "task_params: {tool-calling: {n_train: 16, n_eval: 4}}\n"
        "train: {steps: 2, num_generations: 2, prompts_per_step: 2, eval_limit: 4}\n"
        "executor: ray\n"
        "ray_address: local\n"  # a Ray of its own, never one another test or user started
    )
    ray_tmp = tempfile.mkdtemp(prefix="mrb-ray-")  # short: Ray's socket paths must fit in 107 bytes
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("RAY_ADDRESS", "RAY_AUTH_MODE", "MLFLOW_", "MRBENCH_"))
    }
    env |= {
        "MRBENCH_RESULTS": str(tmp_path / "results"),
        "RAY_TMPDIR": ray_tmp,
        "RAY_AUTH_TOKEN": secrets.token_hex(16),
        "RAY_USAGE_STATS_ENABLED": "0",
    }
    try:
        done = _mrbench(
            ["sweep", "--config", str(config), "--tracking-uri", mlflow_server, "--no-report"], tmp_path, env
        )
        assert "is local to this machine" not in done.stdout  # an http store is what a cluster needs
        deadline = time.monotonic() + 30
        while _ray_pids(ray_tmp) and time.monotonic() < deadline:
            time.sleep(0.3)
        assert not _ray_pids(ray_tmp), "the sweep's Ray outlived it"
    finally:
        for pid in _ray_pids(ray_tmp):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(ray_tmp, ignore_errors=True)

    statuses = child_statuses(mlflow_server, "served")
    assert len(statuses) == len(METHODS)
    assert_exactly_once_finished(mlflow_server, "served", list(statuses))
    client = MlflowClient(tracking_uri=mlflow_server)
    experiment = client.get_experiment_by_name("served")
    runs = [r for r in client.search_runs([experiment.experiment_id]) if r.data.tags.get(RUN_KEY)]
    for run in runs:
        # Metrics through the REST API, artifacts through the server's proxy (no shared filesystem).
        assert {layout.eval_metric("exact_match"), layout.REWARD} <= set(run.data.metrics)
        assert run.info.artifact_uri.startswith("mlflow-artifacts:")
        names = {a.path for a in client.list_artifacts(run.info.run_id)}
        assert layout.CONFIG_ARTIFACT in names, names

    out = tmp_path / "report"
    _mrbench(["report", "served", "--tracking-uri", mlflow_server, "--out", str(out)], tmp_path, env)
    report = (out / "report.md").read_text()
    for method in METHODS:
        assert method in report
    for run in runs:
        value = run.data.metrics[layout.eval_metric("exact_match")]
        assert f"{value:.3f}" in report, (run.data.tags[layout.tag(layout.METHOD)], value)
