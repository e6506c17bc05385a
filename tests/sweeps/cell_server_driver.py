"""A sweep's local executor alone, over :mod:`server_cells`, for tests that signal or kill the sweep:
``python cell_server_driver.py RECORD_DIR SEEDS WORKERS [--light]`` (seeds: ``0,3``; ``--light``: the
server preloads only the cell module).

Prints one line per outcome (``label status``); exits 130 when interrupted.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from server_cells import TinySpec, facts_cell

from mrbench.sweeps import cell_server
from mrbench.sweeps.cell import Cell, CellContext
from mrbench.sweeps.executors.local import run_processes


class Quiet:
    """What the executor needs of a progress display."""

    console = None

    def start(self, cell: Any) -> None:
        pass

    def finish(self, outcome: Any) -> None:
        pass

    def skip(self, outcome: Any) -> None:
        pass


def main(args: list[str]) -> int:
    record, seeds, workers = Path(args[0]), [int(s) for s in args[1].split(",")], int(args[2])
    if "--light" in args:  # the stack's import only slows these tests down
        cell_server.preload_modules = lambda fn: ["server_cells"]  # type: ignore[assignment]
    ctx = CellContext("unused", "driver", None, "driver", facts_cell, record / "logs")
    try:
        for outcome in run_processes([Cell(TinySpec(seed=s)) for s in seeds], ctx, workers, Quiet()):
            print(outcome.cell.label, outcome.status, flush=True)
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
