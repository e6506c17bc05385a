"""The sweep grid: every cell resolved (names and parameters checked) in run order, and its table."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mrbench.core import layout
from mrbench.core.errors import UserError
from mrbench.core.registry import import_target
from mrbench.sweeps.cell import DEFAULT_RESOLVE_FN, Cell, ResolveFn
from mrbench.sweeps.spec import SweepSpec


@dataclass
class Grid:
    """The expanded sweep: cells in run order, and tasks that could not be loaded (task → reason)."""

    cells: list[Cell]
    unavailable: dict[str, str] = field(default_factory=dict)


def expand_grid(spec: SweepSpec, resolve: ResolveFn | None = None) -> Grid:
    """Resolve every cell, in run order: seed → model → method → task, so a partial sweep has every
    method for the first seeds, and the cells running at once are mostly of different tasks (a
    task's first cells do not compute its pre-training evaluation twice, and a seed does not end
    on a row of its slowest task's cells).

    Raises UserError for bad names/params, and for extra eval datasets (``eval``) that are unknown
    or whose data cannot be loaded, before anything runs; a task whose code cannot be imported
    (ImportError) is recorded as unavailable, with the reason."""
    resolve = resolve or import_target(DEFAULT_RESOLVE_FN)
    unavailable: dict[str, str] = {}
    by_task: dict[str, list[Cell]] = {}
    for task in spec.tasks:
        cells: list[Cell] = []
        try:
            for model in spec.models_for(task):
                for method in spec.methods:
                    for seed in spec.seeds:
                        try:
                            run_spec = resolve(
                                method,
                                task,
                                model,
                                seed,
                                method_params=spec.method_params.get(method) or None,
                                task_params=spec.task_params.get(task) or None,
                                train=spec.train_for(task, model) or None,
                            )
                        except UserError as exc:
                            raise UserError(
                                f"sweep cell {layout.cell_label(method, task, model, seed)}: {exc}"
                            ) from None
                        cells.append(Cell(run_spec))
        except ImportError as exc:
            # The task's module is not built (or misses a dependency): say so, never skip silently.
            unavailable[task] = f"{type(exc).__name__}: {exc}"
            continue
        by_task[task] = cells
    ordered = sorted(
        (c for cells in by_task.values() for c in cells),
        key=lambda c: (
            spec.seeds.index(c.spec.seed),
            spec.models_for(c.spec.task).index(c.spec.model),
            spec.methods.index(c.spec.method),
            spec.tasks.index(c.spec.task),
        ),
    )
    # Extra eval datasets (the ``eval`` key): names, settings and data checked before anything runs.
    evals = {task: datasets for task, datasets in spec.eval.items() if task in by_task}
    if evals:
        from mrbench.engine.evaluation.extra_evals import check_extra_evals

        check_extra_evals(evals, spec.task_params)
    keys: dict[str, Cell] = {}
    for cell in ordered:
        if cell.key in keys:
            raise UserError(
                f"cells {keys[cell.key].label} and {cell.label} resolve to the same run key {cell.key}"
            )
        keys[cell.key] = cell
    return Grid(ordered, unavailable)


def print_grid(console: Any, grid: Grid, states: dict[str, str] | None = None) -> None:
    """The grid as a table (one row per cell, with its run key and resume state), then unavailable tasks."""
    from rich.table import Table

    table = Table(title=f"sweep grid: {len(grid.cells)} cells", show_lines=False, title_justify="left")
    for col in ("#", "method", "task", "model", "seed", "run key"):
        table.add_column(col)
    if states is not None:
        table.add_column("state")
    for i, cell in enumerate(grid.cells, 1):
        row = [str(i), cell.spec.method, cell.spec.task, cell.spec.model, str(cell.spec.seed), cell.key]
        if states is not None:
            row.append(states.get(cell.key, "to run"))
        table.add_row(*row)
    console.print(table)
    for task, reason in grid.unavailable.items():
        console.print(
            f"[yellow]task {task!r} is unavailable ({reason}); its cells are not run and the "
            "report lists it.[/yellow]"
        )
