"""The report's figures: their numbers, aggregated from the selected runs, and the queue of
drawing jobs (:class:`FigureQueue`) that the sections fill and :func:`drawing.render` draws at the end.

- learning curves: per task × model, one panel per reward component plus the total, one mean
  line with a bootstrap band per method (:func:`curve_panels`);
- Pareto: per task, each method's final training reward on two components (:func:`pareto_panels`);
- why methods differ: mean reward-correlation matrices and advantage shares per method
  (:func:`diagnostic_means`, also tabulated by the report).
"""

from __future__ import annotations

import fnmatch
import math
import re
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from mrbench.core import layout
from mrbench.core.errors import UserError
from mrbench.reporting import stats
from mrbench.reporting.context import ReportContext
from mrbench.reporting.drawing import FigureJob, render
from mrbench.reporting.plots import Band, ParetoPoint, ScalingSeries, method_colors
from mrbench.reporting.select import TaskInfo
from mrbench.store.reader import History, RunRecord
from mrbench.tasks import task_class

MAX_CURVE_POINTS = 300
FIGURE_PATTERNS = ("curves-*.png", "pareto-*.png", "corr-*.png", "share-*.png", "scaling-*.png")
MANIFEST = "report-files.txt"
"""Beside ``report.md``: the figures that report wrote, the only files its next run deletes."""
TOTAL_REWARD_PANEL = "total reward (weighted)"


def slug(text: str) -> str:
    """``text`` as a file-name part: runs of other characters than ``[A-Za-z0-9._-]`` become ``_``.

    >>> slug("Qwen/Qwen2.5-0.5B-Instruct")
    'Qwen_Qwen2.5-0.5B-Instruct'
    """
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_")


def remove_old_figures(out: Path) -> None:
    """Delete the figures an earlier report wrote into ``out`` (this one may not redraw them all):
    those its manifest (:data:`MANIFEST`) lists, and nothing else. A listed name is deleted only
    if it is a plain file name of one of the report's figure kinds (:data:`FIGURE_PATTERNS`), so a
    manifest never deletes a file elsewhere, or one the report did not write."""
    for name in _listed(out / MANIFEST):
        old = out / name
        if old.is_file() and not old.is_symlink():
            old.unlink()


def write_manifest(out: Path, figures: list[Path]) -> Path:
    """Write ``out/<MANIFEST>``: the names of the figures this report wrote, one per line."""
    path = out / MANIFEST
    path.write_text("".join(f"{p.name}\n" for p in sorted(figures)), encoding="utf-8")
    return path


def _listed(manifest: Path) -> list[str]:
    """The figure names ``manifest`` lists (none when it is missing or unreadable)."""
    try:
        lines = manifest.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return []
    return [
        name
        for name in (line.strip() for line in lines)
        if name
        and "/" not in name
        and "\\" not in name
        and name == Path(name).name
        and any(fnmatch.fnmatchcase(name, pattern) for pattern in FIGURE_PATTERNS)
    ]


def band(histories: list[History | None]) -> Band | None:
    """Mean curve across seeds with a bootstrap band, on the union of logged steps (None without any)."""
    present = [h for h in histories if h is not None and len(h[0])]
    if not present:
        return None
    steps, matrix = stats.align_curves(present, MAX_CURVE_POINTS)
    mean, low, high = stats.curve_band(matrix)
    return Band(steps, mean, low, high, n_runs=len(present))


def curve_panels(
    ctx: ReportContext, methods: dict[str, list[RunRecord]], names: list[str], info: TaskInfo
) -> dict[str, dict[str, Band]]:
    """Panel title (reward component, then the total) → method → :class:`Band` of one task × model;
    panels and methods without any logged curve are left out."""
    panels: dict[str, dict[str, Band]] = {}
    for comp in [*info.components, None]:
        key = layout.REWARD if comp is None else layout.reward_mean(comp)
        title = TOTAL_REWARD_PANEL if comp is None else comp
        per_method = {}
        for name in names:
            curve = band([ctx.history(r, key) for r in methods[name]])
            if curve is not None:
                per_method[name] = curve
        if per_method:
            panels[title] = per_method
    return panels


def pareto_axes(task: str, components: list[str]) -> tuple[str, str] | None:
    """The two components a task's Pareto plot compares: those the task declares (its class
    attribute ``pareto_axes``) when its runs have both, else its first two (None when it has fewer)."""
    x_c, y_c = declared_pareto_axes(task) or (None, None)
    if x_c in components and y_c in components:
        return x_c, y_c
    if len(components) < 2:
        return None
    return components[0], components[1]


def declared_pareto_axes(task: str) -> tuple[str, str] | None:
    """The Pareto axes task ``task`` declares, read from its class without building it
    (:func:`mrbench.tasks.task_class`); None when it declares none, or is not installed here (a
    plugin task of runs read from a store) or cannot be loaded."""
    try:
        return task_class(task).pareto_axes
    except (UserError, ImportError):  # unknown here, or a plugin that cannot be loaded
        return None


def pareto_panels(ctx: ReportContext, task: str, x_c: str, y_c: str) -> dict[str, dict[str, ParetoPoint]]:
    """Model → method → final training reward on components ``x_c`` and ``y_c``: per seed the mean of
    the last 10 % of logged steps, then the mean over seeds with its CI."""
    panels: dict[str, dict[str, ParetoPoint]] = {}
    for model in ctx.models_for(task):
        per_method = {}
        for name, runs in ctx.sel.cells[(task, model)].items():
            pts = [
                (
                    stats.tail_mean(ctx.curve(r, layout.reward_mean(x_c))),
                    stats.tail_mean(ctx.curve(r, layout.reward_mean(y_c))),
                )
                for r in runs
            ]
            pts = [p for p in pts if math.isfinite(p[0]) and math.isfinite(p[1])]
            if not pts:
                continue
            cx = ctx.ci([p[0] for p in pts])
            cy = ctx.ci([p[1] for p in pts])
            per_method[name] = ParetoPoint((cx.point, cx.low, cx.high), (cy.point, cy.low, cy.high), pts)
        if per_method:
            panels[model] = {m: per_method[m] for m in ctx.methods if m in per_method}
    return panels


