"""Who owns a RUNNING run: liveness, heartbeats, claims of run keys, and ending a dead owner's runs.

**Liveness.** A run that mrbench keeps RUNNING while it works (a sweep's parent run, a cell's run)
carries the ``host`` and ``pid`` of its process and a ``heartbeat`` tag (:func:`holder_tags`),
refreshed every :data:`HEARTBEAT_S` seconds by :class:`Heartbeat` while the process works. A
process killed by ``kill -9`` or a power loss leaves its run RUNNING for ever, so such a run counts
as alive (:func:`is_alive`):

- on this host: while the process it names runs and was started before the run's start or its
  last heartbeat, whichever is later (a recycled pid does not count). Exact and immediate.
  (Containers that share a host name but not their processes would take each other for dead:
  give them their own host names, as Docker does by default.)
- on another host (a tracking server shared by several machines), where no pid can be checked:
  while its heartbeat is younger than :data:`STALE_AFTER_S`. A remote process that dies is taken
  for dead after at most that long; a run without a heartbeat is not alive.

**Owners.** A cell's run in a sweep belongs to its invocation (the parent run named by its
``mlflow.parentRunId`` tag) and to its own process; a sweep's parent run (:func:`is_sweep_run`) to
its invocation, itself; a ``mrbench run`` of a cell to its process alone. A RUNNING run whose
owners are all gone is ended (:func:`end_if_dead`: KILLED, so that the UI tells the truth); a run
whose owner is alive never is. A cell about to open its run takes its run key over
(:func:`settle_key`); a dead invocation's parent run and its dead runs are ended when one of its
claims is found (:func:`end_dead_invocation`).

**Claims of run keys** (:class:`KeyClaims`: a sweep's cells, :mod:`mrbench.sweeps.claims`).
Invocations of a sweep started together, or on several machines logging to one tracking server,
share its cells: just before a cell runs, its invocation claims its run key, and a key claimed by
another live invocation, or FINISHED, is skipped with the name of whoever holds it.

*Why this design.* The only thing all invocations share is the MLflow store: a local sqlite file,
or a tracking server that several machines log to. A file lock would cover the first only, and
MLflow has no compare-and-swap. What every MLflow store does give is read-your-writes: a tag set
by one request is seen by every search that starts after it. A claim is built on that alone, for
run key K by the invocation whose parent run is P:

1. *check*: K is held if a live invocation other than P (a RUNNING parent run that is alive)
   carries the tag ``claim.K``, or if K has a FINISHED run: then skip the cell, naming the holder;
2. *claim*: set the tag ``claim.K`` on P;
3. *re-check* as in 1. Held by no one else: the key is P's. Else withdraw (delete the tag), wait a
   random moment, and start again at 1.

*Safe*: of two invocations claiming K, the one whose re-check comes second sees the other's tag
(written before the other's re-check, so before its own), unless the other withdrew; so at most
one finds itself alone. Both may see each other: both withdraw, and the random waits let one win
the next round while the other then sees it in step 1. The re-check reads claims before FINISHED
runs: a holder's cell run ends FINISHED before its parent run ends and its claims lapse, so a cell
finished by an invocation that ended in between is caught by the second read.

*Not "the earliest claim wins"*: which claim is earliest would come from the clients' clocks
(MLflow takes a run's start time from the client), and a claimant delayed between reading its
clock and writing could carry an earlier time than a claim that had already been seen alone; both
would win.

Claims live on the parent run and lapse with it: a claim of a dead invocation is taken over, and
its runs whose process is gone too are marked KILLED on the way. A claim is kept after the cell
ends, FINISHED or not: no other live invocation retries a cell while the one that tried it lives
(a later invocation resumes it as usual).

Who uses it: cells (:mod:`mrbench.engine.cell.cell_claim`), sweeps (:mod:`mrbench.sweeps.claims`,
:mod:`mrbench.sweeps.resume`, :mod:`mrbench.sweeps.executors.local`). The runs themselves are
searched and ended through :mod:`mrbench.store.runs`.
"""

from __future__ import annotations

import os
import random
import socket
import threading
import time
from collections.abc import Container, Iterable
from dataclasses import dataclass, field
from typing import Any

from mrbench.core import layout
from mrbench.store.runs import end_run, find_runs, running_runs, runs_filter

HEARTBEAT_S = 30.0
"""How often a live process refreshes its run's heartbeat tag."""
STALE_AFTER_S = 300.0
"""A run on another host whose heartbeat is older than this is dead (ten missed beats: a busy
tracking server or a few seconds of clock skew between machines do not count as death)."""
MAX_ROUNDS = 20
"""Rounds of collision (both claimants withdrew) before a key is left to the other claimant."""
_CREATE_SLACK_S = 5.0

# ------------------------------------------------------------------------------------- liveness


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


def is_own(run: Any) -> bool:
    """True if ``run`` names this process (its host and pid)."""
    tags = run.data.tags
    return layout.read_tag(tags, layout.PID) == str(os.getpid()) and (
        layout.read_tag(tags, layout.HOST) == socket.gethostname()
    )


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
        # A plain client: a failed beat is retried by the next one, not by the client.
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


# ------------------------------------------------------------------------------------- owners


def is_sweep_run(run: Any) -> bool:
    """True for a sweep invocation's parent run."""
    return layout.read_tag(run.data.tags, layout.ROLE) == layout.ROLE_SWEEP


