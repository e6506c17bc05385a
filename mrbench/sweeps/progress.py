"""Sweep progress on the console: cells done/total, the running cell(s), elapsed time and ETA."""

from __future__ import annotations

import time
from typing import Any

from mrbench.sweeps.cell import Cell, CellOutcome


def fmt_s(seconds: float) -> str:
    """``m:ss``, or ``h:mm:ss`` from one hour on.

    >>> fmt_s(75), fmt_s(3725)
    ('1:15', '1:02:05')
    """
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
        return fmt_s(per_cell * remaining / min(self.workers, max(1, remaining)))

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
            elapsed = fmt_s(time.monotonic() - self.started)
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
        message = f"[{style}]{outcome.status}[/{style}] {outcome.cell.label} in {fmt_s(outcome.wall_s)}"
        if outcome.error:
            message += f" — {outcome.error}"
        self.console.print(message)
        self._refresh()

    def skip(self, outcome: CellOutcome) -> None:
        """A cell another invocation holds: say who, and leave it out of the count."""
        self.total = max(self.done, self.total - 1)
        self.console.print(
            f"[yellow]skipped[/yellow] {outcome.cell.label}: held by {outcome.error}", highlight=False
        )
        if self._progress is not None:
            self._progress.update(self._task, total=self.total)
        self._refresh()

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
