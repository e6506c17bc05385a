"""MLflow store resolution, logging that rides out a store outage, and small logging helpers.

Default store: ``sqlite:///<results>/mlflow.db`` with artifacts under ``<results>/artifacts``,
where ``<results>`` is ``$MRBENCH_RESULTS`` or ``./results``. ``--tracking-uri`` or
``MLFLOW_TRACKING_URI`` point at a server (or another store) instead.

Outages. A tracking server that restarts must not cost a run. :class:`RetryingClient` retries
every call that fails for a reason a restart explains (no connection, a timeout, a 5xx/429
answer) with exponential backoff for a bounded time, :func:`tracking_retry_s` (default
:data:`DEFAULT_RETRY_S`, long enough for a server restart), then raises
:class:`TrackingUnavailable`. :class:`RunLog` is what a cell logs through: past the bound it
keeps everything locally instead of failing, so training goes on, and :meth:`RunLog.flush` sends
it later. :func:`check_tracking_reachable`'s short, no-retry settings apply to the check alone.

Moving the results folder. MLflow records absolute locations: an experiment's ``artifact_location``
(``file://<results>/artifacts``) and, from it, each run's ``artifact_uri``
(``<artifact_location>/<run_id>/artifacts``). So that a results folder moved or copied elsewhere keeps
its artifacts, those locations are taken as relative to the folder the store is in:

- writing: before mrbench writes to its own store (``sqlite:///<results>/mlflow.db``, ``<results>``
  per ``$MRBENCH_RESULTS``) — :func:`check_tracking_reachable` and :func:`ensure_experiment` —
  :func:`reroot_moved_store` rewrites, with SQL in one transaction (MLflow has no API for it), the
  locations that still name another results folder's ``artifacts/``, and the ``checkpoint_dir``
  params under it, to this folder; once, with a warning "results folder moved from X: re-rooted N
  experiment(s)". New runs, and artifacts logged later to old runs, then go to the new folder. An
  experiment is re-rooted when its old folder is gone, or when this folder holds its runs'
  artifacts (a copy); never when the old path is this same folder seen through another path.
- reading: the report re-roots on read (:mod:`mrbench.reporting.store`) and writes no store, so it
  also works on a moved store nothing has re-rooted yet (one that cannot be written, say);
- a record of what an outage kept (:mod:`mrbench.engine.checkpoints`) is re-rooted when read.

A results folder is used from one path at a time: the same folder used at once from two paths
(a container and its host, say) would be re-rooted back and forth.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import subprocess
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from mrbench.core import layout
from mrbench.core.errors import UserError

log = logging.getLogger(__name__)

DEFAULT_RETRY_S = 300.0
"""How long a call to the store is retried by default: a server restart, with a wide margin."""
RETRY_ENV = "MRBENCH_TRACKING_RETRY_S"
"""Environment variable for the retry bound (how sweep workers get one; ``mrbench run --tracking-retry-s``
passes its own)."""
# Waits 1, 2, 4, 5, 5, ... s: a store that is back is used within 5 s; one request per 5 s costs it nothing.
_BACKOFF_FIRST_S, _BACKOFF_MAX_S = 1.0, 5.0
_MAX_PARAM_CHARS = 6000  # MLflow's limit on a param value
STORE_DB = "mlflow.db"
"""The default store's file, ``<results>/mlflow.db``."""
ARTIFACTS_DIR = "artifacts"
"""The default store's artifact root, ``<results>/artifacts``; MLflow keeps a run's artifacts under
``<root>/<run_id>/artifacts`` (:func:`run_artifacts_folder`)."""


class TrackingUnavailable(UserError):
    """The tracking store stayed unreachable past the retry bound; the message says what to do."""


def results_dir() -> Path:
    """The local results folder (created if missing); :class:`UserError` if it cannot be."""
    path = Path(os.environ.get("MRBENCH_RESULTS", "results")).resolve()
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # a file in the way, a read-only or missing parent
        what = "MRBENCH_RESULTS" if "MRBENCH_RESULTS" in os.environ else "the default ./results"
        reason = "it is a file" if path.exists() else (exc.strerror or str(exc))
        raise UserError(f"results folder {path} ({what}) cannot be used: {reason}") from None
    return path


