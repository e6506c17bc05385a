"""Running a sweep: expand the grid, resume from MLflow, execute cells, then write the report.

Layout in MLflow (one experiment per sweep name): one **parent run** per invocation
(:mod:`mrbench.sweeps.parent`) and one **child run** per executed cell, written by the cell
function (:func:`mrbench.engine.runner.run_cell`). Every name is in :mod:`mrbench.core.layout`.

Resume (:mod:`mrbench.sweeps.resume`): a cell whose run key has a FINISHED run in the experiment
is skipped; RUNNING runs left by a dead invocation are marked KILLED and their cells, like FAILED
and KILLED ones, run again. Ctrl-C marks the current run(s) KILLED and the parent KILLED, and the
command exits with code 130.

Executors (:mod:`mrbench.sweeps.executors`): ``workers == 1`` runs cells in this process, one
after another (TRL's per-step bar visible); ``workers > 1`` runs each cell in its own process
with ``cores // workers`` threads; ``executor: ray`` sends cells to Ray.
"""

from __future__ import annotations

import shlex
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mrbench.core.errors import UserError
from mrbench.sweeps.cell import (
    DEFAULT_CELL_FN,
    Cell,
    CellContext,
    CellFn,
    CellOutcome,
    ResolveFn,
    callable_path,
    error_text,
    load_callable,
)
from mrbench.sweeps.executors.local import run_processes, run_sequential, slug
from mrbench.sweeps.grid import Grid, expand_grid, print_grid
from mrbench.sweeps.parent import finish_parent_run, kill_running_children, start_parent_run
from mrbench.sweeps.progress import SweepProgress
from mrbench.sweeps.resume import peek_states, resume_states
from mrbench.sweeps.spec import SweepSpec

EXIT_CELL_FAILED = 1
EXIT_INTERRUPTED = 130


@dataclass
class SweepOutcome:
    """What :func:`run_sweep` did."""

    name: str
    grid: Grid
    experiment_id: str | None = None
    parent_run_id: str | None = None
    skipped: list[Cell] = field(default_factory=list)
    outcomes: list[CellOutcome] = field(default_factory=list)
    stale_killed: int = 0
    interrupted: bool = False
    report_path: Path | None = None

    @property
    def failed(self) -> list[CellOutcome]:
        return [o for o in self.outcomes if o.status != "FINISHED"]

    @property
    def exit_code(self) -> int:
        """130 after Ctrl-C, 1 if a cell failed, else 0."""
        if self.interrupted:
            return EXIT_INTERRUPTED
        return EXIT_CELL_FAILED if self.failed else 0


@contextmanager
def _ignore_sigint() -> Iterator[None]:
    """Cleanup after Ctrl-C must not itself be interrupted by a second Ctrl-C."""
    try:
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def default_command() -> str:
    """The command line of this process, as a user would type it (``python -m mrbench`` → ``mrbench``)."""
    argv = list(sys.argv)
    if argv and Path(argv[0]).name in ("mrbench", "__main__.py", "app.py"):
        argv[0] = "mrbench"
    return shlex.join(argv)


