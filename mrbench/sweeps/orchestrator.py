"""Running a sweep: expand the grid, resume from MLflow, execute cells, then write the report.

Layout in MLflow (one experiment per sweep name):

- one **parent run** per invocation: tags ``mrbench.role=sweep``, ``mrbench.sweep``,
  ``mrbench.command`` (the exact command line), ``mrbench.git_sha``, ``mrbench.version.<pkg>``,
  ``mrbench.host``/``mrbench.pid`` (to refuse a concurrent run of the same sweep); the config as
  params; ``sweep.json`` (config, command, the grid's cells, unavailable tasks) as an artifact;
- one **child run** per executed cell (written by the cell function, ``mrbench.engine.runner.run_cell``).

Resume: a cell whose run key has a FINISHED run in the experiment is skipped; RUNNING runs left
by a dead invocation are marked KILLED (so the UI is truthful) and their cells, like FAILED and
KILLED ones, run again. Ctrl-C marks the current run(s) KILLED and the parent KILLED, and the
command exits with code 130.

Executors: ``workers == 1`` runs cells in this process, one after another (TRL's per-step bar
visible); ``workers > 1`` runs each cell in its own process (:mod:`mrbench.sweeps.cell_process`) with
``cores // workers`` threads; ``executor: ray`` sends cells to Ray (:mod:`mrbench.sweeps.ray_executor`).
"""

from __future__ import annotations

import importlib
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mrbench.core.errors import UserError
from mrbench.sweeps.spec import SweepSpec

CellFn = Callable[..., Any]
ResolveFn = Callable[..., Any]

DEFAULT_CELL_FN = "mrbench.engine.runner:run_cell"
DEFAULT_RESOLVE_FN = "mrbench.engine.config:resolve_spec"
VERSION_PACKAGES = ("torch", "trl", "transformers", "accelerate", "datasets", "mlflow", "lm-eval", "numpy")
ROLE_TAG = "mrbench.role"


@dataclass(frozen=True)
class Cell:
    """One grid cell: a resolved run spec and its run key."""

    spec: Any  # mrbench.engine.config.RunSpec (or a compatible spec with run_key/to_dict/label)
    key: str = ""

    def __post_init__(self) -> None:
        if not self.key:
            object.__setattr__(self, "key", self.spec.run_key())

    @property
    def label(self) -> str:
        """``method|task|model|sSEED``."""
        return f"{self.spec.method}|{self.spec.task}|{self.spec.model}|s{self.spec.seed}"

    def summary(self) -> dict[str, Any]:
        """The grid entry recorded in the parent run's ``sweep.json``."""
        return {
            "run_key": self.key,
            "method": self.spec.method,
            "task": self.spec.task,
            "model": self.spec.model,
            "seed": self.spec.seed,
        }


@dataclass
class Grid:
    """The expanded sweep: cells in run order, and tasks that could not be loaded (task → reason)."""

    cells: list[Cell]
    unavailable: dict[str, str] = field(default_factory=dict)


@dataclass
class CellOutcome:
    """How one executed cell ended."""

    cell: Cell
    status: str  # FINISHED | FAILED | KILLED
    run_id: str | None = None
    wall_s: float = 0.0
    error: str | None = None


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
            return 130
        return 1 if self.failed else 0


@dataclass(frozen=True)
class CellContext:
    """Where every cell of one invocation logs."""

    tracking_uri: str
    experiment: str
    parent_run_id: str | None
    sweep: str
    cell_fn: CellFn
    log_dir: Path


def load_callable(path: str) -> Callable[..., Any]:
    """``"module:attr"`` → the object; UserError naming the path if it cannot be imported."""
    module, _, attr = path.partition(":")
    if not module or not attr:
        raise UserError(f"expected 'module:attr', got {path!r}")
    try:
        obj: Any = importlib.import_module(module)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as exc:
        raise UserError(f"cannot load {path!r}: {exc}") from None
    return obj