def check_store_writable(uri: str) -> None:
    """:class:`UserError` when a local sqlite store or the results folder cannot be written
    (read-only file system or permissions): checked before a run starts, not after it failed."""
    if not uri.startswith("sqlite:///"):
        return
    db = Path(uri.removeprefix("sqlite:///"))
    for path in (db, db.parent, results_dir()):
        if path.exists() and not os.access(path, os.W_OK):
            raise UserError(
                f"the MLflow tracking store {uri!r} cannot be written: {path} is read-only; point "
                "--tracking-uri or MRBENCH_RESULTS at a writable folder"
            )


def resolve_tracking_uri(uri: str | None = None) -> str:
    """Explicit URI, else ``$MLFLOW_TRACKING_URI``, else the sqlite store under :func:`results_dir`."""
    if uri:
        return uri
    env = os.environ.get("MLFLOW_TRACKING_URI")
    if env:
        return env
    return f"sqlite:///{results_dir() / STORE_DB}"


def run_artifacts_folder(results: Path, run_id: str) -> Path:
    """Where run ``run_id`` of an experiment rooted at ``<results>/artifacts`` keeps its artifacts."""
    return results / ARTIFACTS_DIR / run_id / "artifacts"


def _own_results_folder(uri: str) -> Path | None:
    """The results folder when ``uri`` is mrbench's own store ``sqlite:///<results>/mlflow.db``, else
    None. ``<results>`` as :func:`results_dir` names it, not created here."""
    if not uri.startswith("sqlite:///"):
        return None
    results = Path(os.environ.get("MRBENCH_RESULTS", "results")).resolve()
    return results if Path(uri.removeprefix("sqlite:///")).resolve() == results / STORE_DB else None


def _local_path(location: str) -> Path | None:
    """The folder of a ``file:`` URI or a plain path; None for any other scheme."""
    if location.startswith("file:"):
        return Path(unquote(urlparse(location).path))
    return None if "://" in location else Path(location)


def _moved_from(db: sqlite3.Connection, experiment_id: int, location: str, results: Path) -> Path | None:
    """The other results folder experiment ``experiment_id``'s ``location`` names, if its artifacts
    belong in ``results`` now (see the module docstring); else None."""
    old = _local_path(location)
    if old is None or old.name != ARTIFACTS_DIR or old.parent == results:
        return None
    old_db = old.parent / STORE_DB
    if old_db.exists() and os.path.samefile(old_db, results / STORE_DB):
        return None  # this very folder, through another path
    if not old.is_dir():
        return old.parent  # moved (or renamed) away
    run_ids = db.execute("SELECT run_uuid FROM runs WHERE experiment_id = ?", (experiment_id,))
    return old.parent if any((results / ARTIFACTS_DIR / r).is_dir() for (r,) in run_ids) else None


def _swap_prefix(
    db: sqlite3.Connection, table: str, column: str, old: str, new: str, experiment_id: int, param: str = ""
) -> int:
    """In the rows of experiment ``experiment_id`` (of its runs' params named ``param`` for ``params``),
    replace the prefix ``old`` of ``table.column`` by ``new``; return how many rows changed."""
    where = "experiment_id = ?"
    if param:
        where = f"key = '{param}' AND run_uuid IN (SELECT run_uuid FROM runs WHERE {where})"
    sql = (
        f"UPDATE {table} SET {column} = ? || substr({column}, ?) WHERE substr({column}, 1, ?) = ? AND {where}"
    )
    return db.execute(sql, (new, len(old) + 1, len(old), old, experiment_id)).rowcount


