"""Whether the process behind a RUNNING run is alive: what claims of sweeps and of cells rest on.

A run that mrbench keeps RUNNING while it works (a sweep's parent run, a cell's run) carries the
``host`` and ``pid`` of its process and a ``heartbeat`` tag (:func:`holder_tags`), refreshed every
:data:`HEARTBEAT_S` seconds by :class:`Heartbeat` while the process works. A process killed by
``kill -9`` or a power loss leaves its run RUNNING for ever, so such a run counts as alive
(:func:`is_alive`):

- on this host: while the process it names runs and was started before the run's start or its
  last heartbeat, whichever is later (a recycled pid does not count). Exact and immediate.
  (Containers that share a host name but not their processes would take each other for dead:
  give them their own host names, as Docker does by default.)
- on another host (a tracking server shared by several machines), where no pid can be checked:
  while its heartbeat is younger than :data:`STALE_AFTER_S`. A remote process that dies is taken
  for dead after at most that long; a run without a heartbeat is not alive.

Who uses it: :mod:`mrbench.sweeps.liveness` and :mod:`mrbench.sweeps.claims` (which invocations of
a sweep are alive, and the cells they claimed), :mod:`mrbench.engine.cell.cell_claim` (which earlier
attempts of a cell are still running).
"""

from __future__ import annotations

import os
import socket
import threading
import time
from typing import Any

from mrbench.core import layout

HEARTBEAT_S = 30.0
"""How often a live process refreshes its run's heartbeat tag."""
STALE_AFTER_S = 300.0
"""A run on another host whose heartbeat is older than this is dead (ten missed beats: a busy
tracking server or a few seconds of clock skew between machines do not count as death)."""
_CREATE_SLACK_S = 5.0


def pid_alive(pid: int, started_ms: int) -> bool:
    """True if ``pid`` runs on this host and was started before ``started_ms`` (epoch ms; a few
    seconds of slack): a process started later is another one that got a recycled pid."""
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError, OSError):
        return False
    try:
        import psutil

        return psutil.Process(pid).create_time() <= started_ms / 1000.0 + _CREATE_SLACK_S
    except Exception:  # psutil missing or the process just ended
        return True


def holder_tags(now: float | None = None) -> dict[str, str]:
    """The ``host``, ``pid`` and ``heartbeat`` tags of a run this process keeps RUNNING."""
    return {
        layout.tag(layout.HOST): socket.gethostname(),
        layout.tag(layout.PID): str(os.getpid()),
        layout.tag(layout.HEARTBEAT): f"{time.time() if now is None else now:.0f}",
    }


def _heartbeat(tags: dict[str, str]) -> float | None:
    try:
        return float(layout.read_tag(tags, layout.HEARTBEAT))
    except ValueError:
        return None


def is_alive(run: Any, *, now: float | None = None) -> bool:
    """True if ``run`` is RUNNING and the process it names is alive (see the module docstring)."""
    if run.info.status != "RUNNING":
        return False
    tags = run.data.tags
    beat = _heartbeat(tags)
    if layout.read_tag(tags, layout.HOST) == socket.gethostname():
        pid = int(layout.read_tag(tags, layout.PID, "0") or 0)
        since_ms = max(run.info.start_time or 0, int((beat or 0) * 1000))
        return bool(pid) and pid_alive(pid, since_ms)
    if beat is None:
        return False
    return (time.time() if now is None else now) - beat < STALE_AFTER_S


def describe(run: Any) -> str:
    """``pid 123 on host h (MLflow run abc…)``: enough to find the process behind ``run`` and stop it."""
    tags = run.data.tags
    host, pid = layout.read_tag(tags, layout.HOST, "?"), layout.read_tag(tags, layout.PID, "?")
    return f"pid {pid} on host {host} (MLflow run {run.info.run_id})"


class Heartbeat:
    """Refreshes the ``heartbeat`` tag of run ``run_id`` every ``interval`` seconds, in a daemon
    thread, from :meth:`start` to :meth:`stop`.

    A beat that fails (store briefly unreachable, sqlite busy) is simply retried at the next one:
    only :data:`STALE_AFTER_S` of silence makes other hosts take the run's process for dead.
    """

    def __init__(self, tracking_uri: str, run_id: str, interval: float = HEARTBEAT_S) -> None:
        self.tracking_uri, self.run_id, self.interval = tracking_uri, run_id, interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, daemon=True, name="mrbench-heartbeat")

    def _beat(self) -> None:
        from mlflow.tracking import MlflowClient

        client = MlflowClient(tracking_uri=self.tracking_uri)
        while not self._stop.wait(self.interval):
            try:
                client.set_tag(self.run_id, layout.tag(layout.HEARTBEAT), f"{time.time():.0f}")
            except Exception:  # see the class docstring
                continue

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop beating (idempotent); the run is about to end."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10.0)
