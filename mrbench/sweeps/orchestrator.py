"""Running a sweep: expand the grid, resume from MLflow, execute cells, then write the report.

Layout in MLflow (one experiment per sweep name): one **parent run** per invocation
(:mod:`mrbench.sweeps.parent`) and one **child run** per executed cell, written by the cell
function (:func:`mrbench.engine.cell.runner.run_cell`). Every name is in :mod:`mrbench.core.layout`.

Resume (:mod:`mrbench.sweeps.resume`): a cell whose run key has a FINISHED run in the experiment
is skipped; RUNNING runs left by a dead invocation are marked KILLED and their cells, like FAILED
and KILLED ones, run again. Ctrl-C marks the current run(s) KILLED and the parent KILLED, and the
command exits with code 130.

Several invocations of one sweep (started together, or on several machines logging to one
tracking server) share its cells: each claims a cell just before running it
(:mod:`mrbench.sweeps.claims`), so every cell runs once between them; a cell another live
invocation holds is skipped and named. Each invocation exits once nothing is left that it can
claim (0 unless one of *its* cells failed); the last to end writes the complete report.

Executors (:mod:`mrbench.sweeps.executors`): ``workers == 1`` runs cells in this process, one
after another; ``workers > 1`` runs each cell in its own process
with ``cores // workers`` threads; ``executor: ray`` sends cells to Ray. The lab runs in a thread
of this process while cells run elsewhere (:class:`_SweepLab`), else after them.
"""

from __future__ import annotations

