"""One sweep cell: what it runs (:class:`Cell`), where it logs (:class:`CellContext`), how it ended
(:class:`CellOutcome`), and the ``"module:attr"`` paths by which worker processes import callables
(what a worker is handed and answers: :mod:`mrbench.core.cell_protocol`).

Every other module of :mod:`mrbench.sweeps` imports this one, and it imports none of them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mrbench.core import layout
from mrbench.core.cell_protocol import CellSpec
from mrbench.core.errors import UserError
from mrbench.core.records import CellEntry

CellFn = Callable[..., Any]
"""Runs one cell: ``cell_fn(spec, *, tracking_uri, experiment, parent_run_id, sweep, progress)``."""
ResolveFn = Callable[..., Any]
"""Resolves one cell: ``resolve(method, task, model, seed, *, method_params, task_params, train)``."""

SKIPPED = "SKIPPED"
"""The status of a cell this invocation did not run: another live invocation holds it, or finished it."""

DEFAULT_RESOLVE_FN = "mrbench.engine.config:resolve_spec"


@dataclass(frozen=True)
class Cell:
    """One grid cell: a resolved run spec and its run key."""

    spec: CellSpec  # mrbench.engine.config.RunSpec, or a test's stand-in with the same face
    key: str = ""

    def __post_init__(self) -> None:
        if not self.key:
            object.__setattr__(self, "key", self.spec.run_key())

    @property
    def label(self) -> str:
        """``method|task|model|sSEED``."""
        return layout.cell_label(self.spec.method, self.spec.task, self.spec.model, self.spec.seed)

    def entry(self) -> CellEntry:
        """The grid entry recorded in the parent run's ``sweep.json``."""
        spec = self.spec
        return CellEntry(self.key, spec.method, spec.task, spec.model, spec.seed)


ClaimFn = Callable[[Cell], str | None]
"""Claims a cell just before it runs: None when it is this invocation's to run, else who holds it
(see :class:`mrbench.sweeps.claims.CellClaims`)."""


@dataclass
class CellOutcome:
    """How one cell ended, or why it did not run."""

    cell: Cell
    status: str  # FINISHED | FAILED | KILLED, or SKIPPED (error: who holds it)
    run_id: str | None = None
    wall_s: float = 0.0
    error: str | None = None


@dataclass(frozen=True)
class CellContext:
    """Where every cell of one invocation logs, and how it claims them."""

    tracking_uri: str
    experiment: str
    parent_run_id: str | None
    sweep: str
    cell_fn: CellFn
    log_dir: Path
    claim: ClaimFn | None = None
    """None: every cell runs unclaimed (one invocation alone, as in tests of an executor)."""
    processes_per_cell: int = 1
    """Processes training each cell (> 1: started by ``accelerate launch`` from a worker)."""
    distributed: str = "ddp"
    """The ``accelerate`` preset of a multi-process cell (:mod:`mrbench.engine.processes.distributed`)."""

    def held(self, cell: Cell) -> CellOutcome | None:
        """Claim ``cell`` (executors call this just before starting it): None when it may run,
        else its SKIPPED outcome, naming who holds it."""
        holder = self.claim(cell) if self.claim is not None else None
        return None if holder is None else CellOutcome(cell, SKIPPED, error=holder)


def error_text(exc: BaseException) -> str:
    """``"Type: message"``, cut to under 500 characters (it is printed and kept per cell)."""
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) < 500 else text[:497] + "..."


def callable_path(fn: Callable[..., Any]) -> str:
    """The ``"module:attr"`` path of a module-level function (worker processes import it by path)."""
    module, qualname = getattr(fn, "__module__", None), getattr(fn, "__qualname__", "")
    if not module or module == "__main__" or "<locals>" in qualname:
        raise UserError(
            f"cell function {fn!r} must be a module-level function (worker processes import it by path)"
        )
    return f"{module}:{qualname}"