def reroot_moved_store(results: Path) -> int:
    """Point the experiments of ``<results>/mlflow.db`` whose artifacts moved here with the folder at
    ``<results>/artifacts``; return how many were re-rooted (0 when none was, or the store cannot be
    written: the warning says so, and the report still reads the moved artifacts).

    One transaction rewrites ``experiments.artifact_location``, the ``runs.artifact_uri`` under it and
    the runs' ``checkpoint_dir`` params under the old folder. Cheap when there is nothing to do (one
    query); done again by a later call only if the folder moves again.
    """
    results = results.resolve()
    if not (results / STORE_DB).is_file():
        return 0
    new_root = (results / ARTIFACTS_DIR).as_uri()
    db = sqlite3.connect(results / STORE_DB, timeout=60)  # a sweep writing meanwhile: wait for it
    try:
        exists = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'experiments'"
        if db.execute(exists).fetchone() is None:
            return 0  # MLflow has not created its tables yet
        experiments = db.execute("SELECT experiment_id, artifact_location FROM experiments").fetchall()
        moves = [(e, loc, old) for e, loc in experiments if (old := _moved_from(db, e, loc, results))]
        n_experiments = n_runs = 0
        with db:  # all or nothing
            for exp, location, old in moves:
                n_experiments += _swap_prefix(db, "experiments", "artifact_location", location, new_root, exp)
                n_runs += _swap_prefix(db, "runs", "artifact_uri", f"{location}/", f"{new_root}/", exp)
                _swap_prefix(
                    db, "params", "value", f"{old}/", f"{results}/", exp, layout.PARAM_CHECKPOINT_DIR
                )
    except sqlite3.Error as exc:
        log.warning(
            "results folder %s: its store names artifacts in another folder and cannot be re-rooted (%s); "
            "new runs would write there: make %s writable",
            results,
            exc,
            results / STORE_DB,
        )
        return 0
    finally:
        db.close()
    if n_experiments:  # 0 when another process re-rooted it first
        olds = ", ".join(sorted({str(old) for _, _, old in moves}))
        log.warning(
            "results folder moved from %s: re-rooted %d experiment(s) (%d runs) to %s",
            olds,
            n_experiments,
            n_runs,
            results,
        )
    return n_experiments


def reroot_own_store(uri: str) -> None:
    """:func:`reroot_moved_store` when ``uri`` is mrbench's own store (other stores are left alone)."""
    results = _own_results_folder(uri)
    if results is not None:
        reroot_moved_store(results)


def _is_local_store(uri: str) -> bool:
    return uri.startswith("sqlite:") or uri.startswith("file:") or "://" not in uri


def tracking_retry_s(value: float | None = None) -> float:
    """The retry bound in seconds: ``value``, else ``$MRBENCH_TRACKING_RETRY_S``, else
    :data:`DEFAULT_RETRY_S`."""
    raw: Any = value if value is not None else os.environ.get(RETRY_ENV, DEFAULT_RETRY_S)
    try:
        seconds = float(raw)
    except ValueError:
        raise UserError(f"{RETRY_ENV}={raw!r} is not a number of seconds") from None
    if not seconds >= 0:
        raise UserError(f"the tracking retry bound must be ≥ 0 seconds, got {raw!r}")
    return seconds


@contextmanager
def _mlflow_http_settings(**values: int) -> Iterator[None]:
    """MLflow's per-request HTTP settings (``max_retries=0`` → ``MLFLOW_HTTP_REQUEST_MAX_RETRIES=0``)
    for the calls inside the block only; the process's own values come back afterwards.

    MLflow reads these variables on every request, so nothing outside the block sees them.
    """
    saved: dict[str, str | None] = {}
    for name, value in values.items():
        var = f"MLFLOW_HTTP_REQUEST_{name.upper()}"
        saved[var] = os.environ.get(var)
        os.environ[var] = str(value)
    try:
        yield
    finally:
        for var, old in saved.items():
            if old is None:
                os.environ.pop(var, None)
            else:
                os.environ[var] = old


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__


def _root_cause(exc: BaseException) -> str:
    """``"Type: message"`` of the innermost exception ``exc`` was raised from (MLflow's own message
    for an unreachable server is a long URL; the innermost one says "Connection refused")."""
    seen: set[int] = set()
    while id(exc) not in seen:
        seen.add(id(exc))
        inner = exc.__cause__ or exc.__context__
        if inner is None:
            break
        exc = inner
    return f"{type(exc).__name__}: {_first_line(exc)}"


