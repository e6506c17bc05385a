"""The within-group reward correlations of a sweep's runs, printed as the ``paper-*`` presets write them.

A maintenance script (outside the package: it writes source code for a maintainer to paste).

The ``paper-*`` scenarios of :mod:`mrbench.lab.presets` take their correlations from real mrbench
runs: every cell logs ``diagnostics.json`` (:data:`mrbench.core.layout.DIAGNOSTICS_ARTIFACT`) whose
``corr_matrix`` ``[K, K]`` is the within-group Pearson correlation of the reward components, mean
over training (None where never defined). This module reads them from the MLflow store the way the
report does (:func:`mrbench.reporting.context.load_context`: the latest FINISHED run per run key,
so failed attempts and duplicates are handled as the report handles them) and averages them per
task in two stages:

1. per method, the mean over its runs (all models and seeds) — the panel the report's heatmap
   ``corr-<task>.png`` draws (:func:`mrbench.reporting.figures.diagnostic_means`; like the report,
   it skips a run whose ``components`` are not in the task's order);
2. the mean over methods, so every method counts equally whatever its number of runs.

Undefined cells: a pair involving a component that was constant in every group of a run is None in
that run's matrix. Both means leave such a cell out (NaN-aware means): a method's mean is over its
runs where the cell was defined, the task's over the methods where it was, and a cell stays NaN only
when it was never defined in any selected run.
The presets' matrices leave out the components they model themselves (code-generation's
``efficiency``, which almost never varies within a group in the smoke runs: see
:func:`mrbench.lab.presets.paper_code`); a NaN left inside a printed matrix is written ``math.nan``
and flagged, since a scenario needs a number there.

A mean of correlation matrices is positive semi-definite, but components that are exact copies in
the runs (syntax and compile) put it on the edge (smallest eigenvalue 0), where rounding for print
makes it indefinite and the scenario refuses it. A matrix whose smallest eigenvalue is below
:data:`mrbench.lab.correlation.EIGEN_FLOOR` is therefore replaced by the nearest correlation matrix
with eigenvalues at least that floor (:func:`mrbench.lab.correlation.nearest_correlation`; a comment
says so and by how much it changed), and each matrix is printed with the fewest decimals (at least
two) at which it stays positive semi-definite.

Print the matrices of the smoke sweep, ready to paste into :mod:`mrbench.lab.presets`::

    python scripts/smoke_corr.py [--sweep smoke] [--tracking-uri URI]

It loads what the report loads (the reward curves too: one query on a sqlite store).
"""

from __future__ import annotations

import argparse
import math
import shlex
import sys
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from mrbench.core.errors import UserError
from mrbench.core.records import Diagnostics
from mrbench.lab.correlation import EIGEN_FLOOR, nearest_correlation, printable_decimals
from mrbench.reporting.context import ReportContext, load_context
from mrbench.reporting.figures import diagnostic_means
from mrbench.store.reader import open_reader
from mrbench.store.uri import missing_sqlite_store, sqlite_path

DEFAULT_SWEEP = "smoke"
PRESET_MATRICES: dict[str, tuple[str, tuple[str, ...]]] = {
    "code-generation": (
        "CODE_CORR_6",
        ("format", "syntax", "compile", "runtime", "accuracy", "ast_similarity"),
    ),
    "tool-calling": ("TOOLS_CORR", ("format", "function_name", "parameter", "values")),
    "agent-security": ("SECURITY_CORR", ("utility", "safety")),
}
"""Task → (the preset's constant, the components of its rows and columns, in that order)."""
LINE_LENGTH = 110  # the project's line length: a matrix that fits is printed on one line, as ruff would


@dataclass(frozen=True)
class TaskCorrelation:
    """One task's mean within-group reward correlation over a sweep's selected runs."""

    components: list[str]  # the task's reward components (the report's order)
    methods: list[str]  # the method labels averaged: those with at least one logged corr_matrix
    runs: int  # selected runs of the task that logged a corr_matrix
    matrix: np.ndarray  # [K, K] mean over methods of each method's mean over its runs; NaN: never defined

    def sub_matrix(self, names: Sequence[str]) -> np.ndarray:
        """The ``[len(names), len(names)]`` block of ``names``, in the order of ``names``."""
        index = [self.components.index(n) for n in names]
        return self.matrix[np.ix_(index, index)]

    def never_defined(self, name: str) -> bool:
        """True when no selected run had ``name`` vary together with another component in a group."""
        i = self.components.index(name)
        off = np.delete(self.matrix[i], i)
        return bool(np.all(np.isnan(off)))


def _has_corr(diagnostics: Diagnostics | None) -> bool:
    return diagnostics is not None and diagnostics.corr_matrix is not None


def sweep_correlations(ctx: ReportContext) -> dict[str, TaskCorrelation]:
    """Task → its :class:`TaskCorrelation`, for the tasks of ``ctx`` whose runs logged a corr_matrix."""
    out = {}
    for task in ctx.tasks:
        per_method, _ = diagnostic_means(ctx, task)
        if not per_method:
            continue
        runs = [
            r for (t, _), methods in ctx.sel.cells.items() if t == task for rs in methods.values() for r in rs
        ]
        logged = sum(_has_corr(ctx.diagnostics.get(r.run_id)) for r in runs)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # a cell NaN for every method stays NaN
            matrix = np.nanmean(np.stack(list(per_method.values())), axis=0)
        out[task] = TaskCorrelation(list(ctx.task_info[task].components), list(per_method), logged, matrix)
    return out


