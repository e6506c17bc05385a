"""``mrbench ui``: the MLflow UI on the configured tracking store, on 127.0.0.1 only."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from typing import Annotated

import typer

HOST = "127.0.0.1"  # loopback only: the UI has no authentication


def ui_command(tracking_uri: str, port: int) -> list[str]:
    """The ``mlflow ui`` command line serving ``tracking_uri`` on ``127.0.0.1:port``."""
    return [
        sys.executable,
        "-m",
        "mlflow",
        "ui",
        "--backend-store-uri",
        tracking_uri,
        "--host",
        HOST,
        "--port",
        str(port),
        "--workers",
        "1",
    ]


def port_free(port: int) -> bool:
    """True if nothing listens on ``127.0.0.1:port``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((HOST, port))
        except OSError:
            return False
    return True


def wait_until_up(url: str, proc: subprocess.Popen[bytes], timeout_s: float = 60.0) -> bool:
    """Poll ``url`` until it answers HTTP (True), the process exits or ``timeout_s`` passes (False)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                return response.status < 500
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            time.sleep(0.5)
    return False


def register(app: typer.Typer) -> None:
    @app.command("ui")
    def ui_cmd(
        port: Annotated[int, typer.Option("--port", help="Port on 127.0.0.1.")] = 5000,
        tracking_uri: Annotated[
            str | None,
            typer.Option("--tracking-uri", help="MLflow store (default sqlite:///results/mlflow.db)."),
        ] = None,
    ) -> None:
        """Start the MLflow UI on the tracking store (Ctrl-C stops it)."""
        from mrbench.core.errors import UserError
        from mrbench.engine.tracking import resolve_tracking_uri

        uri = resolve_tracking_uri(tracking_uri)
        if uri.startswith(("http://", "https://")):
            typer.echo(f"the tracking store is already a server: open {uri}")
            return
        if not 0 < port < 65536:
            raise UserError(f"--port {port} is not a valid port (1-65535)")
        if not port_free(port):
            raise UserError(f"port {port} on {HOST} is in use; pick another with --port")
        url = f"http://{HOST}:{port}"
        # Own process group: `mlflow ui` starts a uvicorn child, and stopping must end both.
        proc = subprocess.Popen(ui_command(uri, port), start_new_session=True)
        previous = signal.signal(signal.SIGTERM, _raise_interrupt)
        typer.echo(f"MLflow UI for {uri}: {url}  (starting; Ctrl-C to stop)")
        try:
            if wait_until_up(url, proc):
                typer.echo(f"ready: {url}")
            elif proc.poll() is not None:
                raise UserError(f"the MLflow UI exited with code {proc.returncode}; see the output above")
            proc.wait()
        except KeyboardInterrupt:
            typer.echo("stopping the MLflow UI")
        finally:
            signal.signal(signal.SIGTERM, previous)
            stop_group(proc)


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def stop_group(proc: subprocess.Popen[bytes], grace_s: float = 15.0) -> None:
    """SIGTERM the process group that ``proc`` leads (it was started in a new session), then
    SIGKILL the group if ``proc`` has not exited after ``grace_s`` seconds."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=grace_s)
    except ProcessLookupError:
        pass
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
