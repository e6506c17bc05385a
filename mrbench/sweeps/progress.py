"""Sweep progress on the console: a live table of cells on a terminal, plain lines otherwise.

On a terminal (and without ``--verbose``) a table redrawn twice a second shows each started cell:
its state, the step it is in with that step's progress and ETA (read from the progress file the
cell keeps, :mod:`mrbench.engine.runs.phases`, whether it runs in this process or a worker), its
elapsed time and its primary metric before → after once it has finished; under it, cells
done/total, elapsed time and the sweep's ETA. A plain console (no terminal, or ``--verbose``)
gets a line per running cell when its step changes and every 30 s while a step lasts. Whatever
the console, each cell prints one line when it starts (plain consoles only) and one when it ends::

    ▶ cell 1/27  grpo|tool-calling|tiny|s0  run key 75d43ab610c5  elapsed 0:00  ETA ?
      grpo|tool-calling|tiny|s0: warm start 384/1000 steps · ETA 0:47
    FINISHED grpo|tool-calling|tiny|s0 in 0:28 · exact_match 0.125 → 0.172
    FAILED gdpo|tool-calling|tiny|s0 in 0:05 — RuntimeError: … (log: …/cell.log)
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

from mrbench.engine.runs.console import CELL_LOG_NAME
from mrbench.engine.runs.phases import PROGRESS_NAME, describe, fmt_s, read_progress
from mrbench.sweeps.cell import Cell, CellOutcome

__all__ = ["SweepProgress", "fmt_s"]

PLAIN_POLL_S = 1.0  # how often a plain console looks at the running cells' progress files
PLAIN_EVERY_S = 30.0  # at most one line per cell and step this often (and one when its step changes)
STATE_STYLE = {"running": "cyan", "FINISHED": "green", "FAILED": "red", "KILLED": "yellow"}


@dataclass
class _Row:
    cell: Cell
    started: float
    state: str = "running"
    wall_s: float | None = None
    metric: str = ""
    seen_step: bool = False  # its progress file was there: once gone, the cell is ending


def cell_folder(cell: Cell) -> Any:
    """The folder where the cell keeps its log and progress (``<results>/checkpoints/<run key>``)."""
    from mrbench.engine.cell.checkpoints import CellFolder

    return CellFolder.for_run_key(cell.key).root


class SweepProgress:
    """Cells done/total, the cells started so far with their state, elapsed time and ETA.

    ``live``: draw the live table (only on a terminal console); ``tracking_uri``: where to read a
    finished cell's primary metric before → after (left out without it).
    """

    def __init__(
        self, console: Any, total: int, workers: int, *, live: bool, tracking_uri: str | None = None
    ) -> None:
        self.console, self.total, self.workers = console, total, max(1, workers)
        self.tracking_uri = tracking_uri
        self.started = time.monotonic()
        self.walls: list[float] = []
        self.running: dict[str, Cell] = {}
        self.rows: dict[str, _Row] = {}
        self._lock = threading.Lock()
        self._live = None
        if live and total and getattr(console, "is_terminal", False):
            from rich.live import Live

            self._live = Live(
                console=console,
                get_renderable=self._table,
                refresh_per_second=2,
                transient=False,
                redirect_stdout=False,  # fds 1 and 2 are captured (mrbench.engine.runs.console)
                redirect_stderr=False,
            )
            self._live.start()
        # Plain consoles get a line per running cell when its step changes, and at most every
        # PLAIN_EVERY_S seconds while it lasts, so a long step (the model build) shows progress too.
        self._plain: threading.Thread | None = None
        self._stop = threading.Event()
        self._said: dict[str, tuple[str, float]] = {}  # cell key → (phase, when printed)
        if self._live is None and total:
            self._plain = threading.Thread(target=self._plain_lines, daemon=True, name="mrbench-progress")
            self._plain.start()

    @property
    def done(self) -> int:
        return len(self.walls)

    def eta(self) -> str:
        if not self.walls:
            return "?"
        remaining = self.total - self.done
        per_cell = sum(self.walls) / len(self.walls)
        return fmt_s(per_cell * remaining / min(self.workers, max(1, remaining)))

    # ------------------------------------------------------------------ events (from the executors)

    def start(self, cell: Cell) -> None:
        with self._lock:
            self.running[cell.key] = cell
            self.rows[cell.key] = _Row(cell, time.monotonic())
        if self._live is None:
            elapsed = fmt_s(time.monotonic() - self.started)
            self.console.print(
                f"▶ cell {self.done + len(self.running)}/{self.total}  {cell.label}  run key {cell.key}  "
                f"elapsed {elapsed}  ETA {self.eta()}",
                highlight=False,
                markup=False,
                soft_wrap=True,
            )

    def finish(self, outcome: CellOutcome) -> None:
        metric = self._metric(outcome) if outcome.status == "FINISHED" else ""
        with self._lock:
            self.running.pop(outcome.cell.key, None)
            self.walls.append(outcome.wall_s)
            row = self.rows.setdefault(outcome.cell.key, _Row(outcome.cell, time.monotonic()))
            row.state, row.wall_s, row.metric = outcome.status, outcome.wall_s, metric
        style = STATE_STYLE.get(outcome.status, "red")
        message = (
            f"[{style}]{outcome.status}[/{style}] {_escape(outcome.cell.label)} in {fmt_s(outcome.wall_s)}"
        )
        if metric:
            message += f" · {_escape(metric)}"
        if outcome.error:
            message += f" — {_escape(outcome.error)}"
        if outcome.status != "FINISHED":
            log = cell_folder(outcome.cell) / CELL_LOG_NAME
            if log.exists():
                message += f" (log: {_escape(str(log))})"
        self.console.print(message, highlight=False, soft_wrap=True)

    def skip(self, outcome: CellOutcome) -> None:
        """A cell another invocation holds: say who, and leave it out of the count."""
        self.total = max(self.done, self.total - 1)
        self.console.print(
            f"[yellow]skipped[/yellow] {_escape(outcome.cell.label)}: held by {_escape(str(outcome.error))}",
            highlight=False,
            soft_wrap=True,
        )

    def close(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None
        if self._plain is not None:
            self._stop.set()
            self._plain.join(2)
            self._plain = None

    def _plain_lines(self) -> None:
        while not self._stop.wait(PLAIN_POLL_S):
            with self._lock:
                running = list(self.running.values())
            now = time.monotonic()
            for cell in running:
                state = read_progress(cell_folder(cell) / PROGRESS_NAME)
                if not state or state.get("ended"):
                    continue
                phase = str(state.get("phase", ""))
                last_phase, last_at = self._said.get(cell.key, ("", 0.0))
                if phase == last_phase and now - last_at < PLAIN_EVERY_S:
                    continue
                self._said[cell.key] = (phase, now)
                self.console.print(
                    f"  {cell.label}: {describe(state)}", highlight=False, markup=False, soft_wrap=True
                )

    # ------------------------------------------------------------------ reading

    def _metric(self, outcome: CellOutcome) -> str:
        """``"<primary> before → after"`` of a finished cell's run, or "" when it cannot be read."""
        if not (self.tracking_uri and outcome.run_id):
            return ""
        from mrbench.core import layout
        from mrbench.store.client import tracking_client

        try:  # one try: a progress line does not wait for a store that does not answer
            run = tracking_client(self.tracking_uri, retry_s=0).get_run(outcome.run_id)
        except Exception:
            return ""
        primary = layout.read_tag(run.data.tags, layout.PRIMARY_METRIC)
        metrics = run.data.metrics
        before = metrics.get(layout.eval_before_metric(primary))
        after = metrics.get(layout.eval_metric(primary))
        if not primary or before is None or after is None:
            return ""
        return f"{primary} {before:.3f} → {after:.3f}"

    def _table(self) -> Any:
        from rich.table import Table

        now = time.monotonic()
        with self._lock:
            rows = list(self.rows.values())
            n_running = len(self.running)
        room = max(3, self.console.height - 6)
        if len(rows) > room:  # the running cells, and as many of the latest to end as fit
            ended = [r for r in rows if r.state != "running"]
            keep = max(0, room - n_running)
            rows = (ended[-keep:] if keep else []) + [r for r in rows if r.state == "running"]
        table = Table(box=None, pad_edge=False, show_edge=False)
        for column in ("cell", "state", "step", "elapsed", "primary metric (before → after)"):
            table.add_column(column, no_wrap=column != "step")
        for row in rows:
            style = STATE_STYLE.get(row.state, "red")
            step = ""
            if row.state == "running":
                state = read_progress(cell_folder(row.cell) / PROGRESS_NAME)
                row.seen_step = row.seen_step or state is not None
                step = describe(state) if state else ("ending" if row.seen_step else "starting")
            elapsed = row.wall_s if row.wall_s is not None else now - row.started
            table.add_row(row.cell.label, f"[{style}]{row.state}[/{style}]", step, fmt_s(elapsed), row.metric)
        pending = self.total - self.done - n_running
        table.caption = (
            f"cells {self.done}/{self.total} done"
            + (f", {pending} waiting" if pending > 0 else "")
            + f" · elapsed {fmt_s(now - self.started)} · ETA {self.eta()}"
        )
        return table


def _escape(text: str) -> str:
    """``text`` printed as is by rich (no markup)."""
    from rich.markup import escape

    return escape(text)
