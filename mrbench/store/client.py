"""Talking to an MLflow store: a reachability check, a client that rides out an outage, experiments.

Outages. A tracking server that restarts must not cost a run. :class:`RetryingClient` retries
every call that fails for a reason a restart explains (no connection, a timeout, a 5xx/429
answer) with exponential backoff for a bounded time, :func:`tracking_retry_s` (default
:data:`DEFAULT_RETRY_S`, long enough for a server restart), then raises
:class:`TrackingUnavailable`. The engine's :class:`~mrbench.engine.runs.tracking.RunLog` logs through it
and, past the bound, keeps everything locally instead of failing. :func:`check_tracking_reachable`'s
short, no-retry settings apply to the check alone.

Timeouts. No request waits for a server that does not answer longer than its budget allows: the
check waits :data:`CHECK_TIMEOUT_S` (also for the server's host name to resolve), a
:class:`RetryingClient`'s requests time out within what is left of its retry bound (at most
:data:`REQUEST_TIMEOUT_S`, or ``$MLFLOW_HTTP_REQUEST_TIMEOUT`` when set), and once a command has
checked a server, MLflow clients made elsewhere in the process (and its workers) get
:data:`REQUEST_TIMEOUT_S` instead of MLflow's 120 s.

Disk and database faults (a full disk, a file size limit, a damaged ``mlflow.db``) are
:class:`StoreFault`: one line naming the file and the cause (:mod:`mrbench.store.faults`), never
retried; a cell treats one like an outage and keeps what it could not log.
"""

from __future__ import annotations

import logging
import math
import os
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from mrbench.core import env, layout
from mrbench.core.errors import UserError
from mrbench.store.faults import exception_chain, fault_cause, store_fault_message
from mrbench.store.local import check_store_writable, reroot_own_store, results_dir, store_creation_lock
from mrbench.store.uri import ARTIFACTS_DIR, is_local_store, sqlite_path, store_host

log = logging.getLogger(__name__)

DEFAULT_RETRY_S = env.TRACKING_RETRY_S.default
"""How long a call to the store is retried by default: a server restart, with a wide margin.
``$MRBENCH_TRACKING_RETRY_S`` changes it where no setting gives one (``mrbench run
--tracking-retry-s``, a sweep's ``tracking_retry_s``, which travels to its cells with their specs)."""
# Waits 1, 2, 4, 5, 5, ... s: a store that is back is used within 5 s; one request per 5 s costs it nothing.
_BACKOFF_FIRST_S, _BACKOFF_MAX_S = 1.0, 5.0
CHECK_TIMEOUT_S = 5
"""How long :func:`check_tracking_reachable` waits for a server (and for its host name to resolve)."""
REQUEST_TIMEOUT_S = 30
"""The longest one request to a server may wait for its answer (MLflow's default is 120 s)."""
_MIN_REQUEST_TIMEOUT_S = 2
_TIMEOUT_ENV = "MLFLOW_HTTP_REQUEST_TIMEOUT"
_store_in_use: str | None = None


class TrackingUnavailable(UserError):
    """The tracking store stayed unreachable past the retry bound; the message says what to do."""


class StoreFault(TrackingUnavailable):
    """The store's files cannot be used: a full disk, a file size limit, a damaged database. The
    message names the file and the cause. An outage to a cell (it keeps what it could not log), but
    never retried: waiting does not empty a disk."""


def store_in_use() -> str | None:
    """The tracking URI this process last checked, read or opened a client on (None before any):
    the store a disk or database fault that reaches the command line is about."""
    return _store_in_use


def note_store(uri: str) -> None:
    """Remember ``uri`` as the store this process uses (:func:`store_in_use`)."""
    global _store_in_use
    _store_in_use = uri


def tracking_retry_s(value: float | None = None) -> float:
    """The retry bound in seconds: ``value``, else ``$MRBENCH_TRACKING_RETRY_S``, else
    :data:`DEFAULT_RETRY_S`."""
    if value is None:
        return env.TRACKING_RETRY_S.get()
    seconds = float(value)
    if not seconds >= 0:
        raise UserError(f"the tracking retry bound must be ≥ 0 seconds, got {value!r}")
    return seconds


_env_lock = threading.Lock()
_env_overrides: dict[str, list[tuple[object, str]]] = {}
"""Per variable, the settings blocks active now (in any thread), most recent last."""
_env_originals: dict[str, str | None] = {}


