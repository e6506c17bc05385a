"""Which waiting cell a free worker takes next: the grid's seed first, then the longest cell.

The grid is seed-major (:func:`mrbench.sweeps.grid.expand_grid`), so a partial sweep has every
method for its first seeds; the workers keep that. Within a seed, once each kind of cell (task and
model) has finished once, a free worker takes the kind that took longest, so a sweep ends on short
cells instead of one long cell on one worker while the others wait (longest processing time first,
the classic list-scheduling rule; on the default sweep two workers otherwise spent its last 36 s on
one agent-security cell). A kind's time is the shortest any of its cells took: the first cells
also wait for the model's build, which only makes them longer. Kinds not seen yet keep the grid's
order and go first (they may be long). Which cell runs when changes none of their numbers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mrbench.sweeps.cell import Cell


def cell_kind(cell: Cell) -> tuple[Any, Any]:
    """What a cell's time depends on most: its task and model (None for specs without them)."""
    return getattr(cell.spec, "task", None), getattr(cell.spec, "model", None)


class LongestFirst:
    """Cell times seen so far, and the choice of the next cell (see the module docstring)."""

    def __init__(self) -> None:
        self.seconds: dict[tuple[Any, Any], float] = {}

    def finished(self, cell: Cell, wall_s: float) -> None:
        """Record that ``cell`` took ``wall_s`` seconds (a FINISHED cell's wall time)."""
        kind = cell_kind(cell)
        self.seconds[kind] = min(wall_s, self.seconds.get(kind, wall_s))

    def pick(self, queue: Sequence[Cell]) -> int:
        """The index in ``queue`` (grid order) of the cell to start next."""
        seed = getattr(queue[0].spec, "seed", None)
        best, best_s = 0, -1.0
        for i, cell in enumerate(queue):
            if getattr(cell.spec, "seed", None) != seed:
                break  # the queue is seed-major: later seeds wait
            seconds = self.seconds.get(cell_kind(cell))
            if seconds is None:
                return i  # a kind not seen yet: in grid order, before the known ones
            if seconds > best_s:
                best, best_s = i, seconds
        return best
