"""Resume: what each cell's earlier runs in the sweep's experiment say about running it again.

A cell whose run key has a FINISHED run is done and skipped. RUNNING runs left by a dead
invocation (kill -9, power loss) are marked KILLED, so the MLflow UI is truthful, and their
cells, like FAILED and KILLED ones, run again (a RUNNING run whose own process is alive, by its
``host``, ``pid`` and ``heartbeat`` tags, is not stale: a ``mrbench run`` of the cell, say; its cell
is "held by" that process): a KILLED one with a training checkpoint goes on in
the same run from that checkpoint (the cell function decides, :mod:`mrbench.engine.cell.resume`; the
state printed here says "resume from step N"). The runs of another invocation of the same sweep
that is still alive are left alone: the two share the cells, each running those it claims first
(:mod:`mrbench.sweeps.claims`). Which runs are whose, and which may be ended, is decided by
:mod:`mrbench.store.claims`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mrbench.core import layout
from mrbench.engine.cell.resume import resumable_step
from mrbench.store.claims import Invocation, end_if_dead, live_invocations, run_by_own_process
from mrbench.store.client import tracking_client
from mrbench.store.runs import search_all
from mrbench.store.uri import missing_sqlite_store
from mrbench.sweeps.cell import Cell

PEEK_RETRY_S = 10.0
"""How long a dry run's read of the store rides out an outage before it shows no resume states."""


DONE = "done"
"""The state of a cell whose run key has a FINISHED run (it is skipped)."""


def unfinished(cells: list[Cell], states: dict[str, str]) -> list[Cell]:
    """The cells of ``cells`` whose state in ``states`` is not :data:`DONE`, in order."""
    return [c for c in cells if states[c.key] != DONE]


@dataclass
class Resume:
    """What the store says before this invocation starts."""

    states: dict[str, str]
    """Per run key: ``"done"``, ``"held by <invocation>"``, ``"re-run (FAILED)"``, ``"to run"``, …"""
    stale_killed: int = 0
    """Stale RUNNING runs marked KILLED (only with ``mark_stale``)."""
    live: list[Invocation] = field(default_factory=list)
    """Other live invocations of this sweep."""


def resume_states(client: Any, experiment_id: str, cells: list[Cell], *, mark_stale: bool) -> Resume:
    """Resume state per run key, the other live invocations of the sweep, and (with ``mark_stale``)
    how many RUNNING runs of dead invocations, whose own process is gone too, were marked KILLED."""
    runs = search_all(client, experiment_id)
    live = live_invocations(runs)
    finished: set[str] = set()
    last: dict[str, str] = {}
    last_id: dict[str, str] = {}
    running: dict[str, str] = {}  # run key -> the live process that runs it outside any invocation
    stale = 0
    for run in sorted(runs, key=lambda r: r.info.start_time or 0):
        status = run.info.status
        # Left by an invocation that died (kill -9, power loss), its own process gone too: no
        # process will ever end it. A run whose own process runs it (a `mrbench run` of the cell,
        # or a live worker whose invocation died) is never ended under it: its cell is held.
        if mark_stale and end_if_dead(client, run, live=live):
            stale += 1
            status = "KILLED"
        key = layout.read_tag(run.data.tags, layout.RUN_KEY)
        if not key:
            continue
        if (process := run_by_own_process(run, live)) is not None:
            running[key] = process
        last[key], last_id[key] = status, run.info.run_id
        if status == "FINISHED":
            finished.add(key)
    holders = {key: inv.describe() for inv in live.values() for key in inv.claims} | running
    states = {}
    for cell in cells:
        if cell.key in finished:
            states[cell.key] = DONE
        elif cell.key in holders:
            states[cell.key] = f"held by {holders[cell.key]}"
        elif cell.key in last:
            step = resumable_step(cell.key, last_id[cell.key]) if last[cell.key] != "FAILED" else None
            states[cell.key] = f"re-run ({last[cell.key]})" if step is None else f"resume from step {step}"
        else:
            states[cell.key] = "to run"
    return Resume(states, stale, list(live.values()))


def peek_states(uri: str, name: str, cells: list[Cell]) -> dict[str, str] | None:
    """Resume states for a dry run, read-only; None when the store does not exist yet or is unreachable."""
    if missing_sqlite_store(uri):
        return None
    try:
        client = tracking_client(uri, retry_s=PEEK_RETRY_S)
        experiment = client.get_experiment_by_name(name)
        if experiment is None:
            return None
        return resume_states(client, experiment.experiment_id, cells, mark_stale=False).states
    except Exception:  # a dry run only informs; the real run checks the store properly
        return None
