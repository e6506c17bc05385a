"""``mrbench ui [SWEEP]``: the MLflow UI on the configured tracking store, on 127.0.0.1 only,
opened on a sweep's comparison.

What the URL it prints opens, and why (MLflow 3.17's UI):

- ``workflowType=machine_learning``: the UI shows its Model-training pages (runs, models) rather
  than the GenAI overview. 3.17 takes the view from this URL parameter, else from the browser's
  last choice (GenAI at first); the ``mlflow.experimentKind`` tag that mrbench puts on its
  experiments is not what it reads.
- ``viewStateShareKey=mrbench-comparison``: a saved runs-table view, the experiment tag
  ``mlflow.sharedViewState.mrbench-comparison`` that this command writes before starting the
  server. It groups the cells by task and shows each task's primary metric after (``eval/``) and
  before (``eval_before/``) training. It also sits in the page's "Views" menu. Grouping replaces
  the nesting under the sweep's parent run because the UI keeps which parent runs are expanded
  in the browser only (a view cannot open one); the parent runs are listed under "Additional runs".
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Annotated, Any, TextIO

import typer

from mrbench.core import layout, limits
from mrbench.kit.children import stop
from mrbench.store.runs import iter_runs
from mrbench.store.uri import missing_sqlite_store

HOST = "127.0.0.1"  # loopback only: the UI has no authentication
TRAINING_VIEW = "workflowType=machine_learning"  # the UI's Model-training pages, not GenAI's
READY_WAIT_S = 60.0  # how long the first line waits for the server before naming the page anyway
VIEW_NAME = "mrbench: compare methods"  # the comparison view's name in the UI's Views menu
_RUN_NAME_COLUMN = "attributes.`Run Name`"  # the runs table's column id (MLflow 3.17)


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


def comparison_state(primary_metrics: list[str]) -> dict[str, Any]:
    """The runs-table state of the comparison view: cells grouped by task (each group row shows
    the mean over its cells), sorted by run name (``method|task|model|seed``: a method's seeds next
    to each other); right of the run name, one ``eval/<m>`` column per primary metric (after
    training), then the ``eval_before/<m>`` columns, then the run's duration.

    Column ids and widths (pixels) are the UI's: the run-name column is made wide enough for a
    cell's label and the metric columns narrow enough that those of three tasks fit at 1400 pixels.
    """
    after = [f"metrics.`{layout.eval_metric(m)}`" for m in primary_metrics]
    before = [f"metrics.`{layout.eval_before_metric(m)}`" for m in primary_metrics]
    task = {"mode": "tag", "groupByData": layout.tag(layout.TASK)}
    return {
        "selectedColumns": after + before,
        "columnOrder": [_RUN_NAME_COLUMN, *after, *before, "duration"],
        "columnWidths": {_RUN_NAME_COLUMN: 225} | dict.fromkeys(after + before, 112),
        "groupBy": {"aggregateFunction": "average", "groupByKeys": [task]},
        "orderByKey": "tags.`mlflow.runName`",
        "orderByAsc": True,
    }


def saved_view(name: str, state: dict[str, Any], now_ms: int) -> str:
    """The value of a saved-view tag: the envelope the UI's "Views" menu reads (name, creation and
    update times in epoch milliseconds, and the state as a JSON string)."""
    return json.dumps({"name": name, "createdAt": now_ms, "updatedAt": now_ms, "state": json.dumps(state)})


def primary_metrics(client: Any, experiment_id: str) -> list[str]:
    """The distinct primary metrics of the experiment's cells, sorted (one per task)."""
    cells = iter_runs(client, experiment_id, f"tags.`{layout.tag(layout.RUN_KEY)}` LIKE '%'")
    found = {layout.read_tag(run.data.tags, layout.PRIMARY_METRIC) for run in cells}
    return sorted(found - {""})


