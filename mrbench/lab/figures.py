"""The lab's figures (matplotlib's Agg canvas, no pyplot state): learning curves with CI bands and
Pareto trajectories. Each function writes one PNG and returns its path.

Curves are normalised (0 = the worst response of each prompt, 1 = the best; see
:mod:`mrbench.lab.metrics`) so that components of different scales share an axis.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from mrbench.reporting.stats import curve_band

DPI = 80
MAX_POINTS = 60
"""Steps drawn per curve (evenly spaced, first and last kept): bands cost O(points · reps)."""
BAND_REPS = 500


LEGEND_COLS = 4


def _figure(n: int, cols: int, panel: tuple[float, float], n_methods: int) -> tuple[Any, list[Any]]:
    """A grid of ``n`` panels of ``panel`` inches with room below for a legend of ``n_methods``."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    cols = min(cols, n)
    rows = math.ceil(n / cols)
    legend_in = 0.55 + 0.2 * math.ceil(n_methods / LEGEND_COLS)
    width = max(cols * panel[0] + 0.7, 5.5)  # wide enough for the legend under one panel
    height = rows * panel[1] + 0.6 + legend_in + 0.35 * (rows - 1)
    fig = Figure(figsize=(width, height), dpi=DPI)
    FigureCanvasAgg(fig)
    axes = list(fig.subplots(rows, cols, squeeze=False).flat)
    for ax in axes[n:]:
        ax.set_visible(False)
    side = (width - cols * panel[0] - 0.3 * (cols - 1)) / 2
    fig.subplots_adjust(
        left=max(side, 0.6) / width,
        right=1 - max(side - 0.3, 0.15) / width,
        top=1 - 0.6 / height,
        bottom=legend_in / height,
        wspace=0.3,
        hspace=0.5,
    )
    return fig, axes[:n]


def _colors(methods: Sequence[str]) -> dict[str, Any]:
    from matplotlib import colormaps

    cmap = colormaps["tab10" if len(methods) <= 10 else "tab20"]
    return {m: cmap(i % cmap.N) for i, m in enumerate(methods)}


def _finish(
    fig: Any, axes: list[Any], methods: Sequence[str], colors: Mapping[str, Any], title: str, path: Path
) -> Path:
    from matplotlib.lines import Line2D

    for ax in axes:
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3, lw=0.5)
    handles = [Line2D([], [], color=colors[m], lw=2) for m in methods]
    fig.legend(
        handles,
        list(methods),
        loc="lower center",
        ncol=min(LEGEND_COLS, len(methods)),
        fontsize=7,
        frameon=False,
    )
    fig.suptitle(title, fontsize=10)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI, metadata={"Software": None})
    return path


def thin(n_steps: int) -> np.ndarray:
    """Indices ``[≤ MAX_POINTS]`` of the steps drawn out of ``n_steps``: evenly spaced, first and last
    kept (MLflow gets the per-step series at the same steps, :mod:`mrbench.lab.tracking`)."""
    return np.unique(np.linspace(0, n_steps - 1, min(n_steps, MAX_POINTS)).astype(int))


def learning_curves(
    path: Path,
    curves: Mapping[str, Mapping[str, np.ndarray]],
    *,
    title: str,
) -> Path:
    """One panel per series (components, then the objective), one line per method: the mean over
    seeds with its pointwise 95 % bootstrap band. ``curves``: panel → method → ``[S, T+1]``."""
    panels = list(curves)
    methods = list(next(iter(curves.values()))) if panels else []
    colors = _colors(methods)
    fig, axes = _figure(len(panels), 4, (3.0, 2.2), len(methods))
    for ax, panel in zip(axes, panels, strict=True):
        for method, values in curves[panel].items():
            idx = thin(values.shape[1])
            mean, low, high = curve_band(values[:, idx], reps=BAND_REPS)
            ax.plot(idx, mean, color=colors[method], lw=1.2)
            ax.fill_between(idx, low, high, color=colors[method], alpha=0.2, lw=0)
        ax.set_title(panel, fontsize=9)
        ax.set_xlabel("step", fontsize=8)
        ax.set_ylabel("normalised E[reward]", fontsize=8)
    return _finish(fig, axes, methods, colors, title, path)


def pareto_trajectories(
    path: Path,
    pairs: Sequence[tuple[str, str]],
    trajectories: Mapping[str, Mapping[str, np.ndarray]],
    *,
    title: str,
) -> Path:
    """One panel per axis pair ``(x, y)``: each method's mean trajectory over training (faint
    start, dot at the end) and the final per-seed positions. ``trajectories``: method → axis
    name → ``[S, T+1]`` normalised values."""
    methods = list(trajectories)
    colors = _colors(methods)
    fig, axes = _figure(len(pairs), 4, (2.8, 2.6), len(methods))
    for ax, (x_name, y_name) in zip(axes, pairs, strict=True):
        for method, axes_values in trajectories.items():
            x, y = axes_values[x_name], axes_values[y_name]
            idx = thin(x.shape[1])
            with np.errstate(all="ignore"):
                mx, my = np.nanmean(x[:, idx], axis=0), np.nanmean(y[:, idx], axis=0)
            ax.scatter(x[:, -1], y[:, -1], s=4, color=colors[method], alpha=0.25, lw=0)
            ax.plot(mx, my, color=colors[method], lw=1.0, alpha=0.8)
            ax.plot(mx[-1:], my[-1:], "o", color=colors[method], ms=5)
        ax.set_xlabel(x_name, fontsize=8)
        ax.set_ylabel(y_name, fontsize=8)
    return _finish(fig, axes, methods, colors, title, path)