import shlex
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from mrbench.core.cell_protocol import DEFAULT_CELL_FN
from mrbench.core.errors import UserError
from mrbench.core.registry import import_target
from mrbench.engine.config import CellOptions, RunSpec
from mrbench.engine.processes.allocator import malloc_setting
from mrbench.engine.runs.console import verbose
from mrbench.engine.training.cpu_logprob import fold_setting
from mrbench.store.claims import Heartbeat
from mrbench.sweeps.cell import (
    SKIPPED,
    Cell,
    CellContext,
    CellFn,
    CellOutcome,
    ResolveFn,
    callable_path,
    error_text,
)
from mrbench.sweeps.cell_process import check_processes_per_cell
from mrbench.sweeps.claims import CellClaims
from mrbench.sweeps.executors import Executor, executor_for
from mrbench.sweeps.executors.local import slug
from mrbench.sweeps.grid import Grid, expand_grid, print_grid
from mrbench.sweeps.parent import finish_parent_run, kill_running_children, start_parent_run
from mrbench.sweeps.progress import SweepProgress
from mrbench.sweeps.resume import DONE, peek_states, resume_states, unfinished
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
    """Cells this invocation ran."""
    held: list[CellOutcome] = field(default_factory=list)
    """Cells it skipped (status SKIPPED) because another live invocation held or finished them."""
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
    :func:`mrbench.engine.cell.runner.run_cell`; any functions with their signatures can stand in
    (worker processes and Ray import ``cell_fn`` by its ``"module:attr"`` path).
    Every user error (bad names, unreachable store) is raised before the first cell starts.
    """
    from rich.console import Console

    from mrbench.store.local import resolve_tracking_uri

    console = console or Console()
    checked = _preflight(spec, dry_run, console)
    if checked is None:  # a dry run of a sweep that would stop: its problems are printed
        return SweepOutcome(spec.name, Grid([]))
    spec = checked
    grid = _with_cell_options(expand_grid(spec, resolve), spec)
    outcome = SweepOutcome(spec.name, grid)
    uri = resolve_tracking_uri(tracking_uri)
    write_report = spec.report if report is None else report
    if dry_run:
        _print_dry_run(spec, grid, uri, write_report, console)
        return outcome
    store = _open_store(spec, uri, outcome)
    todo = _plan_cells(spec, grid, store, outcome, console)
    cell_fn, executor, workers = _check_cells(spec, todo, cell_fn)
    parent = start_parent_run(
        store.client,
        store.experiment_id,
        spec,
        command=command or default_command(),
        cells=grid.cells,
        unavailable=grid.unavailable,
    )
    outcome.parent_run_id = parent
    # The live table on a terminal; plain lines with --verbose, whose library output it would garble.
    progress = SweepProgress(console, len(todo), workers, live=not verbose(), tracking_uri=uri)
    lab = _SweepLab(spec, uri) if write_report and spec.lab else None
    with _parent_run(store, parent, progress, outcome, len(todo), console):
        ctx = _cell_context(spec, store, parent, cell_fn)
        if lab is not None and executor.elsewhere:
            lab.start()
        try:
            for result in executor.run(todo, ctx, progress):
                (outcome.held if result.status == SKIPPED else outcome.outcomes).append(result)
            progress.close()
            _print_cells_left(spec.name, outcome, console)
            if spec.eval:  # the extra datasets, on each FINISHED cell's saved policy (evaluation.extra_evals)
                from mrbench.engine.evaluation.extra_evals import run_extra_evals

                cells = [c.spec for c in grid.cells]
                run_extra_evals(spec.eval, spec.task_params, cells, uri, store.experiment_id, _say(console))
            if write_report:
                if lab is not None:
                    lab.finish(console)
                outcome.report_path = _write_report(spec.name, uri, parent, console)
        finally:
            if lab is not None:  # Ctrl-C or an error: no further scenario (a no-op once it is done)
                lab.cancel()
    return outcome


def _preflight(spec: SweepSpec, dry_run: bool, console: Any) -> SweepSpec | None:
    """Before the grid and any run: every cell's memory plan (printed with ``--dry-run``) and data
    (:mod:`mrbench.sweeps.preflight`). A cell that does not fit or a missing dataset is a
    :class:`UserError` with one line each; a dry run prints those lines instead and returns None
    (without its data the grid cannot be expanded). Else ``spec``, with the ``paper`` preset's
    steps computed from its training sets."""
    from mrbench.sweeps import preflight

    plans = preflight.cell_plans(spec)
    if dry_run:
        preflight.print_plans(_say(console), spec, plans)
    problems = preflight.refusals(spec, plans) + [m.line() for m in preflight.missing_data(spec)]
    if problems:
        if not dry_run:
            raise UserError("\n".join(_cannot_start(spec, problems)))
        for line in _cannot_start(spec, problems, prefix="dry run: "):
            _say(console)(line)
        return None
    spec = preflight.with_steps_from_data(spec)
    if dry_run and spec.preset == "paper":
        steps = ", ".join(f"{t} {spec.task_train.get(t, {}).get('steps', spec.steps)}" for t in spec.tasks)
        _say(console)(f"steps (the paper's epochs over the training sets): {steps}")
    return spec


@dataclass(frozen=True)
class _Store:
    """The sweep's tracking store, open: its URI, a client, and the sweep's experiment."""

    uri: str
    client: Any
    experiment_id: str


def _with_cell_options(grid: Grid, spec: SweepSpec) -> Grid:
    """The grid with the sweep's cell options (checkpoint interval, store retry bound) on each
    :class:`RunSpec`, which hands them to its cell in any process; the run keys stay as they are."""
    options = CellOptions(
        checkpoint_every=spec.checkpoint_every,
        tracking_retry_s=spec.tracking_retry_s,
        kill_after_checkpoint=spec.kill_after_checkpoint,
    )
    if not options.given():
        return grid
    cells = [
        Cell(replace(c.spec, options=options), c.key) if isinstance(c.spec, RunSpec) else c
        for c in grid.cells
    ]
    return Grid(cells, grid.unavailable)


def _print_dry_run(spec: SweepSpec, grid: Grid, uri: str, report: bool, console: Any) -> None:
    """``--dry-run``: the grid with each cell's state in a store on this disk (if any), the models
    its cells left to run cannot load here (where they run on this machine), and what the lab would
    run. A server is not contacted: a dry run needs no store, and one that hangs must not hang it."""
    from mrbench.store.uri import is_local_store

    states = peek_states(uri, spec.name, grid.cells) if is_local_store(uri) else None
    print_grid(console, grid, states)
    todo = grid.cells if states is None else unfinished(grid.cells, states)
    problems = _model_problems(todo, _executor(spec, todo)[0])
    if problems:
        for line in _cannot_start(spec, problems, prefix="dry run: "):
            _say(console)(line)
    _describe_lab(spec, report, console)
    console.print(
        f"dry run: {len(grid.cells)} cells, nothing was run (store {uri}, experiment {spec.name!r})"
    )


def _open_store(spec: SweepSpec, uri: str, outcome: SweepOutcome) -> _Store:
    """The store, checked reachable, with the sweep's experiment (created if new). The sweep's own
    client rides out an outage for the sweep's ``tracking_retry_s`` (else ``$MRBENCH_TRACKING_RETRY_S``,
    else 300 s), as its cells do, and no request of it waits for a server longer than that allows."""
    from mrbench.store.client import RetryingClient, check_tracking_reachable, ensure_experiment

    check_tracking_reachable(uri)
    client = RetryingClient(uri, spec.tracking_retry_s)
    outcome.experiment_id = ensure_experiment(spec.name, uri, client=client)
    return _Store(uri, client, outcome.experiment_id)


def _plan_cells(
    spec: SweepSpec, grid: Grid, store: _Store, outcome: SweepOutcome, console: Any
) -> list[Cell]:
    """The cells left to run (not FINISHED), after marking stale RUNNING runs KILLED; prints the grid
    with each cell's state, other live invocations of the sweep and the counts."""
    resume = resume_states(store.client, store.experiment_id, grid.cells, mark_stale=True)
    states, outcome.stale_killed = resume.states, resume.stale_killed
    print_grid(console, grid, states)
    if outcome.stale_killed:
        console.print(
            f"marked {outcome.stale_killed} stale RUNNING run(s) KILLED (left by an interrupted invocation)"
        )
    for other in resume.live:
        console.print(
            f"[yellow]sweep {spec.name!r} is also running[/yellow] as {other.describe()}: the cells it "
            "holds are skipped, and each remaining cell runs in whichever invocation claims it first"
        )
    todo = unfinished(grid.cells, states)
    outcome.skipped = [c for c in grid.cells if states[c.key] == DONE]
    n_held = sum(states[c.key].startswith("held by") for c in todo)
    console.print(
        f"sweep {spec.name!r}: {len(grid.cells)} cells, {len(outcome.skipped)} already FINISHED (skipped), "
        + (f"{n_held} held by another invocation, " if n_held else "")
        + f"{len(todo) - n_held} to run; store {store.uri}"
    )
    return todo