def prepare_comparison(client: Any, experiment_id: str) -> bool:
    """Write the comparison view on experiment ``experiment_id`` (and its model-training kind if it
    has none); False, with a note, when the store cannot be written (then the URL opens the runs
    page without it)."""
    state = comparison_state(primary_metrics(client, experiment_id))
    experiment = client.get_experiment(experiment_id)
    try:
        if layout.EXPERIMENT_KIND_TAG not in experiment.tags:
            client.set_experiment_tag(
                experiment_id, layout.EXPERIMENT_KIND_TAG, layout.EXPERIMENT_KIND_TRAINING
            )
        value = saved_view(VIEW_NAME, state, int(time.time() * 1000))
        client.set_experiment_tag(experiment_id, layout.SAVED_VIEW_TAG_PREFIX + layout.COMPARISON_VIEW, value)
    except Exception as exc:  # a read-only store must not keep the UI from starting
        typer.echo(f"note: could not save the comparison view ({type(exc).__name__}: {exc})")
        return False
    return True


def latest_sweep(client: Any) -> str | None:
    """Name of the experiment whose sweep started last (None if the store has no sweep)."""
    ids = [e.experiment_id for e in client.search_experiments()]
    if not ids:
        return None
    role = f"tags.`{layout.tag(layout.ROLE)}` = '{layout.ROLE_SWEEP}'"
    runs = client.search_runs(ids, role, order_by=["attributes.start_time DESC"], max_results=1)
    return client.get_experiment(runs[0].info.experiment_id).name if runs else None


def page_url(base: str, experiment_id: str | None, *, with_view: bool = True) -> str:
    """The UI page to open: the experiment's runs in the comparison view, or without an experiment
    the experiment list; both in the Model-training pages."""
    if experiment_id is None:
        return f"{base}/#/experiments?{TRAINING_VIEW}"
    view = f"viewStateShareKey={layout.COMPARISON_VIEW}&" if with_view else ""
    return f"{base}/#/experiments/{experiment_id}/runs?{view}{TRAINING_VIEW}"


def comparison_page(uri: str, base: str, sweep: str | None) -> str:
    """Prepare sweep ``sweep``'s comparison view (the latest sweep's when None) in store ``uri`` and
    return the URL that opens it; :class:`UserError` naming ``sweep`` when the store has no such
    experiment."""
    from mrbench.core.errors import UserError
    from mrbench.store.client import tracking_client

    if missing_sqlite_store(uri):
        if sweep is None:
            return page_url(base, None)
        raise UserError(f"no sweep {sweep!r}: the tracking store {uri!r} does not exist")
    client = tracking_client(uri)
    name = sweep if sweep is not None else latest_sweep(client)
    if name is None:
        return page_url(base, None)
    experiment = client.get_experiment_by_name(name)
    if experiment is None or experiment.lifecycle_stage == "deleted":
        known = sorted(e.name for e in client.search_experiments())
        raise UserError(f"no sweep {name!r} in {uri!r} (experiments: {', '.join(known) or 'none'})")
    saved = prepare_comparison(client, experiment.experiment_id)
    return page_url(base, experiment.experiment_id, with_view=saved)


def register(app: typer.Typer) -> None:
    @app.command("ui")
    def ui_cmd(
        sweep: Annotated[
            str | None,
            typer.Argument(help="Sweep to open (the MLflow experiment); default: the latest sweep."),
        ] = None,
        port: Annotated[
            int, typer.Option("--port", min=1, max=limits.PORT_MAX, help="Port on 127.0.0.1.")
        ] = 5000,
        tracking_uri: Annotated[
            str | None,
            typer.Option("--tracking-uri", help="MLflow store (default sqlite:///results/mlflow.db)."),
        ] = None,
        verbose: Annotated[
            bool,
            typer.Option(
                "--verbose",
                help="Also show what the server prints (its requests, MLflow's messages) as it comes; it "
                "is always kept in its log, results/logs/ui-<time>-<pid>.log, named in the output.",
            ),
        ] = False,
    ) -> None:
        """Start the MLflow UI on the tracking store, opened on SWEEP's cells and their primary
        metric (Ctrl-C stops it)."""
        from mrbench.core.errors import UserError
        from mrbench.store.client import check_tracking_reachable
        from mrbench.store.local import reroot_own_store, resolve_tracking_uri

        uri = resolve_tracking_uri(tracking_uri)
        if uri.startswith(("http://", "https://")):  # its own UI: only the page to open is printed
            check_tracking_reachable(uri)  # one quick try, not MLflow's minutes of retries
            page = page_url(uri.rstrip("/"), None)
            if sweep is not None:
                page = comparison_page(uri, uri.rstrip("/"), sweep)
            typer.echo(f"the tracking store is already a server: open {page}")
            return
        reroot_own_store(uri)  # a moved results folder: the UI serves artifacts from where they are now
        if not 0 < port < 65536:
            raise UserError(f"--port {port} is not a valid port (1-65535)")
        if not port_free(port):
            raise UserError(f"port {port} on {HOST} is in use; pick another with --port")
        serve(uri, port, sweep, verbose=verbose)


