"""Cells on this machine: one after another in this process, or up to ``workers`` at a time in
worker processes, each forked from the sweep's cell server (:mod:`mrbench.sweeps.cell_server`,
which imports torch and the engine once) or, without one, started as ``python -m
mrbench.sweeps.cell_process``.

A cell's library output goes to its own log (:mod:`mrbench.engine.runs.console`). Each worker process
gets the threads of :func:`mrbench.engine.processes.threads.threads_for` and writes what it prints outside
the cell to ``<log_dir>/<cell>-<run key>.log`` (with ``--verbose``, to the sweep's terminal).
"""

from __future__ import annotations

import json
import logging
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from rich.markup import escape

from mrbench.core.cell_protocol import WorkerOutcome
from mrbench.core.records import RecordError
from mrbench.engine.processes.devices import pin_for_cell
from mrbench.engine.processes.threads import thread_env, threads_for
from mrbench.engine.runs.console import verbose
from mrbench.kit.children import child_env, module_command, stop
from mrbench.store.claims import end_if_dead
from mrbench.store.client import TrackingUnavailable, tracking_client
from mrbench.store.runs import running_runs
from mrbench.sweeps import cell_server
from mrbench.sweeps.cell import Cell, CellContext, CellOutcome, callable_path, error_text
from mrbench.sweeps.cell_process import EXIT_FINISHED, EXIT_KILLED, cell_payload, failure_status
from mrbench.sweeps.cell_server import CellServer, ServerCell
from mrbench.sweeps.progress import SweepProgress
from mrbench.sweeps.schedule import LongestFirst

log = logging.getLogger(__name__)

STOP_GRACE_S = 30.0  # how long a stopped worker may take to end its run KILLED before SIGKILL
Worker = subprocess.Popen[bytes] | ServerCell
"""A cell's process: a new interpreter, or a child of the cell server."""


def run_sequential(cells: list[Cell], ctx: CellContext, progress: SweepProgress) -> Iterator[CellOutcome]:
    """Run cells one after another in this process, each claimed just before it starts (a cell held
    by another invocation is yielded SKIPPED); a failing cell is recorded and the sweep goes on.
    KeyboardInterrupt propagates (the cell function has ended its run KILLED)."""
    for cell in cells:
        skipped = ctx.held(cell)
        if skipped is not None:
            progress.skip(skipped)
            yield skipped
            continue
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
            outcome = CellOutcome(cell, failure_status(exc), None, time.perf_counter() - t0, error_text(exc))
        else:
            outcome = CellOutcome(
                cell,
                getattr(result, "status", "FINISHED"),
                getattr(result, "run_id", None),
                time.perf_counter() - t0,
            )
        progress.finish(outcome)
        yield outcome


def slug(text: str) -> str:
    """``text`` safe as a file name.

    >>> slug("grpo|tool-calling|Qwen/Qwen3-8B|s0")
    'grpo_tool-calling_Qwen_Qwen3-8B_s0'
    """
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text)


