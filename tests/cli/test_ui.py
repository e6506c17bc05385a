"""`mrbench ui`: the MLflow UI on 127.0.0.1, answering HTTP, stopped cleanly; bad ports refused; the
URL it prints opens the sweep's comparison view, which it saves on the sweep's experiment."""

from __future__ import annotations

import http.server
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
from fakes import FAKE_TASKS, synthetic_sweep
from mlflow.tracking import MlflowClient
from typer.testing import CliRunner

from mrbench.cli.app import app
from mrbench.cli.commands.ui import (
    HOST,
    comparison_page,
    comparison_state,
    page_url,
    port_free,
    ui_command,
    ui_env,
)
from mrbench.core import layout
from mrbench.core.errors import UserError
from mrbench.store.client import ensure_experiment


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


def test_ui_command_serves_only_loopback() -> None:
    cmd = ui_command("sqlite:////x/mlflow.db", 5001)
    assert cmd[cmd.index("--host") + 1] == "127.0.0.1" and cmd[cmd.index("--port") + 1] == "5001"
    assert cmd[cmd.index("--backend-store-uri") + 1] == "sqlite:////x/mlflow.db"


def test_ui_server_runs_without_mlflow_job_consumers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MLFLOW_SERVER_ENABLE_JOB_EXECUTION", raising=False)
    assert ui_env()["MLFLOW_SERVER_ENABLE_JOB_EXECUTION"] == "false"
    monkeypatch.setenv("MLFLOW_SERVER_ENABLE_JOB_EXECUTION", "true")  # the user's choice wins
    assert ui_env()["MLFLOW_SERVER_ENABLE_JOB_EXECUTION"] == "true"


