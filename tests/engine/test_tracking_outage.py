"""A tracking server that goes away mid-run: retries ride out a restart; past the bound the cell
keeps its checkpoint and log locally, and running it again logs them without training again.

The server is a real ``mlflow server`` on 127.0.0.1 (sqlite backend and artifact root in tmp),
killed and started again on the same port and backend; the cell is a real ``mrbench run``.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from mrbench.core import layout
from mrbench.core.errors import UserError
from mrbench.engine.config import resolve_spec
from mrbench.store.client import RetryingClient, TrackingUnavailable, check_tracking_reachable

TASK_PARAMS = {"n_train": "16", "n_eval": "4"}
STEPS = 20  # ~0.15 s each on a CPU: the server dies while the cell trains (its logging then blocks)
TRAIN = {"steps": str(STEPS), "num_generations": "2", "prompts_per_step": "2", "eval_limit": "4"}
OUTAGE_S = 10.0
LOSS = layout.step_metric("loss")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class MlflowServer:
    """``mlflow server`` on a free 127.0.0.1 port; :meth:`kill` and :meth:`start` keep port and backend."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.port = _free_port()
        self.uri = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None

    def start(self, timeout_s: float = 90.0) -> None:
        log = (self.root / "server.log").open("ab")
        command = [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(self.port)]
        command += ["--workers", "1", "--backend-store-uri", f"sqlite:///{self.root / 'mlflow.db'}"]
        command += ["--artifacts-destination", str(self.root / "artifacts")]
        # No background job runner (it only slows start-up); its own session, so kill() ends all of it.
        env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
        self.proc = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        log.close()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            try:
                with urllib.request.urlopen(f"{self.uri}/health", timeout=2) as answer:
                    if answer.status == 200:
                        return
            except OSError:
                time.sleep(0.2)
        tail = (self.root / "server.log").read_text(errors="replace")[-2000:]
        raise RuntimeError(f"mlflow server did not start on {self.uri}:\n{tail}")

    def kill(self) -> None:
        """Kill the server and its workers at once (a crash); no-op when it is not running."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)
        self.proc = None


@pytest.fixture(scope="module")
def module_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MlflowServer]:
    """One server (and its database) for the module: a first start creates the tables (~10 s)."""
    srv = MlflowServer(tmp_path_factory.mktemp("mlflow-server"))
    try:
        yield srv
    finally:
        srv.kill()


@pytest.fixture
def server(module_server: MlflowServer) -> MlflowServer:
    """The module's server, running (a test that failed mid-outage may have left it down)."""
    if module_server.proc is None:
        module_server.start()
    return module_server


def _run_args(model_dir: Path, uri: str, experiment: str, *extra: str) -> list[str]:
    args = [sys.executable, "-m", "mrbench", "run", "--method", "gdpo", "--model", str(model_dir)]
    args += ["--seed", "1", "--tracking-uri", uri, "--experiment", experiment, "--quiet", *extra]
    args += [x for k, v in TASK_PARAMS.items() for x in ("--task-param", f"{k}={v}")]
    args += [x for k, v in TRAIN.items() for x in ("--train", f"{k}={v}")]
    return args


class Cell:
    """``mrbench run`` in the background, its output in files (read with :meth:`output`)."""

    def __init__(self, args: list[str], results: Path, logs: Path) -> None:
        self.stdout, self.stderr = logs.with_suffix(".out"), logs.with_suffix(".err")
        env = {**os.environ, "MRBENCH_RESULTS": str(results), "OMP_NUM_THREADS": "1"}
        with self.stdout.open("wb") as out, self.stderr.open("wb") as err:
            self.proc = subprocess.Popen(args, stdout=out, stderr=err, env=env)

    def output(self) -> tuple[str, str]:
        return self.stdout.read_text(errors="replace"), self.stderr.read_text(errors="replace")

    def wait(self, timeout_s: float) -> int:
        return self.proc.wait(timeout=timeout_s)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def _wait_for_first_step(cell: Cell, uri: str, experiment: str, timeout_s: float = 120.0) -> str:
    """Run id of the cell's run once its first training step is in the store."""
    client = MlflowClient(tracking_uri=uri)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert cell.proc.poll() is None, cell.output()[1][-3000:]
        found = client.get_experiment_by_name(experiment)
        runs = client.search_runs([found.experiment_id]) if found else []
        if runs and client.get_metric_history(runs[0].info.run_id, LOSS):
            return runs[0].info.run_id
        time.sleep(0.1)
    raise AssertionError("the cell logged no training step in time")