@contextmanager
def _store_creation_lock(uri: str) -> Iterator[None]:
    """Hold ``<db>.lock`` while a local sqlite store is opened for the first time.

    Opening a new sqlite store creates its tables and runs MLflow's migrations; two processes
    doing that at once (two sweeps or runs started together on a fresh results folder) fail with
    errors such as "No such constraint: 'uq_experiments_name'". The lock costs a file open; a
    server creates its tables itself, once, so other URIs take none.
    """
    if not uri.startswith("sqlite:///"):
        yield
        return
    from filelock import FileLock

    db = Path(uri.removeprefix("sqlite:///"))
    with FileLock(str(db) + ".lock", timeout=600):
        yield


def check_tracking_reachable(uri: str) -> None:
    """Fail early (before any training) if the tracking store cannot be reached.

    A server gets one quick try (no retries, 5 s timeout); those settings hold for this check alone.
    """
    from mlflow.tracking import MlflowClient

    if uri.startswith("sqlite:///"):
        parent = Path(uri.removeprefix("sqlite:///")).parent
        if not parent.exists():
            raise UserError(f"tracking store folder {parent} does not exist (from --tracking-uri {uri!r})")
        check_store_writable(uri)
    try:
        with _mlflow_http_settings(max_retries=0, timeout=5), _store_creation_lock(uri):
            MlflowClient(tracking_uri=uri).search_experiments(max_results=1)
    except Exception as exc:  # MLflow raises many types for an unreachable store
        raise UserError(f"cannot reach the MLflow tracking store {uri!r}: {_first_line(exc)}") from None
    reroot_own_store(uri)  # what runs next writes: after a move, to the folder the store is in now


def is_transient(exc: BaseException) -> bool:
    """True when ``exc`` (or an exception it was raised from) is what a store restart looks like:
    no connection, a timeout, or a 5xx/429 answer (``requests``' ``RetryError``)."""
    import requests

    kinds = (
        requests.ConnectionError,
        requests.Timeout,
        requests.exceptions.RetryError,
        ConnectionError,
        TimeoutError,
    )
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, kinds):
            return True
        current = current.__cause__ or current.__context__
    return False


class RetryingClient:
    """An ``MlflowClient`` whose calls ride out a store outage of up to ``retry_s`` seconds.

    ``client.log_batch(...)`` (any ``MlflowClient`` method) runs the call; when it fails for a
    transient reason (:func:`is_transient`) it is tried again after 1, 2, 4, 5, 5, ... s
    until ``retry_s`` seconds have passed since its first failure, then
    :class:`TrackingUnavailable` is raised. Other errors are raised at once. MLflow's own
    per-request retries are off inside these calls, so the bound is this one: a call ends at most
    ``retry_s`` plus one request timeout (``MLFLOW_HTTP_REQUEST_TIMEOUT``) after it first failed.
    One warning is logged when a call starts failing and one when the store answers again.
    """

    def __init__(self, tracking_uri: str, retry_s: float | None = None, *, mlflow: Any = None) -> None:
        from mlflow.tracking import MlflowClient

        self.tracking_uri = tracking_uri
        self.retry_s = tracking_retry_s(retry_s)
        self.mlflow = mlflow if mlflow is not None else MlflowClient(tracking_uri=tracking_uri)

    def bounded(self, retry_s: float) -> RetryingClient:
        """The same client with another retry bound (e.g. a short one on the way out of a failed run)."""
        return RetryingClient(self.tracking_uri, retry_s, mlflow=self.mlflow)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name == "mlflow":  # not an MlflowClient method (or not set up yet)
            raise AttributeError(name)
        method = getattr(self.mlflow, name)
        if not callable(method):
            return method

        def call(*args: Any, **kwargs: Any) -> Any:
            return self.call(name, method, *args, **kwargs)

        return call

    def call(self, name: str, method: Any, *args: Any, **kwargs: Any) -> Any:
        """``method(*args, **kwargs)`` with retries (``name`` is what the messages call it)."""
        first_failure: float | None = None
        attempt = 0
        while True:
            try:
                with _mlflow_http_settings(max_retries=0):
                    result = method(*args, **kwargs)
            except Exception as exc:
                if not is_transient(exc):
                    raise
                now = time.monotonic()
                if first_failure is None:
                    first_failure = now
                    log.warning(
                        "tracking store %s unreachable (%s); retrying %s for up to %g s",
                        self.tracking_uri,
                        _root_cause(exc),
                        name,
                        self.retry_s,
                    )
                waited = now - first_failure
                if waited >= self.retry_s:
                    raise TrackingUnavailable(
                        f"tracking store {self.tracking_uri} unreachable for {waited:.0f} s during {name} "
                        f"({_root_cause(exc)}); the bound is {self.retry_s:g} s (--tracking-retry-s, "
                        f"${RETRY_ENV})"
                    ) from None
                time.sleep(min(_BACKOFF_FIRST_S * 2**attempt, _BACKOFF_MAX_S, self.retry_s - waited))
                attempt += 1
                continue
            if first_failure is not None:
                log.warning(
                    "tracking store %s answers again (%s after %.0f s)",
                    self.tracking_uri,
                    name,
                    time.monotonic() - first_failure,
                )
            return result