def _check_cells(spec: SweepSpec, todo: list[Cell], cell_fn: CellFn | None) -> tuple[CellFn, Executor, int]:
    """The cell function, its executor and the workers for ``todo``; a UserError now, before the
    parent run exists, when workers could not import the function or the cells' processes cannot
    train them."""
    cell_fn = cell_fn or import_target(DEFAULT_CELL_FN)
    executor, workers = _executor(spec, todo)
    if executor.elsewhere:
        callable_path(cell_fn)  # workers import it by path
    # On Ray the cells check their node's GPUs and models themselves: this machine may have no GPU
    # (a head node), nor the nodes' model folders and caches.
    check_processes_per_cell(todo, spec.processes_per_cell, spec.distributed, here=executor.on_this_machine)
    problems = _model_problems(todo, executor)  # a misspelt hub id: once here, not in every cell
    if problems:
        raise UserError("\n".join(_cannot_start(spec, problems)))
    malloc_setting()  # malformed $MRBENCH_MALLOC or $MRBENCH_CPU_FOLD: the user's to fix, before
    fold_setting()  # any cell reads them
    return cell_fn, executor, workers


def _executor(spec: SweepSpec, todo: list[Cell]) -> tuple[Executor, int]:
    """The executor of ``todo`` and its workers (the sweep's, no more than the cells to run)."""
    workers = min(spec.workers, max(1, len(todo)))
    return executor_for(spec, workers), workers


def _model_problems(todo: list[Cell], executor: Executor) -> list[str]:
    """One line per model of ``todo`` that cannot be loaded here
    (:func:`mrbench.sweeps.preflight.unloadable_models`); none where the cells run elsewhere (on
    Ray each cell loads, and checks, its model on its node)."""
    from mrbench.sweeps.preflight import unloadable_models

    if not executor.on_this_machine:
        return []
    return unloadable_models(c.spec.model for c in todo if isinstance(c.spec, RunSpec))


def _cannot_start(spec: SweepSpec, problems: list[str], prefix: str = "") -> list[str]:
    """The lines that say why ``spec`` cannot start: a head counting ``problems``, then each indented."""
    head = f"{prefix}sweep {spec.name!r} cannot start ({len(problems)} problem(s)):"
    return [head, *(f"  {line}" for line in problems)]


@contextmanager
def _parent_run(
    store: _Store, parent: str, progress: SweepProgress, outcome: SweepOutcome, n_todo: int, console: Any
) -> Iterator[None]:
    """Keep the parent run alive (its heartbeat) while the block runs, and end it however the block
    ends: FINISHED (FAILED if a cell failed); after Ctrl-C, KILLED with the runs still RUNNING, and
    the interruption is swallowed (``outcome.interrupted``: exit code 130); after any other error,
    FAILED likewise, and the error goes on."""
    heartbeat = Heartbeat(store.uri, parent)
    heartbeat.start()

    def abort(status: str) -> None:
        with _ignore_sigint():
            heartbeat.stop()
            progress.close()
            kill_running_children(store.client, store.experiment_id, parent)
            finish_parent_run(store.client, parent, status)

    try:
        yield
    except KeyboardInterrupt:
        outcome.interrupted = True
        abort("KILLED")
        done = sum(o.status == "FINISHED" for o in outcome.outcomes)
        console.print(
            f"[yellow]interrupted[/yellow]: {done} of {n_todo} cells finished in this invocation; the "
            "current run was marked KILLED. Run the same command again to resume."
        )
    except BaseException:
        abort("FAILED")
        raise
    else:
        heartbeat.stop()
        finish_parent_run(store.client, parent, "FAILED" if outcome.failed else "FINISHED")