def serve(uri: str, port: int, sweep: str | None, *, verbose: bool = False) -> None:
    """Serve store ``uri`` on ``127.0.0.1:port`` until stopped, opened on ``sweep``'s comparison.

    mrbench's own lines go to the terminal; what MLflow and the server print (its requests, its
    warnings) goes to the log (:func:`mrbench.engine.runs.console.command_output`), also shown live with
    ``verbose``. Ctrl-C, SIGTERM and SIGHUP stop the server, and SIGINT also when the process
    inherited it ignored (a background job of a shell): see :func:`sigint_stops`.
    """
    from mrbench.core.errors import UserError
    from mrbench.engine.runs import console

    if verbose:
        console.set_verbose()
    url = f"http://{HOST}:{port}"
    with sigint_stops(), console.command_output("ui") as log_path:
        out = console.terminal()
        page = comparison_page(uri, url, sweep)
        # Own process group: `mlflow ui` starts server and worker children, and stopping must end
        # them all. Ctrl-C, SIGTERM and SIGHUP all arrive here as KeyboardInterrupt
        # (mrbench.core.interrupts, installed by mrbench.cli.app.main).
        proc = subprocess.Popen(ui_command(uri, port), env=ui_env(), start_new_session=True)
        try:
            typer.echo(f"MLflow UI for {uri}: {url}  (starting; Ctrl-C to stop)", file=out)
            if log_path is not None:
                typer.echo(f"server output: {log_path}", file=out)
            if wait_until_up(url, proc, READY_WAIT_S):
                typer.echo(f"ready: {page}", file=out)
            elif proc.poll() is not None:
                where = f"see {log_path}" if log_path is not None else "see the output above"
                raise UserError(f"the MLflow UI exited with code {proc.returncode}; {where}")
            else:  # a loaded machine: say where to go rather than nothing at all
                typer.echo(f"not answering after {READY_WAIT_S:.0f}s, still starting: {page}", file=out)
            proc.wait()
        except KeyboardInterrupt:
            _say("stopping the MLflow UI", out)
            raise
        finally:
            stop_group(proc)


@contextlib.contextmanager
def sigint_stops() -> Iterator[None]:
    """Within the block, SIGINT stops the command even where it was inherited as ignored.

    A background job of a non-interactive shell (``mrbench ui &`` in a script) starts with SIGINT
    ignored, and :mod:`mrbench.core.interrupts` keeps an inherited ignore; but a server left
    serving after ``kill -INT`` is a surprise, so here SIGINT gets what SIGTERM has (the handler
    that raises ``KeyboardInterrupt``). SIGHUP stays as inherited: ``nohup mrbench ui`` is meant
    to outlive its terminal.
    """
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        yield
        return
    handler = signal.getsignal(signal.SIGTERM)
    if not callable(handler):  # not under mrbench.cli.app.main: Python's own Ctrl-C handler
        handler = signal.default_int_handler
    signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)


def _say(message: str, out: TextIO | None = None) -> None:
    """Print ``message`` (on ``out``, default stdout); a terminal that went away (SIGHUP) must not
    keep the server from stopping."""
    try:
        typer.echo(message, file=out)
    except OSError:
        pass


def stop_group(proc: subprocess.Popen[bytes], grace_s: float = 15.0) -> None:
    """SIGTERM the process group that ``proc`` leads (it was started in a new session), wait up to
    ``grace_s`` seconds for the whole group to exit, then SIGKILL what is left of it.

    The group, not only ``proc``: a server worker that outlives its parent would keep the port.
    """
    stop(proc, signal.SIGTERM, grace_s=grace_s, group=True, whole_group=True)