def read_correlations(sweep: str, tracking_uri: str | None = None) -> dict[str, TaskCorrelation]:
    """:func:`sweep_correlations` of sweep ``sweep`` in the store ``tracking_uri`` (default
    :func:`mrbench.store.local.resolve_tracking_uri`). Reads only: a missing store, an unreachable
    server or an unknown sweep is a :class:`UserError`."""
    from mrbench.store.client import check_tracking_reachable
    from mrbench.store.local import resolve_tracking_uri

    uri = resolve_tracking_uri(tracking_uri)
    if missing_sqlite_store(uri):
        raise UserError(f"no tracking store at {uri!r}: pass --tracking-uri with the sweep's store")
    if sqlite_path(uri) is None:
        check_tracking_reachable(uri)
    reader = open_reader(uri)
    try:
        experiment_id = reader.experiment_id(sweep)
        if experiment_id is None:
            raise UserError(
                f"no sweep named {sweep!r} in the tracking store {uri!r} (no such MLflow experiment)"
            )
        command = shlex.join(["python", "scripts/smoke_corr.py", "--sweep", sweep, "--tracking-uri", uri])
        ctx = load_context(sweep, reader, reader.runs(experiment_id), command=command, store_note=uri)
    finally:
        reader.close()
    return sweep_correlations(ctx)


def _number(value: float, decimals: int = 2) -> str:
    # ``+ 0.0`` turns a rounded −0.00 into 0.00.
    return "math.nan" if math.isnan(value) else f"{round(float(value), decimals) + 0.0:.{decimals}f}"


def python_matrix(name: str, matrix: np.ndarray, decimals: int = 2) -> str:
    """``NAME = ((…), …)`` with ``decimals`` decimals: on one line when it fits, else one row per line."""
    rows = [
        f"({', '.join(_number(v, decimals) for v in row)}{',' if len(row) == 1 else ''})" for row in matrix
    ]
    one_line = f"{name} = ({', '.join(rows)}{',' if len(rows) == 1 else ''})"
    if len(one_line) <= LINE_LENGTH:
        return one_line
    return "\n".join([f"{name} = (", *(f"    {row}," for row in rows), ")"])


def task_source(task: str, found: TaskCorrelation) -> list[str]:
    """Comment and assignment lines of one task: the preset's constant and components for the
    ``paper-*`` tasks (:data:`PRESET_MATRICES`), ``<TASK>_CORR`` over every component otherwise."""
    name, names = PRESET_MATRICES.get(
        task, (task.upper().replace("-", "_") + "_CORR", tuple(found.components))
    )
    head = f"# {task}: mean over {', '.join(found.methods)} ({found.runs} runs)"
    missing = [n for n in names if n not in found.components]
    if missing:
        return [f"{head}; the runs lack {', '.join(missing)}: no {name}"]
    lines = [head, f"# rows and columns: {', '.join(names)}"]
    for left in (c for c in found.components if c not in names):
        if found.never_defined(left):
            lines.append(f"# left out: {left} (never defined: constant in every group)")
        else:
            row = found.matrix[found.components.index(left), [found.components.index(n) for n in names]]
            lines.append(f"# left out: {left}, its row over them: ({', '.join(map(_number, row))})")
    matrix = found.sub_matrix(names)
    if np.isnan(matrix).any():
        lines.append(
            "# math.nan: never defined in any run (a component constant in every group); choose a value"
        )
        return [*lines, python_matrix(name, matrix)]
    smallest = float(np.linalg.eigvalsh(matrix).min())
    if smallest < EIGEN_FLOOR:
        nearest = nearest_correlation(matrix)
        lines += [
            f"# the mean's smallest eigenvalue is {smallest:.2g}: projected to the nearest correlation",
            f"# matrix with eigenvalues >= {EIGEN_FLOOR:g} (Higham's alternating projections; largest "
            f"change {np.abs(nearest - matrix).max():.2g})",
        ]
        matrix = nearest
    decimals = printable_decimals(matrix)
    lines.append(f"# {decimals} decimals: the fewest that keep the printed matrix positive semi-definite")
    return [*lines, python_matrix(name, matrix, decimals)]


def main(argv: list[str] | None = None) -> int:
    """Print each task's mean correlation matrix as Python; exit code 2 on a :class:`UserError`."""
    parser = argparse.ArgumentParser(
        prog="python scripts/smoke_corr.py",
        description="Mean within-group reward correlations of a sweep's runs, as the lab presets write them.",
    )
    parser.add_argument(
        "--sweep", default=DEFAULT_SWEEP, help="sweep name (the MLflow experiment); default smoke"
    )
    parser.add_argument(
        "--tracking-uri", default=None, help="MLflow store (default sqlite:///results/mlflow.db)"
    )
    args = parser.parse_args(argv)
    try:
        found = read_correlations(args.sweep, args.tracking_uri)
        if not found:
            raise UserError(
                f"sweep {args.sweep!r} has no FINISHED cell run with a corr_matrix in its diagnostics"
            )
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(
        f"# Within-group reward correlations of sweep {args.sweep!r}: per method the mean of its runs'\n"
        "# corr_matrix (mean over training), then the mean over methods (python scripts/smoke_corr.py)."
    )
    for task, correlation in found.items():
        print()
        print("\n".join(task_source(task, correlation)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
