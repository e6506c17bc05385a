"""Which invocations of a sweep are alive, told from their parent runs in the store.

An invocation's parent run is RUNNING while it works, but a process killed by ``kill -9`` or a
power loss leaves it RUNNING for ever; what it claimed (:mod:`mrbench.sweeps.claims`) must then
lapse, and the next invocation takes its cells over. So a RUNNING parent run counts as alive:

- on this host: while the process it names (``pid`` tag) runs and is older than the run (a
  recycled pid does not count). Exact and immediate: a killed sweep is taken over at once.
  (Containers that share a host name but not their processes would take each other for dead:
  give them their own host names, as Docker does by default.)
- on another host (a tracking server shared by several machines), where no pid can be checked:
  while its ``heartbeat`` tag, refreshed every :data:`HEARTBEAT_S` seconds by :class:`Heartbeat`,
  is younger than :data:`STALE_AFTER_S`. A remote sweep that dies is taken over after at most
  that long; a parent run without a heartbeat (written before heartbeats existed) is not alive.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any

from mrbench.core import layout

HEARTBEAT_S = 30.0
"""How often a live invocation refreshes its parent run's heartbeat tag."""
STALE_AFTER_S = 300.0
"""A parent run on another host whose heartbeat is older than this is dead (ten missed beats:
a busy tracking server or a few seconds of clock skew between machines do not count as death)."""


def pid_alive(pid: int, started_ms: int) -> bool:
    """True if ``pid`` runs on this host and was started before the run it recorded (PID reuse guard)."""
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError, OSError):
        return False
    try:
        import psutil

        return psutil.Process(pid).create_time() <= started_ms / 1000.0 + 5.0
    except Exception:  # psutil missing or the process just ended
        return True


def is_sweep_run(run: Any) -> bool:
    """True for a sweep invocation's parent run."""
    return layout.read_tag(run.data.tags, layout.ROLE) == layout.ROLE_SWEEP


def is_alive(run: Any, *, now: float | None = None) -> bool:
    """True if the parent run ``run`` is RUNNING and its invocation is alive (see the module docstring)."""
    if run.info.status != "RUNNING":
        return False
    tags = run.data.tags
    if layout.read_tag(tags, layout.HOST) == socket.gethostname():
        pid = int(layout.read_tag(tags, layout.PID, "0") or 0)
        return bool(pid) and pid_alive(pid, run.info.start_time or 0)
    try:
        beat = float(layout.read_tag(tags, layout.HEARTBEAT))
    except ValueError:
        return False
    return (time.time() if now is None else now) - beat < STALE_AFTER_S


@dataclass(frozen=True)
class Invocation:
    """Another live invocation of the sweep, as its parent run tells it."""

    run_id: str
    host: str
    pid: str
    claims: frozenset[str]
    """Run keys it has claimed."""

    @classmethod
    def from_run(cls, run: Any) -> Invocation:
        tags = run.data.tags
        prefix = layout.tag(layout.CLAIM)
        return cls(
            run.info.run_id,
            layout.read_tag(tags, layout.HOST, "?"),
            layout.read_tag(tags, layout.PID, "?"),
            frozenset(k.removeprefix(prefix) for k in tags if k.startswith(prefix)),
        )

    def describe(self) -> str:
        """``pid 123 on host h (MLflow run abc…)``: enough to find it and stop it."""
        return f"pid {self.pid} on host {self.host} (MLflow run {self.run_id})"


class Heartbeat:
    """Refreshes the ``heartbeat`` tag of parent run ``run_id`` every ``interval`` seconds, in a
    daemon thread, from :meth:`start` to :meth:`stop`.

    A beat that fails (store briefly unreachable, sqlite busy) is simply retried at the next one:
    only :data:`STALE_AFTER_S` of silence makes other hosts take this invocation's cells over.
    """

    def __init__(self, tracking_uri: str, run_id: str, interval: float = HEARTBEAT_S) -> None:
        self.tracking_uri, self.run_id, self.interval = tracking_uri, run_id, interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, daemon=True, name="sweep-heartbeat")

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
        """Stop beating (idempotent); the parent run is about to end."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10.0)
