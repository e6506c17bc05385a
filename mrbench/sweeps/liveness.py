"""Which invocations of a sweep are alive, told from their parent runs in the store.

An invocation's parent run is RUNNING while it works, but a process killed by ``kill -9`` or a
power loss leaves it RUNNING for ever; what it claimed (:mod:`mrbench.sweeps.claims`) must then
lapse, and the next invocation takes its cells over. A RUNNING parent run counts as alive while
its process does: on this host by its ``pid`` tag, on another by its ``heartbeat`` tag
(:func:`mrbench.store.claims.is_alive`, where the rules are; the heartbeat and the liveness test
live there because cells' runs, :mod:`mrbench.engine.cell.cell_claim`, use them too, and re-exported
here).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mrbench.core import layout
from mrbench.store.claims import HEARTBEAT_S, STALE_AFTER_S, Heartbeat, is_alive, pid_alive

__all__ = ["HEARTBEAT_S", "STALE_AFTER_S", "Heartbeat", "Invocation", "is_alive", "is_sweep_run", "pid_alive"]


def is_sweep_run(run: Any) -> bool:
    """True for a sweep invocation's parent run."""
    return layout.read_tag(run.data.tags, layout.ROLE) == layout.ROLE_SWEEP


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