def test_port_in_use_is_a_user_error(tmp_path: Path) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as busy:
        busy.bind((HOST, 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert not port_free(port)
        result = CliRunner().invoke(
            app, ["ui", "--port", str(port), "--tracking-uri", f"sqlite:///{tmp_path}/m.db"]
        )
    assert isinstance(result.exception, UserError) and f"port {port}" in str(result.exception)


class _EmptyTrackingServer(http.server.BaseHTTPRequestHandler):
    """Answers every MLflow REST call with an empty JSON object: a server with no experiments."""

    def _empty(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(b"{}")

    do_GET = do_POST = _empty

    def log_message(self, *args: object) -> None:
        pass


def test_server_uri_is_just_printed() -> None:
    server = http.server.ThreadingHTTPServer((HOST, 0), _EmptyTrackingServer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        uri = f"http://{HOST}:{server.server_address[1]}"
        result = CliRunner().invoke(app, ["ui", "--tracking-uri", uri])
    finally:
        server.shutdown()
    assert result.exit_code == 0 and f"already a server: open {uri}" in result.output


def test_a_server_that_does_not_answer_is_named_without_a_sweep(monkeypatch: pytest.MonkeyPatch) -> None:
    # Item 5 of issue 36: without SWEEP this printed a page to open and exited 0.
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"http://{HOST}:1")
    result = CliRunner().invoke(app, ["ui"])
    assert isinstance(result.exception, UserError), result.output
    assert f"http://{HOST}:1" in str(result.exception) and "already a server" not in result.output


@pytest.mark.slow
def test_ui_starts_answers_http_and_stops(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    MlflowClient(tracking_uri=uri).search_experiments()
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "mrbench", "ui", "--port", str(port), "--tracking-uri", uri],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        status = None
        while time.monotonic() < deadline and status is None:
            try:
                with urllib.request.urlopen(f"http://{HOST}:{port}/", timeout=2) as response:
                    status = response.status
            except OSError:
                time.sleep(0.5)
        assert status == 200
        proc.send_signal(signal.SIGTERM)  # like Ctrl-C: the command stops the server it started
        output, _ = proc.communicate(timeout=60)
        assert f"http://{HOST}:{port}" in output
        deadline = time.monotonic() + 30
        while not port_free(port) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert port_free(port)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


# --- the comparison the printed URL opens ------------------------------------------------------


def test_comparison_view_groups_cells_by_task_with_primary_metric_columns() -> None:
    state = comparison_state(["exact_match", "pass_at_1"])
    after = ["metrics.`eval/exact_match`", "metrics.`eval/pass_at_1`"]
    before = ["metrics.`eval_before/exact_match`", "metrics.`eval_before/pass_at_1`"]
    assert state["selectedColumns"] == after + before
    assert state["columnOrder"][1:] == [*after, *before, "duration"]  # after the run name
    assert state["groupBy"]["groupByKeys"] == [{"mode": "tag", "groupByData": "mrbench.task"}]
    assert state["orderByKey"] == "tags.`mlflow.runName`" and state["orderByAsc"] is True


def test_page_urls_open_the_model_training_pages() -> None:
    base = "http://127.0.0.1:5000"
    assert page_url(base, None) == f"{base}/#/experiments?workflowType=machine_learning"
    assert page_url(base, "7") == (
        f"{base}/#/experiments/7/runs?viewStateShareKey={layout.COMPARISON_VIEW}&workflowType=machine_learning"
    )
    assert "viewStateShareKey" not in page_url(base, "7", with_view=False)


@pytest.fixture
def results(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, new_store: Callable[[Path], str]) -> str:
    """A private results folder with an empty store; returns the store's URI."""
    monkeypatch.setenv("MRBENCH_RESULTS", str(tmp_path / "results"))
    return new_store(tmp_path / "results")


def _sweep(uri: str, *names: str) -> str:
    for name in names:
        synthetic_sweep(
            uri, name, methods=["grpo"], tasks=["tool-calling", "code-generation"], models=["tiny"], seeds=[0]
        )
    return uri


def test_comparison_page_saves_the_view_on_the_sweep(results: str) -> None:
    uri = _sweep(results, "first", "second")
    client = MlflowClient(tracking_uri=uri)
    first = client.get_experiment_by_name("first").experiment_id
    url = comparison_page(uri, "http://h:1", "first")
    assert url == page_url("http://h:1", first)
    tags = client.get_experiment(first).tags
    envelope = json.loads(tags[layout.SAVED_VIEW_TAG_PREFIX + layout.COMPARISON_VIEW])
    assert envelope["name"] and isinstance(envelope["createdAt"], int)  # what the Views menu lists
    primaries = sorted(
        {FAKE_TASKS["tool-calling"].primary_metric, FAKE_TASKS["code-generation"].primary_metric}
    )
    assert json.loads(envelope["state"]) == comparison_state(primaries)
    assert tags[layout.EXPERIMENT_KIND_TAG] == layout.EXPERIMENT_KIND_TRAINING  # set at creation
    # Without a sweep named: the sweep that started last.
    second = client.get_experiment_by_name("second").experiment_id
    assert comparison_page(uri, "http://h:1", None) == page_url("http://h:1", second)


def test_new_experiments_are_model_training(results: str) -> None:
    experiment_id = ensure_experiment("fresh", results)
    tags = MlflowClient(tracking_uri=results).get_experiment(experiment_id).tags
    assert tags[layout.EXPERIMENT_KIND_TAG] == layout.EXPERIMENT_KIND_TRAINING


def test_store_without_sweeps_opens_the_experiment_list(
    tmp_path: Path, new_store: Callable[[Path], str]
) -> None:
    uri = new_store(tmp_path)
    assert comparison_page(uri, "http://h:1", None) == page_url("http://h:1", None)
    assert comparison_page(f"sqlite:///{tmp_path / 'none.db'}", "http://h:1", None) == page_url(
        "http://h:1", None
    )


def test_unknown_sweep_is_a_user_error_naming_it(tmp_path: Path, results: str) -> None:
    uri = _sweep(results, "real")
    result = CliRunner().invoke(app, ["ui", "nope", "--port", str(free_port()), "--tracking-uri", uri])
    assert isinstance(result.exception, UserError)
    assert "no sweep 'nope'" in str(result.exception) and "real" in str(result.exception)
    missing = f"sqlite:///{tmp_path / 'missing.db'}"
    result = CliRunner().invoke(app, ["ui", "nope", "--port", str(free_port()), "--tracking-uri", missing])
    assert isinstance(result.exception, UserError) and "does not exist" in str(result.exception)
    assert not (tmp_path / "missing.db").exists()


def test_sweep_on_an_unreachable_server_fails_fast() -> None:
    result = CliRunner().invoke(app, ["ui", "s", "--tracking-uri", f"http://{HOST}:{free_port()}"])
    assert isinstance(result.exception, UserError) and "cannot reach" in str(result.exception)


# --- the terminal and the stop signals (a stand-in server: tests/cli/fake_ui_cli.py) ------------

FAKE_UI_CLI = Path(__file__).with_name("fake_ui_cli.py")


def _start_fake_ui(tmp_path: Path, *args: str, sigint_ignored: bool = False) -> tuple[subprocess.Popen, int]:
    """``mrbench ui ARGS`` with the stand-in server, once it answers; SIGINT ignored from the start
    with ``sigint_ignored``, as in a background job of a non-interactive shell (``mrbench ui &``)."""
    from cli_procs import default_stop_signals

    def signals() -> None:
        default_stop_signals()
        if sigint_ignored:
            signal.signal(signal.SIGINT, signal.SIG_IGN)

    port = free_port()
    env = {**os.environ, "MRBENCH_RESULTS": str(tmp_path / "results")}
    env.pop("MRBENCH_VERBOSE", None)
    uri = f"sqlite:///{tmp_path / 'none' / 'mlflow.db'}"
    proc = subprocess.Popen(
        [sys.executable, str(FAKE_UI_CLI), "ui", "--port", str(port), "--tracking-uri", uri, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        preexec_fn=signals,
        start_new_session=True,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with urllib.request.urlopen(f"http://{HOST}:{port}/probe", timeout=2):
                return proc, port
        except OSError:
            time.sleep(0.2)
    _kill(proc)
    pytest.fail(f"the stand-in server did not answer: {proc.communicate()}")


def _kill(proc: subprocess.Popen, server: tuple[int, ...] | list[int] = ()) -> None:
    for pgid in (proc.pid, *server):
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait()


def test_ui_prints_its_own_lines_and_logs_the_servers_output(tmp_path: Path) -> None:
    """The server's output (its start, a library warning, each request) goes to a log named in the
    output, not to the terminal; ``--verbose`` shows it live as well."""
    from fake_ui_cli import STARTED, WARNING

    proc, port = _start_fake_ui(tmp_path)
    try:
        time.sleep(0.5)  # the access-log line of the request is written
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        _kill(proc)
    shown = out + err
    assert proc.returncode == 143, shown
    assert not [n for n in (STARTED, WARNING, "GET /probe") if n in shown], shown
    assert f"http://{HOST}:{port}" in out and "stopping the MLflow UI" in out
    (named,) = [line.split(": ", 1)[1] for line in out.splitlines() if line.startswith("server output: ")]
    log = Path(named)
    assert log.parent == tmp_path / "results" / "logs", out
    assert all(n in log.read_text() for n in (STARTED, WARNING, "GET /probe")), log.read_text()

    proc, _port = _start_fake_ui(tmp_path, "--verbose")
    try:
        time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        _kill(proc)
    assert all(n in out + err for n in (STARTED, WARNING, "GET /probe")), out + err


def test_sigint_stops_a_ui_that_inherited_it_ignored(tmp_path: Path) -> None:
    """``mrbench ui &`` in a script starts with SIGINT ignored; ``kill -INT`` still stops it and its
    server, as SIGTERM and SIGHUP do."""
    from cli_procs import descendants, in_group

    proc, _port = _start_fake_ui(tmp_path, sigint_ignored=True)
    server = descendants(proc.pid)
    try:
        assert server
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
        assert proc.returncode == 130, out + err
        assert "stopping the MLflow UI" in out
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and any(in_group(pid) for pid in server):
            time.sleep(0.2)
        assert not [pid for pid in server if in_group(pid)]  # the server (its own group) is gone too
    finally:
        _kill(proc, server)
