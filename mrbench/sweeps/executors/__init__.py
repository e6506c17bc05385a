"""Executors: how the cells of one invocation run, each yielding a :class:`~mrbench.sweeps.cell.CellOutcome`
per cell as it ends.

- :mod:`~mrbench.sweeps.executors.local`: one after another in this process, or in worker processes;
- :mod:`~mrbench.sweeps.executors.ray`: as Ray tasks, on a local Ray or a cluster (optional extra).

Every executor is one small :class:`Executor`; :func:`executor_for` is the one place a sweep's
settings choose it. A new executor is a class with these three members and a line there.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from mrbench.sweeps.cell import Cell, CellContext, CellOutcome
    from mrbench.sweeps.progress import SweepProgress
    from mrbench.sweeps.spec import SweepSpec


class Executor(Protocol):
    """Where a sweep's cells run.

    ``elsewhere``: the cells run in other processes (worker processes, Ray tasks), not in the
    sweep's own — their cell function is then imported by path, and the lab runs beside them;
    ``on_this_machine``: the cells run on this machine, so its GPUs, model folders and caches are
    theirs and the sweep checks them before any run exists (not so on Ray, whose cells run on the
    cluster's nodes and check their own)."""

    elsewhere: bool
    on_this_machine: bool

    def run(self, cells: list[Cell], ctx: CellContext, progress: SweepProgress) -> Iterable[CellOutcome]:
        """Run ``cells``, yielding each one's outcome as it ends."""
        ...


@dataclass(frozen=True)
class Sequential:
    """One cell after another, in this process."""

    elsewhere: bool = False
    on_this_machine: bool = True

    def run(self, cells: list[Cell], ctx: CellContext, progress: SweepProgress) -> Iterable[CellOutcome]:
        from mrbench.sweeps.executors.local import run_sequential

        return run_sequential(cells, ctx, progress)


@dataclass(frozen=True)
class Processes:
    """``workers`` worker processes of this machine (a multi-process cell starts from one too)."""

    workers: int
    elsewhere: bool = True
    on_this_machine: bool = True

    def run(self, cells: list[Cell], ctx: CellContext, progress: SweepProgress) -> Iterable[CellOutcome]:
        from mrbench.sweeps.executors.local import run_processes

        return run_processes(cells, ctx, self.workers, progress)


@dataclass(frozen=True)
class RayTasks:
    """Ray tasks on the cluster at ``address`` (None: a local Ray), each reserving its GPUs and CPUs."""

    address: str | None
    gpus_per_cell: float
    cpus_per_cell: float
    elsewhere: bool = True
    on_this_machine: bool = False

    def run(self, cells: list[Cell], ctx: CellContext, progress: SweepProgress) -> Iterable[CellOutcome]:
        from mrbench.sweeps.executors.ray import run_ray

        return run_ray(
            cells,
            ctx,
            progress,
            address=self.address,
            gpus_per_cell=self.gpus_per_cell,
            cpus_per_cell=self.cpus_per_cell,
        )


def executor_for(spec: SweepSpec, workers: int) -> Executor:
    """The executor of a sweep's settings: Ray with ``executor: ray``; worker processes with more
    than one worker or a multi-process cell; else this process.

    >>> from types import SimpleNamespace as S
    >>> executor_for(S(executor="local", processes_per_cell=1), 1)
    Sequential(elsewhere=False, on_this_machine=True)
    >>> executor_for(S(executor="local", processes_per_cell=2), 1).elsewhere
    True
    """
    if spec.executor == "ray":
        return RayTasks(spec.ray_address, spec.gpus_per_cell, spec.cpus_per_cell)
    if workers > 1 or spec.processes_per_cell > 1:  # a multi-process cell starts from a worker
        return Processes(workers)
    return Sequential()