def ensure_experiment(name: str, tracking_uri: str, *, client: Any = None) -> str:
    """Id of experiment ``name``, creating it (artifacts under ``results/artifacts`` for local stores).

    ``client``: the ``MlflowClient`` (or :class:`RetryingClient`) to use; a plain one by default.
    """
    from mlflow.tracking import MlflowClient

    client = client if client is not None else MlflowClient(tracking_uri=tracking_uri)
    reroot_own_store(tracking_uri)  # before a new run takes its location from the experiment's
    existing = client.get_experiment_by_name(name)
    if existing is not None:
        if existing.lifecycle_stage == "deleted":
            client.restore_experiment(existing.experiment_id)
        return existing.experiment_id
    location = None
    if _is_local_store(tracking_uri):
        location = (results_dir() / ARTIFACTS_DIR).as_uri()
    try:
        # MLflow's experiment kind: model training, not a GenAI app (`mrbench ui` says what the UI reads).
        kind = {layout.EXPERIMENT_KIND_TAG: layout.EXPERIMENT_KIND_TRAINING}
        return client.create_experiment(name, artifact_location=location, tags=kind)
    except TrackingUnavailable:
        raise
    except Exception:
        # Another worker may have created it between our lookup and create.
        again = client.get_experiment_by_name(name)
        if again is None:
            raise
        return again.experiment_id


def git_sha() -> str:
    """Commit of the working tree the harness runs from ("unknown" outside git); "+dirty" if the
    ``mrbench`` package's files differ from it (an edited README or a written report is not code)."""
    here = Path(__file__).resolve().parents[1]  # the mrbench package folder
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=5, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no", "--", "."],
            cwd=here,
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return sha + ("+dirty" if dirty else "")


def write_json(path: Path, obj: Any) -> None:
    """Write ``obj`` as JSON (``.json``) or JSON lines (``.jsonl``, obj a list of rows) at ``path``."""
    with path.open("w", encoding="utf-8") as fh:
        if path.name.endswith(".jsonl"):
            for row in obj:
                fh.write(json.dumps(row, default=_jsonable) + "\n")
        else:
            json.dump(obj, fh, indent=2, default=_jsonable)