def _assert_complete(uri: str, run_id: str) -> None:
    """The run is FINISHED with every step, both evaluations and every artifact."""
    client = MlflowClient(tracking_uri=uri)
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED"
    assert [m.step for m in client.get_metric_history(run_id, LOSS)] == list(range(1, STEPS + 1))
    assert [m.step for m in client.get_metric_history(run_id, layout.reward_mean("values"))] == list(
        range(1, STEPS + 1)
    )
    assert sorted(m.step for m in client.get_metric_history(run_id, layout.eval_metric("exact_match"))) == [
        0,
        STEPS,
    ]
    assert layout.PERF_WALL_S in run.data.metrics and layout.CHECKPOINT_SIZE_MB in run.data.metrics
    artifacts = {a.path for folder in ("", "eval", "samples") for a in client.list_artifacts(run_id, folder)}
    assert {
        layout.CONFIG_ARTIFACT,
        layout.DIAGNOSTICS_ARTIFACT,
        layout.COMPLETIONS_ARTIFACT,
        layout.EVAL_SAMPLES_BEFORE,
        layout.EVAL_SAMPLES_AFTER,
    } <= artifacts


def _final_dir(results: Path, model_dir: Path) -> Path:
    spec = resolve_spec("gdpo", "tool-calling", str(model_dir), 1, task_params=TASK_PARAMS, train=TRAIN)
    return results / "checkpoints" / spec.run_key() / "final"


@pytest.mark.slow  # over 20 s: in .ci/run's slow command, keeping the default suite under 20 min
def test_server_restart_mid_run_loses_no_step(server, micro_model_dir, tmp_path):
    """The issue's case: the server is down for 10 s while the cell trains (killed, then started again)."""
    results = tmp_path / "results"
    cell = Cell(_run_args(micro_model_dir, server.uri, "restart"), results, tmp_path / "cell")
    try:
        run_id = _wait_for_first_step(cell, server.uri, "restart")
        server.kill()
        time.sleep(OUTAGE_S)
        server.start()
        code = cell.wait(timeout_s=300)
    finally:
        cell.stop()
    _, err = cell.output()
    assert code == 0, err[-3000:]
    assert "unreachable" in err and "answers again" in err  # the outage did hit the run
    assert "Traceback" not in err
    _assert_complete(server.uri, run_id)
    run = MlflowClient(tracking_uri=server.uri).get_run(run_id)
    final = _final_dir(results, micro_model_dir)
    assert run.data.params[layout.PARAM_SAVE] == "final"
    assert run.data.params[layout.PARAM_CHECKPOINT_DIR] == str(final)
    assert (final / "config.json").exists() and (final / "tokenizer_config.json").exists()
    assert not (final.parent / "pending").exists()


@pytest.mark.slow  # over 20 s: in .ci/run's slow command, keeping the default suite under 20 min
def test_outage_past_the_bound_keeps_the_cell_and_a_rerun_finishes_it(server, micro_model_dir, tmp_path):
    results = tmp_path / "results"
    args = _run_args(micro_model_dir, server.uri, "past-bound", "--tracking-retry-s", "2")
    first = Cell(args, results, tmp_path / "first")
    try:
        run_id = _wait_for_first_step(first, server.uri, "past-bound")
        server.kill()  # and it stays down until the cell has given up
        code = first.wait(timeout_s=300)
    finally:
        first.stop()
    _, err = first.output()
    final = _final_dir(results, micro_model_dir)
    pending = final.parent / "pending"
    assert code == 2, err[-3000:]
    assert "Traceback" not in err
    assert f"the trained policy is in {final}" in err and str(pending) in err
    assert (pending / "record.json").exists() and (final / "config.json").exists()
    trained = {p.name: p.stat().st_mtime_ns for p in final.iterdir()}

    server.start()
    rerun = Cell(args, results, tmp_path / "rerun")
    try:
        code = rerun.wait(timeout_s=300)
    finally:
        rerun.stop()
    out, err = rerun.output()
    assert code == 0, err[-3000:]
    assert "not trained again" in out and f"run {run_id} FINISHED" in out
    assert {p.name: p.stat().st_mtime_ns for p in final.iterdir()} == trained  # the same checkpoint
    assert not pending.exists()
    _assert_complete(server.uri, run_id)
    client = MlflowClient(tracking_uri=server.uri)
    assert len(client.search_runs([client.get_experiment_by_name("past-bound").experiment_id])) == 1


def test_retrying_client_gives_up_after_its_bound():
    uri = f"http://127.0.0.1:{_free_port()}"  # nothing listens there
    started = time.monotonic()
    with pytest.raises(TrackingUnavailable, match="Connection refused") as info:
        RetryingClient(uri, 1.5).search_experiments(max_results=1)
    assert 1.5 <= time.monotonic() - started < 10
    assert "--tracking-retry-s" in str(info.value)


def test_retrying_client_raises_other_errors_at_once(server):
    started = time.monotonic()
    with pytest.raises(Exception, match="no-such-run") as info:
        RetryingClient(server.uri, 60).get_run("no-such-run")  # the server answers 404
    assert not isinstance(info.value, TrackingUnavailable) and time.monotonic() - started < 10


def test_reachability_check_settings_stay_with_the_check(monkeypatch):
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "77")
    monkeypatch.delenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", raising=False)
    started = time.monotonic()
    with pytest.raises(UserError, match="cannot reach"):
        check_tracking_reachable(f"http://127.0.0.1:{_free_port()}")
    assert time.monotonic() - started < 10  # one quick try, no retries
    assert os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"] == "77"
    assert "MLFLOW_HTTP_REQUEST_MAX_RETRIES" not in os.environ