def callable_path(fn: Callable[..., Any]) -> str:
    """The ``"module:attr"`` path of a module-level function (worker processes import it by path)."""
    module, qualname = getattr(fn, "__module__", None), getattr(fn, "__qualname__", "")
    if not module or module == "__main__" or "<locals>" in qualname:
        raise UserError(
            f"cell function {fn!r} must be a module-level function (worker processes import it by path)"
        )
    return f"{module}:{qualname}"


# --------------------------------------------------------------------------------------------- grid


def expand_grid(spec: SweepSpec, resolve: ResolveFn | None = None) -> Grid:
    """Resolve every cell (seed → task → model → method order, so a partial sweep has every method
    for the first seeds). Raises UserError for bad names/params before anything runs; a task whose
    code cannot be imported (ImportError) is recorded as unavailable, with the reason."""
    resolve = resolve or load_callable(DEFAULT_RESOLVE_FN)
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
                                train=spec.train_for(task) or None,
                            )
                        except UserError as exc:
                            raise UserError(f"sweep cell {method}|{task}|{model}|s{seed}: {exc}") from None
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
            spec.tasks.index(c.spec.task),
            spec.models_for(c.spec.task).index(c.spec.model),
            spec.methods.index(c.spec.method),
        ),
    )
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


# ------------------------------------------------------------------------------------------- resume


def _search_all(client: Any, experiment_id: str, filter_string: str = "") -> list[Any]:
    runs, token = [], None
    while True:
        page = client.search_runs(
            [experiment_id], filter_string=filter_string, max_results=1000, page_token=token
        )
        runs.extend(page)
        token = page.token
        if not token:
            return runs


def _pid_alive(pid: int, started_ms: int) -> bool:
    """True if ``pid`` runs on this host and was started before the run it recorded (PID reuse guard)."""
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError, OSError):
        return False
    try:
        import psutil

        return psutil.Process(pid).create_time() <= started_ms / 1000.0 + 5.0
    except Exception:  # psutil missing or the process just ended
        return True


def resume_states(
    client: Any, experiment_id: str, cells: list[Cell], *, mark_stale: bool
) -> tuple[dict[str, str], int]:
    """Resume state per run key (``"done"``, ``"re-run (FAILED)"``, …) and how many stale RUNNING runs were
    marked KILLED (only with ``mark_stale``). Refuses (UserError) while another invocation of this
    sweep is alive on this host."""
    runs = _search_all(client, experiment_id)
    if mark_stale:
        host = socket.gethostname()
        for run in runs:
            tags = run.data.tags
            if (
                run.info.status == "RUNNING"
                and tags.get(ROLE_TAG) == "sweep"
                and tags.get("mrbench.host") == host
            ):
                pid = int(tags.get("mrbench.pid", "0") or 0)
                if pid and pid != os.getpid() and _pid_alive(pid, run.info.start_time):
                    raise UserError(
                        f"sweep {tags.get('mrbench.sweep')!r} is already running here (pid {pid}, MLflow run "
                        f"{run.info.run_id}); wait for it or stop it before running it again"
                    )
    finished: set[str] = set()
    last: dict[str, str] = {}
    stale = 0
    for run in sorted(runs, key=lambda r: r.info.start_time or 0):
        status = run.info.status
        if status == "RUNNING" and mark_stale:
            # Left by an invocation that died (kill -9, power loss): no process will ever end it.
            client.set_terminated(run.info.run_id, "KILLED")
            stale += 1
            status = "KILLED"
        key = run.data.tags.get("mrbench.run_key")
        if not key:
            continue
        last[key] = status
        if status == "FINISHED":
            finished.add(key)
    states = {}
    for cell in cells:
        if cell.key in finished:
            states[cell.key] = "done"
        elif cell.key in last:
            states[cell.key] = f"re-run ({last[cell.key]})"
        else:
            states[cell.key] = "to run"
    return states, stale


# ------------------------------------------------------------------------------------------- parent