def invocation_of(run: Any) -> str | None:
    """The parent run id of the invocation ``run`` belongs to: its own for an invocation's parent
    run, its parent's for a cell's run in a sweep, None for a run of no sweep."""
    return run.info.run_id if is_sweep_run(run) else run.data.tags.get(layout.PARENT_RUN_TAG)


@dataclass(frozen=True)
class Invocation:
    """A live invocation of a sweep, as its parent run tells it."""

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


def live_invocations(runs: Iterable[Any]) -> dict[str, Invocation]:
    """The live invocations among ``runs`` (their parent runs that are alive), by parent run id."""
    return {run.info.run_id: Invocation.from_run(run) for run in runs if is_sweep_run(run) and is_alive(run)}


def run_by_own_process(run: Any, live: Container[str] = ()) -> str | None:
    """Who runs ``run`` outside every live invocation (``live``: their parent run ids): its own
    process when the run is RUNNING and that process is alive (:func:`describe`), else None."""
    if run.info.status != "RUNNING" or invocation_of(run) in live or not is_alive(run):
        return None
    return describe(run)


def end_if_dead(
    client: Any, run: Any, *, live: Container[str] = (), status: str = "KILLED", error: str | None = None
) -> bool:
    """End ``run`` with ``status`` (and ``error``) if it is RUNNING and all its owners are gone: it
    belongs to no invocation in ``live`` (parent run ids) and its own process is not alive.
    Never ends a run whose owner is alive. True if it was ended."""
    if run.info.status != "RUNNING" or invocation_of(run) in live or is_alive(run):
        return False
    end_run(client, run.info.run_id, status, error)
    return True


def end_dead_invocation(client: Any, experiment_id: str, run_id: str) -> list[str]:
    """End KILLED a dead invocation's parent run ``run_id`` (its claims lapse) and those of its
    RUNNING runs whose process is gone too (a live worker of it goes on); return the ids ended."""
    ended = [
        run.info.run_id
        for run in running_runs(client, experiment_id, parent_run_id=run_id)
        if end_if_dead(client, run)
    ]
    end_run(client, run_id, "KILLED")
    return [*ended, run_id]


@dataclass
class Settled:
    """What :func:`settle_key` found among the RUNNING runs of a run key."""

    holder: Any | None = None
    """A run whose process, alive and not this one, holds the key (None if none)."""
    ended: list[str] = field(default_factory=list)
    """The runs ended KILLED: their process was gone, or was this one (an earlier attempt)."""


def settle_key(client: Any, experiment_id: str, run_key: str) -> Settled:
    """Take run key ``run_key`` over for this process: end KILLED its RUNNING runs in the
    experiment whose process is gone (or is this one), stopping at the first whose process is
    alive (the :attr:`Settled.holder`). A run without a ``pid`` tag (written before runs named
    their process) is left alone: nothing says whether it is alive."""
    settled = Settled()
    for run in running_runs(client, experiment_id, run_key):
        if not layout.read_tag(run.data.tags, layout.PID):
            continue
        if is_alive(run) and not is_own(run):
            settled.holder = run
            return settled
        end_run(client, run.info.run_id, "KILLED")
        settled.ended.append(run.info.run_id)
    return settled


# ------------------------------------------------------------------------------------- claims


class KeyClaims:
    """Claims of run keys for the invocation whose parent run is ``parent_run_id`` (the protocol of
    the module docstring): :meth:`claim` just before a key's cell runs."""

    def __init__(
        self, client: Any, experiment_id: str, parent_run_id: str, *, rng: random.Random | None = None
    ) -> None:
        self.client, self.experiment_id, self.parent_run_id = client, experiment_id, parent_run_id
        self.rng = rng or random.Random()

    def claim(self, key: str, label: str) -> str | None:
        """None when ``key`` is now this invocation's (its claim tag, valued ``label``, is on the
        parent run), else who holds it (``"pid 12 on host h (MLflow run …)"`` or
        ``"FINISHED in MLflow run …"``)."""
        tag = layout.tag(layout.CLAIM + key)
        holder = None
        for round_ in range(MAX_ROUNDS):
            holder = self.holder(key)
            if holder is not None:
                return holder
            self.client.set_tag(self.parent_run_id, tag, label)
            holder = self.holder(key)
            if holder is None:
                return None
            self.client.delete_tag(self.parent_run_id, tag)
            time.sleep(self.rng.uniform(0.05, 0.25) * (round_ + 1))
        return f"{holder}, still contended after {MAX_ROUNDS} rounds"

    def holder(self, key: str) -> str | None:
        """Who, other than this invocation, holds run key ``key``; None if no one."""
        claim = layout.tag(layout.CLAIM + key)
        parents = find_runs(self.client, self.experiment_id, status="RUNNING", role=layout.ROLE_SWEEP)
        for run in parents:
            if run.info.run_id == self.parent_run_id or claim not in run.data.tags:
                continue
            if is_alive(run):
                return Invocation.from_run(run).describe()
            # Killed without a chance to end its runs: its claims lapse, and its runs say so.
            end_dead_invocation(self.client, self.experiment_id, run.info.run_id)
        query = runs_filter(status="FINISHED", run_key=key)
        finished = self.client.search_runs([self.experiment_id], filter_string=query, max_results=1)
        if finished:
            return f"FINISHED in MLflow run {finished[0].info.run_id}"
        return None