def run_sweep(
    spec: SweepSpec,
    *,
    tracking_uri: str | None = None,
    command: str | None = None,
    dry_run: bool = False,
    resolve: ResolveFn | None = None,
    cell_fn: CellFn | None = None,
    console: Any = None,
    report: bool | None = None,
) -> SweepOutcome:
    """Expand, print, resume and run the sweep, then write its report.

    ``resolve`` and ``cell_fn`` default to :func:`mrbench.engine.config.resolve_spec` and
    :func:`mrbench.engine.runner.run_cell`; any functions with their signatures can stand in
    (worker processes and Ray import ``cell_fn`` by its ``"module:attr"`` path).
    Every user error (bad names, unreachable store, sweep already running) is raised before the
    first cell starts.
    """
    from rich.console import Console

    from mrbench.engine.tracking import (
        check_tracking_reachable,
        ensure_experiment,
        resolve_tracking_uri,
        results_dir,
    )

    console = console or Console()
    grid = expand_grid(spec, resolve)
    outcome = SweepOutcome(spec.name, grid)
    uri = resolve_tracking_uri(tracking_uri)
    if dry_run:
        print_grid(console, grid, peek_states(uri, spec.name, grid.cells))
        console.print(
            f"dry run: {len(grid.cells)} cells, nothing was run (store {uri}, experiment {spec.name!r})"
        )
        return outcome
    check_tracking_reachable(uri)
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    experiment_id = ensure_experiment(spec.name, uri)
    outcome.experiment_id = experiment_id
    states, outcome.stale_killed = resume_states(client, experiment_id, grid.cells, mark_stale=True)
    print_grid(console, grid, states)
    if outcome.stale_killed:
        console.print(
            f"marked {outcome.stale_killed} stale RUNNING run(s) KILLED (left by an interrupted invocation)"
        )
    todo = [c for c in grid.cells if states[c.key] != "done"]
    outcome.skipped = [c for c in grid.cells if states[c.key] == "done"]
    console.print(
        f"sweep {spec.name!r}: {len(grid.cells)} cells, {len(outcome.skipped)} already FINISHED (skipped), "
        f"{len(todo)} to run; store {uri}"
    )
    cell_fn = cell_fn or load_callable(DEFAULT_CELL_FN)
    workers = min(spec.workers, max(1, len(todo)))
    if workers > 1 or spec.executor == "ray":
        callable_path(cell_fn)  # workers import it by path: fail now, not after the parent run exists
    parent = start_parent_run(
        client,
        experiment_id,
        spec,
        command=command or default_command(),
        cells=grid.cells,
        unavailable=grid.unavailable,
    )
    outcome.parent_run_id = parent
    ctx = CellContext(uri, spec.name, parent, spec.name, cell_fn, results_dir() / "logs" / slug(spec.name))
    progress = SweepProgress(console, len(todo), workers, live=workers > 1 or spec.executor == "ray")
    try:
        if spec.executor == "ray":
            from mrbench.sweeps.executors.ray import run_ray

            results = run_ray(todo, ctx, progress, address=spec.ray_address, gpus_per_cell=spec.gpus_per_cell)
        elif workers > 1:
            results = run_processes(todo, ctx, workers, progress)
        else:
            results = run_sequential(todo, ctx, progress)
        for result in results:
            outcome.outcomes.append(result)
        progress.close()
        failed = outcome.failed
        if failed:
            console.print(
                f"[red]{len(failed)} cell(s) did not finish[/red]: " + ", ".join(o.cell.label for o in failed)
            )
        if spec.report if report is None else report:
            outcome.report_path = _write_report(spec.name, uri, parent, console)
    except KeyboardInterrupt:
        outcome.interrupted = True
        with _ignore_sigint():
            progress.close()
            kill_running_children(client, experiment_id, parent)
            finish_parent_run(client, parent, "KILLED")
        done = sum(o.status == "FINISHED" for o in outcome.outcomes)
        console.print(
            f"[yellow]interrupted[/yellow]: {done} of {len(todo)} cells finished in this invocation; the "
            "current run was marked KILLED. Run the same command again to resume."
        )
        return outcome
    except BaseException:
        with _ignore_sigint():
            progress.close()
            kill_running_children(client, experiment_id, parent)
            finish_parent_run(client, parent, "FAILED")
        raise
    finish_parent_run(client, parent, "FAILED" if outcome.failed else "FINISHED")
    return outcome


def _write_report(name: str, uri: str, parent: str, console: Any) -> Path | None:
    """The end-of-sweep report; a failure here is reported but does not fail the finished cells."""
    from mrbench.reporting.build import build_report

    try:
        path = build_report(name, tracking_uri=uri, parent_run_id=parent)
    except UserError as exc:
        console.print(f"[yellow]no report[/yellow]: {exc}")
        return None
    except Exception as exc:
        console.print(f"[red]report failed[/red]: {error_text(exc)} (rerun `mrbench report {name}`)")
        return None
    console.print(f"report: {path}")
    return path