def _floats(values: list[Any]) -> np.ndarray:
    """JSON numbers (None for undefined) as a float array with NaN for None."""
    return np.array([math.nan if v is None else v for v in values], dtype=float)


def diagnostic_means(ctx: ReportContext, task: str) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """``(matrices, shares)`` of one task over all its models: per method the mean within-group
    reward correlation ``[K, K]`` and the mean advantage share ``[K]`` of its runs, in the task's
    component order. A run's ``diagnostics.json`` counts only when its components are in that order;
    without a logged share the run's last ``adv/share/<component>`` metrics stand in."""
    comps = ctx.task_info[task].components
    matrices: dict[str, np.ndarray] = {}
    shares: dict[str, np.ndarray] = {}
    for name in ctx.methods:
        runs = [r for m in ctx.models_for(task) for r in ctx.sel.cells[(task, m)].get(name, [])]
        mats, shs = [], []
        for run in runs:
            diag = ctx.diagnostics.get(run.run_id)
            same_order = diag is not None and (diag.components or comps) == comps
            if diag is not None and diag.corr_matrix is not None and same_order:
                mats.append(np.array([_floats(row) for row in diag.corr_matrix], dtype=float))
            share = diag.share if diag is not None and same_order else None
            if share is None:
                share = [run.metrics.get(layout.adv_share(c)) for c in comps]
            shs.append(_floats(share))
        with np.errstate(invalid="ignore"), warnings.catch_warnings():
            # Components never defined in any run (NaN everywhere) legitimately stay NaN.
            warnings.simplefilter("ignore", RuntimeWarning)
            if mats:
                matrices[name] = np.nanmean(np.stack(mats), axis=0)
            if shs and not np.all(np.isnan(np.stack(shs))):
                shares[name] = np.nanmean(np.stack(shs), axis=0)
    return matrices, shares


class FigureQueue:
    """Figures queued while the report is written, drawn together by :meth:`draw` (in parallel).

    Every figure gives each method the same colour (in the report's method order).
    """

    def __init__(self, out: Path, methods: list[str], workers: int | None = None) -> None:
        self.out, self.workers = out, workers
        self.colors = method_colors(methods)
        self.jobs: list[FigureJob] = []
        # task → (path, panels, title) of its learning-curve figures: drawn as one series per task.
        self.curve_items: dict[str, list[tuple[Path, dict[str, Any], str]]] = {}

    def curves(self, task: str, model: str, panels: dict[str, dict[str, Band]]) -> Path:
        """Queue the learning curves of one task × model; return the PNG's path."""
        path = self.out / f"curves-{slug(task)}-{slug(model)}.png"
        title = f"{task} · {model}: training reward per component (mean ± 95 % CI over seeds)"
        # Drawn in one series per task on a reused figure (see plots.learning_curves_series).
        self.curve_items.setdefault(task, []).append((path, panels, title))
        return path

    def pareto(self, task: str, panels: dict[str, dict[str, ParetoPoint]], x_c: str, y_c: str) -> Path:
        """Queue a task's Pareto plot of components ``x_c`` vs ``y_c``; return the PNG's path."""
        path = self.out / f"pareto-{slug(task)}.png"
        self._queue(
            "pareto_plot",
            path,
            panels,
            x_label=x_c,
            y_label=y_c,
            title=f"{task}: {x_c} vs {y_c}",
            colors=self.colors,
        )
        return path

    def correlations(self, task: str, matrices: dict[str, np.ndarray], components: list[str]) -> Path:
        """Queue a task's reward-correlation heatmaps (one per method); return the PNG's path."""
        path = self.out / f"corr-{slug(task)}.png"
        title = f"{task}: within-group reward correlation (mean over training and runs)"
        self._queue("correlation_heatmaps", path, matrices, components, title=title)
        return path

    def shares(self, task: str, shares: dict[str, np.ndarray], components: list[str]) -> Path:
        """Queue a task's advantage-share bars; return the PNG's path."""
        path = self.out / f"share-{slug(task)}.png"
        title = f"{task}: share of the advantage per component"
        self._queue("advantage_share_bars", path, shares, components, title=title, colors=self.colors)
        return path

    def scaling(
        self, task: str, series: dict[str, ScalingSeries], metric: str, ticks: dict[float, str]
    ) -> Path:
        """Queue a task's model-size scaling figure (``ticks``: parameter count → axis label);
        return the PNG's path."""
        path = self.out / f"scaling-{slug(task)}.png"
        title = f"{task}: {metric} vs model size (mean, 95 % CI)"
        self._queue("scaling_plot", path, series, metric=metric, title=title, colors=self.colors, ticks=ticks)
        return path

    def _queue(self, kind: str, path: Path, *args: Any, **kwargs: Any) -> None:
        self.jobs.append(FigureJob(kind, path, args, kwargs))

    def draw(self) -> list[Path]:
        """Draw every queued figure; return the PNG paths (learning curves first)."""
        series = [
            FigureJob("learning_curves_series", None, (items,), {"colors": self.colors})
            for items in self.curve_items.values()
        ]
        return render(series + self.jobs, self.workers)
