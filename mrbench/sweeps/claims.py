"""Cell claims: two invocations of one sweep never run the same cell.

Invocations of a sweep started together, or on several machines logging to one tracking server,
share its cells: just before a cell runs, its invocation claims it, and a cell claimed by another
live invocation, or FINISHED, is skipped with the name of whoever holds it.

**Why this design.** The only thing all invocations share is the MLflow store: a local sqlite
file, or a tracking server that several machines log to. A file lock would cover the first only,
and MLflow has no compare-and-swap. What every MLflow store does give is read-your-writes: a tag
set by one request is seen by every search that starts after it. A claim is built on that alone,
for run key K by the invocation whose parent run is P:

1. *check*: K is held if a live invocation other than P (a RUNNING parent run that is alive,
   :mod:`mrbench.sweeps.liveness`) carries the tag ``claim.K``, or if K has a FINISHED run:
   then skip the cell, naming the holder;
2. *claim*: set the tag ``claim.K`` on P;
3. *re-check* as in 1. Held by no one else: the cell is P's. Else withdraw (delete the tag),
   wait a random moment, and start again at 1.

*Safe*: of two invocations claiming K, the one whose re-check comes second sees the other's tag
(written before the other's re-check, so before its own), unless the other withdrew; so at most
one finds itself alone. Both may see each other: both withdraw, and the random waits let one win
the next round while the other then sees it in step 1. The re-check reads claims before FINISHED
runs: a holder's cell run ends FINISHED before its parent run ends and its claims lapse, so a
cell finished by an invocation that ended in between is caught by the second read.

*Not "the earliest claim wins"*: which claim is earliest would come from the clients' clocks
(MLflow takes a run's start time from the client), and a claimant delayed between reading its
clock and writing could carry an earlier time than a claim that had already been seen alone;
both would win.

Claims live on the parent run and lapse with it: a claim of a dead invocation is taken over, and
its RUNNING runs are marked KILLED on the way. A claim is kept after the cell ends, FINISHED or
not: no other live invocation retries a cell while the one that tried it lives (a later
invocation resumes it as usual).
"""

from __future__ import annotations

import random
import time
from typing import Any

from mrbench.core import layout
from mrbench.sweeps.cell import Cell
from mrbench.sweeps.liveness import Invocation, is_alive
from mrbench.sweeps.parent import end_dead_invocation
from mrbench.sweeps.resume import search_all

MAX_ROUNDS = 20
"""Rounds of collision (both claimants withdrew) before a cell is left to the other claimant."""


def _running_parents_filter() -> str:
    return f"attributes.status = 'RUNNING' and tags.`{layout.tag(layout.ROLE)}` = '{layout.ROLE_SWEEP}'"


def _finished_filter(key: str) -> str:
    return f"attributes.status = 'FINISHED' and tags.`{layout.tag(layout.RUN_KEY)}` = '{key}'"


class CellClaims:
    """Claims cells for the invocation whose parent run is ``parent_run_id``; called as
    ``claims(cell)`` just before the cell runs: None when it is this invocation's to run, else who
    holds it (``"pid 12 on host h (MLflow run …)"`` or ``"FINISHED in MLflow run …"``)."""

    def __init__(
        self, client: Any, experiment_id: str, parent_run_id: str, *, rng: random.Random | None = None
    ) -> None:
        self.client, self.experiment_id, self.parent_run_id = client, experiment_id, parent_run_id
        self.rng = rng or random.Random()

    def __call__(self, cell: Cell) -> str | None:
        tag = layout.tag(layout.CLAIM + cell.key)
        holder = None
        for round_ in range(MAX_ROUNDS):
            holder = self.holder(cell.key)
            if holder is not None:
                return holder
            self.client.set_tag(self.parent_run_id, tag, cell.label)
            holder = self.holder(cell.key)
            if holder is None:
                return None
            self.client.delete_tag(self.parent_run_id, tag)
            time.sleep(self.rng.uniform(0.05, 0.25) * (round_ + 1))
        return f"{holder}, still contended after {MAX_ROUNDS} rounds"

    def holder(self, key: str) -> str | None:
        """Who, other than this invocation, holds run key ``key``; None if no one."""
        claim = layout.tag(layout.CLAIM + key)
        for run in search_all(self.client, self.experiment_id, _running_parents_filter()):
            if run.info.run_id == self.parent_run_id or claim not in run.data.tags:
                continue
            if is_alive(run):
                return Invocation.from_run(run).describe()
            # Killed without a chance to end its runs: its claims lapse, and its runs say so.
            end_dead_invocation(self.client, self.experiment_id, run.info.run_id)
        finished = search_all(self.client, self.experiment_id, _finished_filter(key))
        if finished:
            return f"FINISHED in MLflow run {finished[0].info.run_id}"
        return None
