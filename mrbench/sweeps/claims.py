"""Cell claims: two invocations of one sweep never run the same cell.

Invocations of a sweep started together, or on several machines logging to one tracking server,
share its cells: just before a cell runs, its invocation claims the cell's run key in the store,
and a cell claimed by another live invocation, or FINISHED, is skipped with the name of whoever
holds it. The protocol, why it is safe, and when a claim lapses are
:class:`mrbench.store.claims.KeyClaims`' (see :mod:`mrbench.store.claims`); this module hands it
the sweep's cells.
"""

from __future__ import annotations

from mrbench.store.claims import MAX_ROUNDS, KeyClaims
from mrbench.sweeps.cell import Cell

__all__ = ["MAX_ROUNDS", "CellClaims"]


class CellClaims(KeyClaims):
    """Claims cells for the invocation whose parent run is ``parent_run_id``; called as
    ``claims(cell)`` just before the cell runs: None when it is this invocation's to run, else who
    holds it (``"pid 12 on host h (MLflow run …)"`` or ``"FINISHED in MLflow run …"``)."""

    def __call__(self, cell: Cell) -> str | None:
        return self.claim(cell.key, cell.label)
