"""Progress of a cell's long steps (model build, evaluation, training) and how it is shown.

A step is a :class:`Phase`: a name, how much of it is done out of a total (None while unknown),
and the time it started, from which :meth:`Phase.eta_s` follows. Code that does the work
announces it (:func:`phase`, :func:`training_callback` for TRL, :func:`evaluation` for the
generation calls of an evaluation); whoever listens shows it:

- :func:`progress_file`: the current phase as JSON in the cell's folder, read by a sweep's live
  table (:mod:`mrbench.sweeps.progress`), for cells in this process and in worker processes alike;
- :func:`shown`: ``mrbench run``'s display, a rich progress bar per phase on a terminal, else
  plain lines (a start line, one at each quarter with the ETA unless the phase is short, one at
  the end).

With nobody listening a phase costs a function call.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from mrbench.core.results_layout import PROGRESS

PROGRESS_NAME = PROGRESS
WRITE_EVERY_S = 0.5  # the progress file is rewritten at most this often within a phase
QUIET_S = 5.0  # plain lines: no quarter lines within a phase's first seconds

Listener = Callable[[str, "Phase"], None]
"""Called with ``"start"``, ``"update"`` or ``"end"`` and the phase."""
_listeners: list[Listener] = []


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


@dataclass
class Phase:
    """One long step: ``done`` of ``total`` ``unit`` (``total`` None: not known)."""

    name: str
    total: int | None = None
    unit: str = ""
    done: int = 0
    started: float = field(default_factory=time.monotonic)
    ended: float | None = None

    def elapsed_s(self) -> float:
        return (self.ended or time.monotonic()) - self.started

    def eta_s(self) -> float | None:
        """Seconds left at the rate so far; None before the first unit or without a total."""
        if not self.total or not self.done or self.ended is not None:
            return None
        return self.elapsed_s() / self.done * max(0, self.total - self.done)

    def update(self, done: int) -> None:
        """Set how much is done."""
        self.done = done
        _emit("update", self)

    def advance(self, n: int = 1) -> None:
        self.update(self.done + n)

    def end(self) -> None:
        if self.ended is None:
            self.ended = time.monotonic()
            _emit("end", self)

    def describe(self) -> str:
        """``"train 12/30 steps · ETA 0:20"`` (the counts and ETA as far as known)."""
        return describe(self.to_dict())

    def to_dict(self) -> dict[str, Any]:
        eta = self.eta_s()
        return {
            "phase": self.name,
            "done": self.done,
            "total": self.total,
            "unit": self.unit,
            "elapsed_s": round(self.elapsed_s(), 1),
            "eta_s": None if eta is None else round(eta, 1),
            "ended": self.ended is not None,
        }


def describe(state: dict[str, Any]) -> str:
    """One line for a phase's :meth:`Phase.to_dict` (as read back by :func:`read_progress`).

    >>> describe({"phase": "train", "done": 12, "total": 30, "unit": "steps", "eta_s": 20.0})
    'train 12/30 steps · ETA 0:20'
    >>> describe({"phase": "tokenizer", "done": 0, "total": None, "unit": ""})
    'tokenizer'
    """
    text = str(state.get("phase", ""))
    total, done, unit = state.get("total"), state.get("done") or 0, state.get("unit") or ""
    if total:
        text += f" {done}/{total}" + (f" {unit}" if unit else "")
    elif done:
        text += f" {done}" + (f" {unit}" if unit else "")
    if state.get("eta_s") is not None:
        text += f" · ETA {fmt_s(state['eta_s'])}"
    return text


def _emit(event: str, current: Phase) -> None:
    for listener in list(_listeners):
        listener(event, current)


def start(name: str, total: int | None = None, unit: str = "") -> Phase:
    """Announce a phase; end it with :meth:`Phase.end`."""
    current = Phase(name, total, unit)
    _emit("start", current)
    return current


@contextlib.contextmanager
def phase(name: str, total: int | None = None, unit: str = "") -> Iterator[Phase]:
    """A phase for the block (ended however the block ends)."""
    current = start(name, total, unit)
    try:
        yield current
    finally:
        current.end()


@contextlib.contextmanager
def listening(listener: Listener) -> Iterator[None]:
    """``listener`` gets every phase event within the block."""
    _listeners.append(listener)
    try:
        yield
    finally:
        _listeners.remove(listener)


# --------------------------------------------------------------------------- the progress file


class _ProgressFile:
    """Keeps the current phase in a JSON file (atomically replaced; throttled within a phase)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.written = 0.0

    def __call__(self, event: str, current: Phase) -> None:
        now = time.monotonic()
        if event == "update" and now - self.written < WRITE_EVERY_S:
            return
        self.written = now
        state = {**current.to_dict(), "pid": os.getpid(), "at": time.time()}
        with contextlib.suppress(OSError):  # progress must never fail a cell
            self.path.parent.mkdir(parents=True, exist_ok=True)
            partial = self.path.with_name(f".{self.path.name}.{os.getpid()}")
            partial.write_text(json.dumps(state), encoding="utf-8")
            partial.replace(self.path)


@contextlib.contextmanager
def progress_file(path: Path) -> Iterator[Path]:
    """Within the block, the current phase is kept in ``path`` (removed at the end)."""
    writer = _ProgressFile(Path(path))
    try:
        with listening(writer):
            yield writer.path
    finally:
        with contextlib.suppress(OSError):
            writer.path.unlink()