def _cell_context(spec: SweepSpec, store: _Store, parent: str, cell_fn: CellFn) -> CellContext:
    """Where this invocation's cells log, and how they are claimed and trained."""
    from mrbench.core.results_layout import sweep_logs_dir
    from mrbench.store.local import results_dir

    claims = CellClaims(store.client, store.experiment_id, parent)
    log_dir = sweep_logs_dir(results_dir(), slug(spec.name))
    ctx = CellContext(store.uri, spec.name, parent, spec.name, cell_fn, log_dir, claims)
    return replace(ctx, processes_per_cell=spec.processes_per_cell, distributed=spec.distributed)


def _print_cells_left(name: str, outcome: SweepOutcome, console: Any) -> None:
    """The cells that did not finish, and those left to another invocation of the sweep."""
    failed = outcome.failed
    if failed:
        console.print(
            f"[red]{len(failed)} cell(s) did not finish[/red]: " + ", ".join(o.cell.label for o in failed)
        )
    if outcome.held:
        console.print(f"{len(outcome.held)} cell(s) were left to another invocation of this sweep:")
        for held in outcome.held:
            console.print(f"  {held.cell.label}: held by {held.error}", highlight=False)
        console.print(
            "the report covers the cells FINISHED so far: the invocation that ends last writes the "
            f"complete one (or run `mrbench report {name}`)"
        )


def _say(console: Any) -> Any:
    """Print one plain line on ``console`` (no markup highlighting)."""
    return lambda line: console.print(line, highlight=False)


def _describe_lab(spec: SweepSpec, report: bool, console: Any) -> None:
    """What the lab would run (``--dry-run``)."""
    from mrbench.lab.in_sweep import describe, plan

    line = describe(plan(spec.lab, spec.methods, spec.method_params, spec.lab_seeds))
    console.print(line + ("" if report or not spec.lab else "; not run: the report is off"), highlight=False)


class _SweepLab:
    """The sweep's lab scenarios (:mod:`mrbench.lab.in_sweep`), logged before the report that opens
    with them; a scenario already in the store for this sweep is skipped. A failure is reported but
    fails neither the finished cells nor the report.

    When the cells run in other processes, the lab runs in a thread of this one while they do
    (:meth:`start`): on the core the first cell leaves idle while it builds its model, instead of
    after the last cell. Its lines are printed when the cells are done (:meth:`finish`), so they
    never cut through the progress display; an interrupted sweep lets the scenario under way end
    and starts no other (:meth:`cancel`). Cells that run in this process come first and the lab
    after them (two computations in one process would share its threads).
    """

    JOIN_S = 60.0  # the longest a cancelled scenario is waited for (one takes 1-2 s on a CPU)

    def __init__(self, spec: SweepSpec, uri: str) -> None:
        self.spec, self.uri = spec, uri
        self.lines: list[str] = []
        self.stop = threading.Event()
        self.thread: threading.Thread | None = None

    def start(self) -> None:
        """Run the lab in a thread of its own from now on."""
        self.thread = threading.Thread(target=self._run, name="mrbench-sweep-lab", daemon=True)
        self.thread.start()

    def cancel(self) -> None:
        """Start no further scenario; wait for the one under way, if any."""
        self.stop.set()
        if self.thread is not None:
            with _ignore_sigint():
                self.thread.join(self.JOIN_S)

    def finish(self, console: Any) -> None:
        """Wait for the lab started beside the cells, or run it now; then, the cells being done, the
        scenarios fitted to each task's rewards; print what it said."""
        if self.thread is None:
            self._run()
        else:
            self.thread.join()
        self._run(fitted=True)
        for line in self.lines:
            console.print(line, highlight=False)

    def _run(self, fitted: bool = False) -> None:
        from mrbench.lab.in_sweep import plan, plan_like, run_jobs

        spec = self.spec
        try:
            if fitted:  # the scenarios fitted to the cells' rewards (mrbench simulate --like sweep:NAME)
                say = self.lines.append
                jobs = plan_like(spec.name, self.uri, spec.methods, spec.method_params, spec.lab_seeds, say)
            else:
                jobs = plan(spec.lab, spec.methods, spec.method_params, spec.lab_seeds)
            run_jobs(jobs, sweep=spec.name, tracking_uri=self.uri, say=self.lines.append, stop=self.stop)
        except UserError as exc:
            self.lines.append(f"[yellow]no lab[/yellow]: {exc}")
        except BaseException as exc:  # a thread's error would otherwise only reach stderr
            self.lines.append(
                f"[red]lab failed[/red]: {error_text(exc)} (`mrbench simulate` runs one scenario)"
            )


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