def package_versions() -> dict[str, str]:
    """Installed versions of the packages that decide what a cell computes."""
    from importlib import metadata

    versions = {}
    for name in VERSION_PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def _flat_params(spec: SweepSpec) -> dict[str, str]:
    flat: dict[str, str] = {}
    for key, value in spec.to_dict().items():
        if isinstance(value, dict):
            for sub, inner in value.items():
                if isinstance(inner, dict):
                    for leaf, v in inner.items():
                        flat[f"{key}.{sub}.{leaf}"] = str(v)
                else:
                    flat[f"{key}.{sub}"] = (
                        ",".join(map(str, inner)) if isinstance(inner, list) else str(inner)
                    )
        else:
            flat[key] = ",".join(map(str, value)) if isinstance(value, list) else str(value)
    return {k: v[:6000] for k, v in flat.items()}


def start_parent_run(
    client: Any,
    experiment_id: str,
    spec: SweepSpec,
    *,
    command: str,
    cells: list[Cell],
    unavailable: dict[str, str],
) -> str:
    """Create this invocation's parent run (tags, config params, ``sweep.json``); return its id."""
    from mlflow.entities import Param

    from mrbench.engine.tracking import git_sha

    tags = {
        ROLE_TAG: "sweep",
        "mrbench.sweep": spec.name,
        "mrbench.command": command,
        "mrbench.git_sha": git_sha(),
        "mrbench.host": socket.gethostname(),
        "mrbench.pid": str(os.getpid()),
        "mrbench.preset": spec.preset or "",
        "mrbench.unavailable_tasks": ",".join(unavailable),
    }
    versions = package_versions()
    tags.update({f"mrbench.version.{k}": v for k, v in versions.items()})
    run_id = client.create_run(experiment_id, tags=tags, run_name=f"sweep {spec.name}").info.run_id
    client.log_batch(run_id, params=[Param(k, v) for k, v in _flat_params(spec).items()])
    client.log_dict(
        run_id,
        {
            "name": spec.name,
            "command": command,
            "config": spec.to_dict(),
            "versions": versions,
            "cells": [c.summary() for c in cells],
            "unavailable": unavailable,
        },
        "sweep.json",
    )
    return run_id


def finish_parent_run(client: Any, run_id: str, status: str) -> None:
    """End the parent run with ``status`` (FINISHED, FAILED or KILLED)."""
    client.set_terminated(run_id, status)


def kill_running_children(client: Any, experiment_id: str, parent_run_id: str) -> int:
    """Mark this invocation's still-RUNNING child runs KILLED (a worker that died without ending its run)."""
    count = 0
    for run in _search_all(client, experiment_id, "attributes.status = 'RUNNING'"):
        if run.data.tags.get("mlflow.parentRunId") == parent_run_id:
            client.set_terminated(run.info.run_id, "KILLED")
            count += 1
    return count


# ----------------------------------------------------------------------------------------- progress


def _fmt_s(seconds: float) -> str:
    seconds = max(0, int(seconds))
    return (
        f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
        if seconds >= 3600
        else f"{seconds // 60}:{seconds % 60:02d}"
    )


