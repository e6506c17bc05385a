"""Drawing many report figures fast: each figure is a :class:`FigureJob` (a function of
:mod:`mrbench.reporting.plots` and its arguments), and :func:`render` draws a list of them, split
by cost over worker processes when there are idle cores.

Workers are plain subprocesses (``python -m mrbench.reporting.drawing JOBS``) that unpickle
their jobs; the PNGs do not depend on how many there are.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mrbench.kit.children import child_env, module_command
from mrbench.reporting import plots

FIGURES = {
    "learning_curves": plots.learning_curves,
    "learning_curves_series": plots.learning_curves_series,
    "pareto_plot": plots.pareto_plot,
    "correlation_heatmaps": plots.correlation_heatmaps,
    "advantage_share_bars": plots.advantage_share_bars,
    "scaling_plot": plots.scaling_plot,
}
"""The figure kinds a :class:`FigureJob` can name (functions of :mod:`mrbench.reporting.plots`)."""


@dataclass
class FigureJob:
    """Figures to draw: a function name in :data:`FIGURES`, its output path (or, for
    ``learning_curves_series``, None: the paths are in its items) and its arguments."""

    kind: str
    path: Path | None
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)

    @property
    def paths(self) -> list[Path]:
        """The PNG files this job writes."""
        if self.path is None:
            return [Path(item[0]) for item in self.args[0]]
        return [Path(self.path)]


def _draw(job: FigureJob) -> list[Path]:
    if job.path is None:
        return list(FIGURES[job.kind](*job.args, **job.kwargs))
    return [FIGURES[job.kind](job.path, *job.args, **job.kwargs)]


def _cost(job: FigureJob) -> int:
    """Rough drawing cost: the number of panels (what dominates matplotlib's time)."""
    first = job.args[0] if job.args else None
    if job.path is None and isinstance(first, Sequence):
        return sum(len(item[1]) for item in first) // 2  # figure reuse halves the cost
    return len(first) if isinstance(first, Mapping) else 1


def default_workers() -> int:
    """Idle cores (cores minus the 1-minute load average), between 1 and 4: extra drawing
    processes only pay off when there are cores with nothing else to do."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count() or 1
    try:
        idle = cores - os.getloadavg()[0]
    except OSError:  # not available on this platform
        idle = cores
    return max(1, min(4, round(idle)))


def render(jobs: Sequence[FigureJob], workers: int | None = None) -> list[Path]:
    """Draw every job and return the paths, in job order.

    With ``workers`` > 1 (default: :func:`default_workers`) and enough figures for it to pay
    off, the jobs are split by cost over worker processes (``python -m mrbench.reporting.drawing JOBS``):
    plain subprocesses rather than multiprocessing, which would re-import the caller's
    ``__main__`` or fork a process holding database handles. Output does not depend on ``workers``.
    """
    if workers is None:
        workers = default_workers()
    workers = min(workers, len(jobs))
    if workers <= 1 or sum(len(j.paths) for j in jobs) < 6:
        return [p for job in jobs for p in _draw(job)]
    import pickle
    import subprocess
    import tempfile

    chunks: list[list[FigureJob]] = [[] for _ in range(workers)]
    loads = [0] * workers
    for job in sorted(jobs, key=_cost, reverse=True):  # greedy: biggest figure to the idlest worker
        i = loads.index(min(loads))
        chunks[i].append(job)
        loads[i] += _cost(job)
    with tempfile.TemporaryDirectory(prefix="mrbench-plots-") as tmp:
        procs = []
        for i, chunk in enumerate(chunks):
            path = Path(tmp) / f"jobs-{i}.pkl"
            path.write_bytes(pickle.dumps(chunk))
            procs.append(
                subprocess.Popen(
                    module_command("mrbench.reporting.drawing", str(path)),
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                    env=child_env(),
                )
            )
        errors = [p.communicate()[1].decode(errors="replace") for p in procs]
        failed = [e for p, e in zip(procs, errors, strict=True) if p.returncode != 0]
        if failed:
            raise RuntimeError(f"figure worker failed:\n{failed[0][-2000:]}")
    return [p for job in jobs for p in job.paths]


def _main(argv: list[str]) -> int:
    import pickle

    jobs = pickle.loads(Path(argv[0]).read_bytes())
    for job in jobs:
        _draw(job)
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(_main(sys.argv[1:]))