def run_processes(
    cells: list[Cell], ctx: CellContext, workers: int, progress: SweepProgress
) -> Iterator[CellOutcome]:
    """Run up to ``workers`` cells at a time, each in a process of its own (seed by seed, the longest
    kind of cell first: :mod:`mrbench.sweeps.schedule`): a child forked by the
    sweep's cell server (:mod:`mrbench.sweeps.cell_server`), or ``python -m
    mrbench.sweeps.cell_process`` without one, with the threads of
    :func:`mrbench.engine.processes.threads.threads_for` (one for a tiny model, else ``cores // workers``);
    output goes to ``<log_dir>/<cell>-<run key>.log``. A cell is claimed just before its process
    starts (one held by another invocation is yielded SKIPPED). A worker that dies without a word
    (SIGKILL: KILLED; a crash: FAILED) has the run it left RUNNING ended so at once
    (:func:`end_dead_cell_runs`). On KeyboardInterrupt every running child gets one SIGINT (its
    cell ends KILLED), then SIGKILL after 30 s."""
    fn_path = callable_path(ctx.cell_fn)
    env = child_env()  # every cell process imports this mrbench
    env["TOKENIZERS_PARALLELISM"] = "false"
    ctx.log_dir.mkdir(parents=True, exist_ok=True)
    queue = list(cells)
    order = LongestFirst()  # seed by seed, the longest kind of cell first (sweeps.schedule)
    running: dict[Worker, tuple[Cell, Path, Path, float, int]] = {}
    with tempfile.TemporaryDirectory(prefix="mrbench-sweep-") as tmp:
        starter = _Starter(fn_path, Path(tmp), progress)
        try:
            while queue or running:
                while queue and len(running) < workers and starter.can_start():
                    cell = queue.pop(order.pick(queue))
                    skipped = ctx.held(cell)
                    if skipped is not None:
                        progress.skip(skipped)
                        yield skipped
                        continue
                    payload = Path(tmp) / f"{cell.key}.json"
                    result = Path(tmp) / f"{cell.key}.result.json"
                    threads = threads_for(getattr(cell.spec, "model", ""), workers)
                    payload.write_text(json.dumps(cell_payload(cell, ctx, fn_path, threads, result)))
                    slot = min(set(range(workers)) - {entry[4] for entry in running.values()})
                    cell_env = {**env, **thread_env(threads)}  # and this slot's GPUs only (engine.devices)
                    pin_for_cell(cell_env, slot=slot, per_cell=getattr(ctx, "processes_per_cell", 1))
                    log = ctx.log_dir / f"{slug(cell.label)}-{cell.key}.log"
                    proc = starter.start(payload, cell_env, log)
                    running[proc] = (cell, result, log, time.perf_counter(), slot)
                    progress.start(cell)
                for proc in [p for p in running if p.poll() is not None]:
                    cell, result, log, t0, _slot = running.pop(proc)
                    assert proc.returncode is not None
                    outcome = _process_outcome(
                        cell, proc.returncode, result, time.perf_counter() - t0, str(log)
                    )
                    if isinstance(proc, ServerCell) and proc.lost and outcome.status != "FINISHED":
                        outcome.error = f"{outcome.error} (its cell server died)"
                    if not result.exists():  # it died without a word: its run may still say RUNNING
                        end_dead_cell_runs(ctx, outcome)
                    if outcome.status == "FINISHED":
                        order.finished(cell, outcome.wall_s)
                    progress.finish(outcome)
                    yield outcome
                time.sleep(0.1)
        except BaseException:
            _stop_children(list(running))
            raise
        finally:
            starter.close()


class _Starter:
    """Starts a sweep's cell processes: forked by its cell server while that works, else each
    as a new interpreter (the server could not start, is not ready, refused or died)."""

    def __init__(self, fn_path: str, tmp: Path, progress: SweepProgress) -> None:
        self.progress = progress
        self.server: CellServer | None = None
        self.use_server = cell_server.enabled()
        self.server_log = tmp / "cell-server.log"
        if not self.use_server:
            return
        try:
            with self.server_log.open("wb") as out:  # the server keeps its own copy of the fd
                self.server = CellServer(
                    cell_server.preload_modules(fn_path), output=None if verbose() else out
                )
        except (OSError, ImportError) as exc:
            self._give_up(f"the cell server could not start ({type(exc).__name__}: {exc})")

    def can_start(self) -> bool:
        """False while the server is still importing (cells wait for it: it is faster than
        starting them without it)."""
        if not self.use_server or self.server is None:
            return True
        ready = self.server.ready()
        if ready is False:
            self._give_up(self.server.problem or "the cell server failed")
        return ready is not None

    def start(self, payload: Path, env: dict[str, str], log: Path) -> Worker:
        """A running process for the cell of ``payload``."""
        if self.use_server and self.server is not None:
            proc = self.server.start(payload, env, None if verbose() else log)
            if proc is not None:
                return proc
            self._give_up(self.server.problem or "the cell server failed")
        with log.open("wb") as out:  # the child keeps its own copy of the fd
            # Own session: a terminal Ctrl-C reaches only the sweep, which forwards exactly one
            # SIGINT (a second one could interrupt the child while it ends its run KILLED).
            return subprocess.Popen(
                module_command("mrbench.sweeps.cell_process", str(payload)),
                stdout=None if verbose() else out,  # --verbose: the output shows live
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )

    def _give_up(self, why: str) -> None:
        """Start the remaining cells without the server (the cells it runs stay in its care)."""
        if not self.use_server:
            return
        self.use_server = False
        tail = ""
        if self.server_log.exists():
            lines = self.server_log.read_text(errors="replace").strip().splitlines()[-5:]
            tail = "".join(f"\n  {line}" for line in lines)
        message = f"{why}; each cell now starts as a new Python interpreter{tail}"
        console = getattr(self.progress, "console", None)
        if console is not None:
            console.print(f"[yellow]{escape(message)}[/yellow]")
        else:
            print(message, file=sys.stderr)

    def close(self) -> None:
        """End the server (once every cell it forked has ended)."""
        if self.server is not None:
            self.server.close()


