"""`mrbench ui`: the MLflow UI on 127.0.0.1, answering HTTP, stopped cleanly; bad ports refused."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient
from typer.testing import CliRunner

from mrbench.cli.app import app
from mrbench.cli.commands.ui import HOST, port_free, ui_command, ui_env
from mrbench.core.errors import UserError


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


def test_server_uri_is_just_printed() -> None:
    result = CliRunner().invoke(app, ["ui", "--tracking-uri", "http://127.0.0.1:5999"])
    assert result.exit_code == 0 and "already a server: open http://127.0.0.1:5999" in result.output


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