def read_progress(path: Path) -> dict[str, Any] | None:
    """What :func:`progress_file` keeps in ``path``, or None (no file yet, or a partial read)."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


# --------------------------------------------------------------------------- training and evaluation


def training_callback() -> Any:
    """A TRL/transformers ``TrainerCallback`` announcing the phase ``train`` (optimizer steps)."""
    from transformers import TrainerCallback

    class _TrainProgress(TrainerCallback):
        current: Phase | None = None

        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.current = start("train", state.max_steps or None, "steps")
            if state.global_step:  # resumed from a checkpoint
                self.current.update(state.global_step)

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if self.current is not None:
                self.current.update(state.global_step)

        def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if self.current is not None:
                self.current.end()

    return _TrainProgress()


_rows_seen: dict[int, int] = {}  # id(task) → completions its last evaluation generated


@contextlib.contextmanager
def evaluation(name: str, model: Any, task: Any, limit: int = 0) -> Iterator[Phase]:
    """The phase ``name`` over an evaluation of ``model`` on ``task``: counts the sequences passed
    to ``model.generate`` within the block.

    The total is the number of eval samples (the first ``limit``), or the count the previous
    evaluation of the same task generated (multi-turn episodes and sampled completions generate
    more than one sequence per sample); past the total it becomes unknown.
    """
    expected = _rows_seen.get(id(task))
    if expected is None:
        with contextlib.suppress(Exception):
            samples = len(task.eval_samples())
            expected = min(samples, limit) if limit else samples
    current = start(name, expected or None, "completions")
    original = model.__dict__.get("generate")

    def generate(*args: Any, **kwargs: Any) -> Any:
        ids = kwargs.get("input_ids", args[0] if args else None)
        out = type(model).generate(model, *args, **kwargs) if original is None else original(*args, **kwargs)
        rows = int(getattr(ids, "shape", [1])[0]) if ids is not None else 1
        done = current.done + rows
        if current.total and done > current.total:
            current.total = None  # more sequences than samples: the total is not known after all
        current.update(done)
        return out

    model.generate = generate
    try:
        yield current
    finally:
        if original is None:
            del model.generate
        else:
            model.generate = original
        _rows_seen[id(task)] = current.done
        current.end()


# --------------------------------------------------------------------------- mrbench run's display


class _Lines:
    """Plain lines, no control codes: a phase's start, each quarter with the ETA, its end."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.quarter: dict[int, int] = {}

    def __call__(self, event: str, current: Phase) -> None:
        key = id(current)
        if event == "start":
            self.quarter[key] = 0
            size = f" ({current.total} {current.unit})" if current.total else ""
            self._say(f"{current.name}: started{size}")
        elif event == "update" and current.total:
            quarter = min(4, current.done * 4 // current.total)
            # A short phase gets its start and end lines only.
            if 0 < quarter < 4 and quarter > self.quarter.get(key, 0) and current.elapsed_s() >= QUIET_S:
                self.quarter[key] = quarter
                self._say(f"{current.describe()} · elapsed {fmt_s(current.elapsed_s())}")
        elif event == "end":
            self.quarter.pop(key, None)
            count = f"{current.done} {current.unit}, " if current.done and current.unit else ""
            self._say(f"{current.name}: done ({count}{fmt_s(current.elapsed_s())})")

    def _say(self, line: str) -> None:
        with contextlib.suppress(Exception):
            self.out.write(line + "\n")
            self.out.flush()


class _Bars:
    """A rich progress bar per phase (the finished ones stay, with their time)."""

    def __init__(self, out: TextIO) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            SpinnerColumn,
            TextColumn,
            TimeElapsedColumn,
        )

        self.progress = Progress(
            SpinnerColumn(finished_text="✓"),
            TextColumn("{task.description:<12}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[unit]}"),
            TimeElapsedColumn(),
            TextColumn("{task.fields[eta]}"),
            console=Console(file=out),
            redirect_stdout=False,  # fds 1 and 2 are captured (mrbench.engine.runs.console)
            redirect_stderr=False,
        )
        self.tasks: dict[int, Any] = {}
        self.progress.start()

    def __call__(self, event: str, current: Phase) -> None:
        key = id(current)
        if event == "start":
            self.tasks[key] = self.progress.add_task(
                current.name, total=current.total, unit=current.unit, eta=""
            )
        task = self.tasks.get(key)
        if task is None:
            return
        eta = current.eta_s()
        fields = {"eta": f"ETA {fmt_s(eta)}" if eta is not None else ""}
        if event == "end":
            self.progress.update(task, total=current.done or 1, completed=current.done or 1, eta="")
            self.progress.stop_task(task)
        else:
            self.progress.update(task, total=current.total, completed=current.done, **fields)

    def close(self) -> None:
        self.progress.stop()


@contextlib.contextmanager
def shown(out: TextIO, *, live: bool | None = None) -> Iterator[None]:
    """Show every phase within the block on ``out``: rich bars when ``live`` (default: ``out`` is a
    terminal), else plain lines."""
    if live is None:
        isatty = getattr(out, "isatty", None)
        live = bool(isatty and isatty())
    display: Any = _Bars(out) if live else _Lines(out)
    try:
        with listening(display):
            yield
    finally:
        if live:
            display.close()