@contextmanager
def _mlflow_http_settings(**values: int) -> Iterator[None]:
    """MLflow's per-request HTTP settings (``max_retries=0`` → ``MLFLOW_HTTP_REQUEST_MAX_RETRIES=0``)
    for the calls inside the block only; the process's own values come back afterwards.

    MLflow reads these variables on every request, so nothing outside the block sees them. Blocks
    may overlap (threads): the variable holds the latest active block's value, and the process's own
    value comes back when the last one ends.
    """
    token = object()
    names = [f"MLFLOW_HTTP_REQUEST_{name.upper()}" for name in values]
    with _env_lock:
        for var, value in zip(names, values.values(), strict=True):
            active = _env_overrides.setdefault(var, [])
            if not active:
                _env_originals[var] = os.environ.get(var)
            active.append((token, str(value)))
            os.environ[var] = str(value)
    try:
        yield
    finally:
        with _env_lock:
            for var in names:
                active = [entry for entry in _env_overrides[var] if entry[0] is not token]
                _env_overrides[var] = active
                old = active[-1][1] if active else _env_originals.pop(var, None)
                if old is None:
                    os.environ.pop(var, None)
                else:
                    os.environ[var] = old


def _process_setting(var: str) -> str | None:
    """The process's own value of ``var``, also inside :func:`_mlflow_http_settings` blocks."""
    with _env_lock:
        return _env_originals[var] if _env_overrides.get(var) else os.environ.get(var)


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


def check_store_folder(uri: str) -> None:
    """The checks of :func:`check_tracking_reachable` that need no MLflow: a sqlite store's folder
    exists and it can be written (:class:`UserError` otherwise); notes ``uri`` as the store in use."""
    note_store(uri)
    db = sqlite_path(uri)
    if db is not None:
        parent = db.parent
        if not parent.exists():
            raise UserError(f"tracking store folder {parent} does not exist (from --tracking-uri {uri!r})")
        check_store_writable(uri)


def check_tracking_reachable(uri: str) -> None:
    """Fail early (before any training) if the tracking store cannot be reached or used.

    A server gets one quick try (no retries, :data:`CHECK_TIMEOUT_S`); those settings hold for this
    check alone. :class:`TrackingUnavailable` names a server that does not answer, :class:`StoreFault`
    a store whose disk is full or whose database is damaged, :class:`UserError` any other failure.
    """
    from mlflow.tracking import MlflowClient

    check_store_folder(uri)
    if not is_local_store(uri):
        if _process_setting(_TIMEOUT_ENV) is None:  # for every later client, and the workers
            os.environ[_TIMEOUT_ENV] = str(REQUEST_TIMEOUT_S)
        _check_host_resolves(uri)
    try:
        with _mlflow_http_settings(max_retries=0, timeout=CHECK_TIMEOUT_S), store_creation_lock(uri):
            MlflowClient(tracking_uri=uri).search_experiments(max_results=1)
    except Exception as exc:  # MLflow raises many types for an unreachable store
        raise _unusable(uri, exc) from None
    reroot_own_store(uri)  # what runs next writes: after a move, to the folder the store is in now


def _unusable(uri: str, exc: BaseException) -> UserError:
    """The one-line error for a store that ``exc`` says cannot be used."""
    import requests

    cause = fault_cause(exc, sqlite_path(uri))
    if cause is not None:
        return StoreFault(store_fault_message(uri, cause))
    if _in_chain(exc, (requests.Timeout, TimeoutError, socket.timeout)):
        return TrackingUnavailable(
            f"the MLflow tracking store {uri!r} does not answer: no reply within {CHECK_TIMEOUT_S} s "
            "(a server that hangs or is overloaded)"
        )
    why = _root_cause(exc) if _in_chain(exc, (ConnectionError, socket.gaierror)) else _first_line(exc)
    return UserError(f"cannot reach the MLflow tracking store {uri!r}: {why}")


def _in_chain(exc: BaseException, kinds: tuple[type[BaseException], ...]) -> bool:
    return any(isinstance(e, kinds) for e in exception_chain(exc))


