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


def ui_env() -> dict[str, str]:
    """The server's environment: MLflow's background job runner off unless the user turns it on.

    Browsing runs needs none of its (GenAI) jobs, and by default it starts half a dozen extra
    consumer processes that each poll the store, for as long as the UI is open.
    """
    return {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false", **os.environ}


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
        from mrbench.engine.tracking import reroot_own_store, resolve_tracking_uri

        uri = resolve_tracking_uri(tracking_uri)
        if uri.startswith(("http://", "https://")):
            typer.echo(f"the tracking store is already a server: open {uri}")
            return
        reroot_own_store(uri)  # a moved results folder: the UI serves artifacts from where they are now
        if not 0 < port < 65536:
            raise UserError(f"--port {port} is not a valid port (1-65535)")
        if not port_free(port):
            raise UserError(f"port {port} on {HOST} is in use; pick another with --port")
        url = f"http://{HOST}:{port}"
        # Own process group: `mlflow ui` starts server and worker children, and stopping must end
        # them all. Ctrl-C, SIGTERM and SIGHUP all arrive here as KeyboardInterrupt
        # (mrbench.core.interrupts, installed by mrbench.cli.app.main).
        proc = subprocess.Popen(ui_command(uri, port), env=ui_env(), start_new_session=True)
        try:
            typer.echo(f"MLflow UI for {uri}: {url}  (starting; Ctrl-C to stop)")
            if wait_until_up(url, proc):
                typer.echo(f"ready: {url}")
            elif proc.poll() is not None:
                raise UserError(f"the MLflow UI exited with code {proc.returncode}; see the output above")
            proc.wait()
        except KeyboardInterrupt:
            _say("stopping the MLflow UI")
            raise
        finally:
            stop_group(proc)


def _say(message: str) -> None:
    """Print ``message``; a terminal that went away (SIGHUP) must not keep the server from stopping."""
    try:
        typer.echo(message)
    except OSError:
        pass


def stop_group(proc: subprocess.Popen[bytes], grace_s: float = 15.0) -> None:
    """SIGTERM the process group that ``proc`` leads (it was started in a new session), wait up to
    ``grace_s`` seconds for the whole group to exit, then SIGKILL what is left of it.

    The group, not only ``proc``: a server worker that outlives its parent would keep the port.
    """
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        proc.poll()
        return
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        proc.poll()  # reap the leader, so that an exited group reads as gone
        if not _group_alive(proc.pid):
            return
        time.sleep(0.1)
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def _group_alive(pgid: int) -> bool:
    """True while some process of group ``pgid`` exists (signal 0 checks without sending)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