def _stop_children(procs: list[Worker], grace_s: float = STOP_GRACE_S) -> None:
    """One SIGINT to each live worker (it ends its run KILLED), then SIGKILL after ``grace_s``."""
    # The worker, not its group: on SIGINT it stops its own ranks (launch_cell, fork_ranks).
    stop(procs, signal.SIGINT, grace_s=grace_s)


# Signals that stop a worker from outside (a user's or the OOM killer's SIGKILL, a scheduler's
# SIGTERM, SIGXFSZ past `ulimit -f`; SIGINT before its handler was installed): its cell is KILLED and
# resumes from its last checkpoint, where a crash (SIGSEGV, a nonzero exit) is FAILED.
_STOPPING = (signal.SIGINT, signal.SIGKILL, signal.SIGTERM, signal.SIGHUP, signal.SIGXFSZ)


def _process_outcome(cell: Cell, code: int, result: Path, wall_s: float, log: str) -> CellOutcome:
    """The outcome a worker wrote to ``result``, or, if it wrote none, the one its exit code tells."""
    written: WorkerOutcome | None = None
    if result.exists():
        try:
            written = WorkerOutcome.from_json(json.loads(result.read_text()), f"cell outcome {result}")
        except (ValueError, RecordError):  # cut short or damaged: the exit code tells
            written = None
    by_code = {EXIT_FINISHED: "FINISHED", EXIT_KILLED: "KILLED"} | {-int(s): "KILLED" for s in _STOPPING}
    status = written.status if written else by_code.get(code, "FAILED")
    error = written.error if written else None
    if status != "FINISHED" and not error:
        signame = f" ({signal.Signals(-code).name})" if code < 0 and -code in signal.valid_signals() else ""
        error = f"worker exited with code {code}{signame}; see {log}"
    return CellOutcome(cell, status, written.run_id if written else None, wall_s, error)


def end_dead_cell_runs(ctx: CellContext, outcome: CellOutcome, retry_s: float = 10.0) -> list[str]:
    """End with ``outcome``'s status and error the runs of its cell that a worker which died without
    ending them (SIGKILL, the OOM killer, a crash) left RUNNING; return their ids.

    At once, as the sweep sees the worker's exit, so that the store does not show the cell running
    after the sweep is over. Only this invocation's runs of the cell (children of its parent run;
    none without one) whose process is gone (:func:`mrbench.store.claims.end_if_dead`): a multi-process
    cell's ranks that still run keep theirs. A store that does not answer within ``retry_s`` leaves
    them RUNNING, with a warning; the next invocation of the sweep ends them KILLED.
    """
    if ctx.parent_run_id is None or outcome.status == "FINISHED":
        return []
    client = tracking_client(ctx.tracking_uri, retry_s)
    ended = []
    try:
        experiment = client.get_experiment_by_name(ctx.experiment)
        if experiment is None:
            return []
        key, parent = outcome.cell.key, ctx.parent_run_id
        for run in running_runs(client, experiment.experiment_id, key, parent_run_id=parent):
            if end_if_dead(client, run, status=outcome.status, error=outcome.error):
                ended.append(run.info.run_id)
    except TrackingUnavailable as exc:
        log.warning("%s; the runs of cell %s that its worker left RUNNING stay so", exc, outcome.cell.label)
    return ended