def _check_host_resolves(uri: str) -> None:
    """:class:`TrackingUnavailable` when the host name of server ``uri`` does not resolve within
    :data:`CHECK_TIMEOUT_S` (a resolver that does not answer), :class:`UserError` when it is unknown.
    The lookup runs in a thread of its own: no socket timeout bounds it."""
    host = store_host(uri)
    if host is None:
        return
    outcome: list[BaseException | None] = []

    def resolve() -> None:
        try:
            socket.getaddrinfo(host, None)
            outcome.append(None)
        except OSError as exc:
            outcome.append(exc)

    thread = threading.Thread(target=resolve, name="mrbench-resolve", daemon=True)
    thread.start()
    thread.join(CHECK_TIMEOUT_S)
    if not outcome:
        raise TrackingUnavailable(
            f"the MLflow tracking store {uri!r} does not answer: its host name {host!r} did not resolve "
            f"within {CHECK_TIMEOUT_S} s"
        )
    if outcome[0] is not None:
        why = f"host {host!r} not found ({outcome[0]})"
        raise UserError(f"cannot reach the MLflow tracking store {uri!r}: {why}")


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
    :class:`TrackingUnavailable` is raised. A disk or database fault is raised at once as
    :class:`StoreFault`, other lasting errors as they are. MLflow's own per-request retries are off
    inside these calls, so the bound is this one, and each request times out within what is left of
    it (:func:`_request_timeout`: 2 s at least, :data:`REQUEST_TIMEOUT_S` at most): a call ends at
    most ``retry_s`` plus two request timeouts after it started, however the server fails.
    One warning is logged when a call starts failing and one when the store answers again.
    """

    def __init__(self, tracking_uri: str, retry_s: float | None = None, *, mlflow: Any = None) -> None:
        from mlflow.tracking import MlflowClient

        note_store(tracking_uri)
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
            left = self.retry_s - (0.0 if first_failure is None else time.monotonic() - first_failure)
            try:
                with _mlflow_http_settings(max_retries=0, timeout=_request_timeout(left)):
                    result = method(*args, **kwargs)
            except Exception as exc:
                self._raise_unless_transient(exc)
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
                        f"${env.TRACKING_RETRY_S.name})"
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

    def _raise_unless_transient(self, exc: Exception) -> None:
        """Re-raise ``exc`` unless a retry may help: a disk or database fault as :class:`StoreFault`
        (one line naming the file), any other lasting error as it is."""
        cause = fault_cause(exc, sqlite_path(self.tracking_uri))
        if cause is not None:
            raise StoreFault(store_fault_message(self.tracking_uri, cause)) from exc
        if not is_transient(exc):
            raise exc


def tracking_client(tracking_uri: str, retry_s: float | None = None) -> RetryingClient:
    """The client every command talks to store ``tracking_uri`` through: a :class:`RetryingClient`
    riding out an outage of ``retry_s`` seconds (default :func:`tracking_retry_s`).

    Always a retrying one, also where waiting makes no sense (a progress line, a dry run's peek):
    ``retry_s=0`` tries once, with a short request timeout, and raises :class:`TrackingUnavailable`
    at once, where a plain ``MlflowClient`` would wait out MLflow's own retries and 120 s timeouts.
    A disk or database fault is a one-line :class:`StoreFault` either way. (Outside
    :mod:`mrbench.store` no module builds an ``MlflowClient``: ``tests/test_layers.py`` checks it.)
    """
    return RetryingClient(tracking_uri, retry_s)


def _request_timeout(left_s: float) -> int:
    """Seconds one request may wait for its answer when ``left_s`` of the retry bound are left:
    that, within [2 s, :data:`REQUEST_TIMEOUT_S` or ``$MLFLOW_HTTP_REQUEST_TIMEOUT``]."""
    try:
        longest = int(_process_setting(_TIMEOUT_ENV) or REQUEST_TIMEOUT_S)
    except ValueError:
        longest = REQUEST_TIMEOUT_S
    return max(_MIN_REQUEST_TIMEOUT_S, min(longest, math.ceil(left_s)))


def ensure_experiment(name: str, tracking_uri: str, *, client: Any = None) -> str:
    """Id of experiment ``name``, creating it (artifacts under ``results/artifacts`` for local stores).

    ``client``: the ``MlflowClient`` (or :class:`RetryingClient`) to use; a plain one by default.
    """
    if client is None:
        # Imported only here: a rank > 0 of a multi-process cell passes its SilentClient and never
        # needs MLflow (its import is ~2 s of CPU in every rank of every cell).
        from mlflow.tracking import MlflowClient

        client = MlflowClient(tracking_uri=tracking_uri)
    reroot_own_store(tracking_uri)  # before a new run takes its location from the experiment's
    existing = client.get_experiment_by_name(name)
    if existing is not None:
        if existing.lifecycle_stage == "deleted":
            client.restore_experiment(existing.experiment_id)
        return existing.experiment_id
    location = None
    if is_local_store(tracking_uri):
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
