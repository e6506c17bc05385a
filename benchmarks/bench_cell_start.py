"""How long a sweep cell takes to start: from the cell handed to the local executor to the cell
function entered, with 2 workers, for cells forked by the cell server (the default) and for cells
started as a new interpreter each (``MRBENCH_CELL_SERVER=0``, the path before the server).

    .venv/bin/python benchmarks/bench_cell_start.py [--cells 6] [--workers 2]

The cells are trivial: the function records when it was entered, imports what ``run_cell``
imports when it runs (torch, transformers, trl, mlflow: ``mrbench.engine.cell.runner`` defers them),
records when that was done, and returns; the wall time of the sweep is all start-up. Prints a
markdown table with the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

HERE = Path(__file__).resolve().parent
ENTERED_ENV = "MRBENCH_BENCH_ENTERED"


@dataclass(frozen=True)
class BenchSpec:
    """What the executor reads of a spec."""

    method: str = "grpo"
    task: str = "tool-calling"
    model: str = "tiny"
    seed: int = 0

    def run_key(self) -> str:
        return f"bench{self.seed:04d}"

    def label(self) -> str:
        return f"{self.method}|{self.task}|{self.model}|s{self.seed}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BenchSpec:
        return cls(**data)


def quick_cell(spec: BenchSpec, **kwargs: Any) -> Any:
    """Record the moment the cell function is entered and the moment a real cell's imports are
    done, and return."""
    entered = time.time()
    import mlflow  # noqa: F401
    import torch  # noqa: F401
    import transformers  # noqa: F401
    import trl  # noqa: F401

    Path(os.environ[ENTERED_ENV], str(spec.seed)).write_text(json.dumps([entered, time.time()]))
    return SimpleNamespace(status="FINISHED", run_id=None)


class Timing:
    """A progress display that notes when the executor started each cell."""

    console = None

    def __init__(self) -> None:
        self.started: dict[int, float] = {}

    def start(self, cell: Any) -> None:
        self.started[cell.spec.seed] = time.time()

    def finish(self, outcome: Any) -> None:
        pass

    def skip(self, outcome: Any) -> None:
        pass


def measure(server: bool, cells: int, workers: int) -> dict[str, float]:
    """One sweep of ``cells`` trivial cells; seconds from the hand-off to the first cell with its
    imports done, the mean time from a cell's start to its function entered and to its imports
    done, and the sweep's wall time."""
    import bench_cell_start  # by module name: the worker processes import the cell function so

    from mrbench.sweeps.cell import Cell, CellContext
    from mrbench.sweeps.executors.local import run_processes

    os.environ["MRBENCH_CELL_SERVER"] = "1" if server else "0"
    with tempfile.TemporaryDirectory() as tmp:
        os.environ[ENTERED_ENV] = tmp
        ctx = CellContext("unused", "bench", None, "bench", bench_cell_start.quick_cell, Path(tmp, "logs"))
        timing = Timing()
        handed = time.time()
        outcomes = list(
            run_processes(
                [Cell(bench_cell_start.BenchSpec(seed=s)) for s in range(cells)], ctx, workers, timing
            )
        )
        wall = time.time() - handed
        assert all(o.status == "FINISHED" for o in outcomes), [(o.status, o.error) for o in outcomes]
        times = {s: json.loads(Path(tmp, str(s)).read_text()) for s in range(cells)}
    entered = [times[s][0] - timing.started[s] for s in range(cells)]
    stack = [times[s][1] - timing.started[s] for s in range(cells)]
    return {
        "first": min(t[1] for t in times.values()) - handed,
        "entered": sum(entered) / cells,
        "stack": sum(stack) / cells,
        "wall": wall,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=6)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    sys.path.insert(0, str(HERE))
    # A worker started as a new interpreter imports this module by PYTHONPATH.
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))
    rows = []
    for server, name in ((False, "new interpreter per cell (before)"), (True, "cell server, fork per cell")):
        load = os.getloadavg()[0]
        result = measure(server, args.cells, args.workers)
        rows.append((name, result, load))
        print(json.dumps({"path": name, **result, "load": load}), file=sys.stderr)
    print(f"\n{args.cells} trivial cells, {args.workers} workers, {os.cpu_count()} CPUs\n")
    print("| path | handed → first cell ready (s) | start → entered / ready, mean (s) | wall (s) | load |")
    print("|---|---|---|---|---|")
    for name, r, load in rows:
        print(
            f"| {name} | {r['first']:.2f} | {r['entered']:.2f} / {r['stack']:.2f} "
            f"| {r['wall']:.2f} | {load:.2f} |"
        )


if __name__ == "__main__":
    main()