class RunLog:
    """What one cell logs to its MLflow run, through a :class:`RetryingClient`.

    While the store answers, each call is sent at once. When one fails past the client's retry
    bound the log goes *offline*: that call and every later one are kept in :attr:`pending`
    (JSON-ready entries, see below; artifact files stay under ``spool`` at their artifact paths)
    and nothing more is sent until :meth:`flush`. A cell thus trains through an outage of any
    length. :meth:`flush` sends what is pending, in order, and raises :class:`TrackingUnavailable`
    while the store is still down, keeping the rest; a later process finishes the job with
    ``RunLog(client, run_id, spool, pending).flush()`` (see :mod:`mrbench.engine.runner`).

    Pending entries: ``{"op": "log", "metrics": [[key, value, timestamp_ms, step], ...],
    "params": {key: value}, "tags": {key: value}}`` and ``{"op": "artifact", "path": artifact
    path}``. Sending one twice is harmless (MLflow keeps a metric point once and accepts a param
    again with the same value), which is what happens when the store took a call but its answer
    was lost. Ending the run is the caller's (``client.set_terminated``), after :meth:`flush`.
    """

    def __init__(
        self, client: RetryingClient, run_id: str, spool: Path, pending: list[dict[str, Any]] | None = None
    ) -> None:
        self.client = client
        self.run_id = run_id
        self.spool = spool
        self.pending: list[dict[str, Any]] = list(pending or [])

    @property
    def offline(self) -> bool:
        """True once something could not be sent (everything after it is kept too, in order)."""
        return bool(self.pending)

    def metrics(self, values: Mapping[str, float], step: int) -> None:
        """Log ``{name: value}`` at ``step``, stamped now."""
        if values:
            now = int(time.time() * 1000)
            self._send({"op": "log", "metrics": [[k, float(v), now, step] for k, v in values.items()]})

    def params(self, values: Mapping[str, str]) -> None:
        """Log params (values cut to MLflow's 6000 characters)."""
        if values:
            self._send({"op": "log", "params": {k: str(v)[:_MAX_PARAM_CHARS] for k, v in values.items()}})

    def tags(self, values: Mapping[str, str]) -> None:
        """Set tags."""
        if values:
            self._send({"op": "log", "tags": dict(values)})

    def json_artifact(self, obj: Any, artifact_path: str) -> None:
        """Log ``obj`` as the JSON (``.json``) or JSON-lines (``.jsonl``) artifact ``artifact_path``."""
        path = self.spool / artifact_path
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json(path, obj)
        self._send({"op": "artifact", "path": artifact_path})

    def flush(self) -> None:
        """Send everything pending, in order; :class:`TrackingUnavailable` (the rest kept) if the store
        is still unreachable past the bound."""
        while self.pending:
            self._apply(self.pending[0])
            self.pending.pop(0)

    def _send(self, entry: dict[str, Any]) -> None:
        if self.pending:
            self.pending.append(entry)
            return
        try:
            self._apply(entry)
        except TrackingUnavailable as exc:
            log.warning("%s; keeping run %s's log locally and going on", exc, self.run_id)
            self.pending.append(entry)

    def _apply(self, entry: dict[str, Any]) -> None:
        from mlflow.entities import Metric, Param, RunTag

        op = entry["op"]
        if op == "log":
            self.client.log_batch(
                self.run_id,
                metrics=[Metric(k, v, ts, step) for k, v, ts, step in entry.get("metrics", [])],
                params=[Param(k, v) for k, v in entry.get("params", {}).items()],
                tags=[RunTag(k, v) for k, v in entry.get("tags", {}).items()],
            )
        elif op == "artifact":
            local, folder = self.spool / entry["path"], entry["path"].rpartition("/")[0]
            self.client.log_artifact(self.run_id, str(local), artifact_path=folder or None)
        else:
            raise ValueError(f"unknown pending log entry {entry!r}")


def _jsonable(value: Any) -> Any:
    if hasattr(value, "tolist"):
        return value.tolist()
    return str(value)


def end_run_quietly(
    client: RetryingClient, run_id: str, status: str, error: str | None = None, *, retry_s: float = 10.0
) -> None:
    """End a failed or interrupted run ``status`` (with its ``error`` tag), trying an unreachable
    store for ``retry_s`` only: the caller's own exception is what the user must see. If the store
    stays away the run stays RUNNING, and a warning says so."""
    quick = client.bounded(retry_s)
    try:
        try:
            if error is not None:
                quick.set_tag(run_id, layout.tag(layout.ERROR), error[:4000])
        finally:
            quick.set_terminated(run_id, status)
    except TrackingUnavailable as exc:
        log.warning("%s; run %s stays RUNNING in the store", exc, run_id)