class SweepProgress:
    """Cells done/total, current cell(s), elapsed and ETA.

    In-process (one worker) a status line is printed before each cell, leaving the terminal to
    TRL's own per-step bar; with worker processes a live rich progress bar lists the running cells.
    """

    def __init__(self, console: Any, total: int, workers: int, *, live: bool) -> None:
        self.console, self.total, self.workers = console, total, max(1, workers)
        self.started = time.monotonic()
        self.walls: list[float] = []
        self.running: dict[str, Cell] = {}
        self._progress = None
        self._task = None
        if live and total:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self._progress = Progress(
                TextColumn("[bold]cells"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TextColumn("ETA {task.fields[eta]}"),
                TextColumn("{task.description}"),
                console=console,
                transient=False,
            )
            self._task = self._progress.add_task("", total=total, eta="?")
            self._progress.start()

    @property
    def done(self) -> int:
        return len(self.walls)

    def eta(self) -> str:
        if not self.walls:
            return "?"
        remaining = self.total - self.done
        per_cell = sum(self.walls) / len(self.walls)
        return _fmt_s(per_cell * remaining / min(self.workers, max(1, remaining)))

    def _refresh(self) -> None:
        if self._progress is not None:
            labels = [c.label for c in self.running.values()]
            running = ", ".join(labels[:3]) + (f" (+{len(labels) - 3} more)" if len(labels) > 3 else "")
            self._progress.update(
                self._task, completed=self.done, eta=self.eta(), description=f"running: {running}"
            )

    def start(self, cell: Cell) -> None:
        self.running[cell.key] = cell
        if self._progress is None:
            elapsed = _fmt_s(time.monotonic() - self.started)
            # A printed line (not a live bar): the cell's own TRL progress bar follows it.
            self.console.print(
                f"[bold]▶ cell {self.done + 1}/{self.total}[/bold]  {cell.label}  run key {cell.key}  "
                f"elapsed {elapsed}  ETA {self.eta()}",
                highlight=False,
            )
        self._refresh()

    def finish(self, outcome: CellOutcome) -> None:
        self.running.pop(outcome.cell.key, None)
        self.walls.append(outcome.wall_s)
        style = "green" if outcome.status == "FINISHED" else "red"
        message = f"[{style}]{outcome.status}[/{style}] {outcome.cell.label} in {_fmt_s(outcome.wall_s)}"
        if outcome.error:
            message += f" — {outcome.error}"
        self.console.print(message)
        self._refresh()

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None


# ---------------------------------------------------------------------------------------- executors


def _error_text(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) < 500 else text[:497] + "..."


def run_sequential(cells: list[Cell], ctx: CellContext, progress: SweepProgress) -> Iterator[CellOutcome]:
    """Run cells one after another in this process; a failing cell is recorded and the sweep goes on.
    KeyboardInterrupt propagates (the cell function has ended its run KILLED)."""
    for cell in cells:
        progress.start(cell)
        t0 = time.perf_counter()
        try:
            result = ctx.cell_fn(
                cell.spec,
                tracking_uri=ctx.tracking_uri,
                experiment=ctx.experiment,
                parent_run_id=ctx.parent_run_id,
                sweep=ctx.sweep,
                progress=True,
            )
        except KeyboardInterrupt:
            raise
        except Exception as exc:
            outcome = CellOutcome(cell, "FAILED", None, time.perf_counter() - t0, _error_text(exc))
        else:
            outcome = CellOutcome(
                cell,
                getattr(result, "status", "FINISHED"),
                getattr(result, "run_id", None),
                time.perf_counter() - t0,
            )
        progress.finish(outcome)
        yield outcome


def available_cores() -> int:
    """CPU cores this process may use (affinity-aware)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text)


def run_processes(
    cells: list[Cell], ctx: CellContext, workers: int, progress: SweepProgress
) -> Iterator[CellOutcome]:
    """Run up to ``workers`` cells at a time, each in ``python -m mrbench.sweeps.cell_process`` with
    ``cores // workers`` threads; output goes to ``<log_dir>/<cell>.log``. On KeyboardInterrupt
    every running child gets one SIGINT (its cell ends KILLED), then SIGKILL after 30 s."""
    threads = max(1, available_cores() // workers)
    fn_path = callable_path(ctx.cell_fn)
    env = os.environ.copy()
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env[var] = str(threads)
    env["TOKENIZERS_PARALLELISM"] = "false"
    ctx.log_dir.mkdir(parents=True, exist_ok=True)
    queue = list(cells)
    running: dict[subprocess.Popen[bytes], tuple[Cell, Path, Any, float]] = {}
    with tempfile.TemporaryDirectory(prefix="mrbench-sweep-") as tmp:
        try:
            while queue or running:
                while queue and len(running) < workers:
                    cell = queue.pop(0)
                    payload = Path(tmp) / f"{cell.key}.json"
                    result = Path(tmp) / f"{cell.key}.result.json"
                    payload.write_text(json.dumps(cell_payload(cell, ctx, fn_path, threads, result)))
                    log = (ctx.log_dir / f"{_slug(cell.label)}-{cell.key}.log").open("wb")
                    # Own session: a terminal Ctrl-C reaches only the sweep, which forwards exactly one
                    # SIGINT (a second one could interrupt the child while it ends its run KILLED).
                    proc = subprocess.Popen(
                        [sys.executable, "-m", "mrbench.sweeps.cell_process", str(payload)],
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        env=env,
                        start_new_session=True,
                    )
                    running[proc] = (cell, result, log, time.perf_counter())
                    progress.start(cell)
                for proc in [p for p in running if p.poll() is not None]:
                    cell, result, log, t0 = running.pop(proc)
                    log.close()
                    outcome = _process_outcome(
                        cell, proc.returncode, result, time.perf_counter() - t0, log.name
                    )
                    progress.finish(outcome)
                    yield outcome
                time.sleep(0.1)
        except BaseException:
            _stop_children(list(running))
            for _cell, _result, log, _t0 in running.values():
                log.close()
            raise


def _stop_children(procs: list[subprocess.Popen[bytes]], grace_s: float = 30.0) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
    deadline = time.monotonic() + grace_s
    for proc in procs:
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def cell_payload(
    cell: Cell, ctx: CellContext, fn_path: str, threads: int, result: Path | None
) -> dict[str, Any]:
    """What a worker (process or Ray task) needs to run ``cell``: JSON-ready."""
    spec_cls = type(cell.spec)
    return {
        "spec": cell.spec.to_dict(),
        "spec_class": f"{spec_cls.__module__}:{spec_cls.__qualname__}",
        "cell_fn": fn_path,
        "tracking_uri": ctx.tracking_uri,
        "experiment": ctx.experiment,
        "parent_run_id": ctx.parent_run_id,
        "sweep": ctx.sweep,
        "threads": threads,
        "result": str(result) if result else None,
        "parent_pid": os.getpid(),
    }


def _process_outcome(cell: Cell, code: int, result: Path, wall_s: float, log: str) -> CellOutcome:
    data: dict[str, Any] = {}
    if result.exists():
        try:
            data = json.loads(result.read_text())
        except json.JSONDecodeError:
            data = {}
    status = data.get("status") or ("FINISHED" if code == 0 else "KILLED" if code in (130, -2) else "FAILED")
    error = data.get("error")
    if status != "FINISHED" and not error:
        error = f"worker exited with code {code}; see {log}"
    return CellOutcome(cell, status, data.get("run_id"), wall_s, error)


# --------------------------------------------------------------------------------------------- main


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
    """The command line of this process, as a user would type it."""
    argv = list(sys.argv)
    if argv and Path(argv[0]).name in ("mrbench", "cli.py"):
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
    :func:`mrbench.engine.runner.run_cell`; tests inject fast fakes (:mod:`fakes`).
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
        print_grid(console, grid, _peek_states(uri, spec.name, grid.cells))
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
    ctx = CellContext(uri, spec.name, parent, spec.name, cell_fn, results_dir() / "logs" / _slug(spec.name))
    progress = SweepProgress(console, len(todo), workers, live=workers > 1 or spec.executor == "ray")
    try:
        if spec.executor == "ray":
            from mrbench.sweeps.ray_executor import run_ray

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
        console.print(f"[red]report failed[/red]: {_error_text(exc)} (rerun `mrbench report {name}`)")
        return None
    console.print(f"report: {path}")
    return path


def _peek_states(uri: str, name: str, cells: list[Cell]) -> dict[str, str] | None:
    """Resume states for a dry run, read-only; None when the store does not exist yet or is unreachable."""
    if uri.startswith("sqlite:///") and not Path(uri.removeprefix("sqlite:///")).exists():
        return None
    try:
        from mlflow.tracking import MlflowClient

        client = MlflowClient(tracking_uri=uri)
        experiment = client.get_experiment_by_name(name)
        if experiment is None:
            return None
        return resume_states(client, experiment.experiment_id, cells, mark_stale=False)[0]
    except Exception:  # a dry run only informs; the real run checks the store properly
        return None
