"""Report figures, drawn with matplotlib's Agg canvas (no display, no pyplot global state).

Every figure function takes already-aggregated numbers (the report computes them from MLflow),
writes one PNG and returns its path. Methods keep the same colour in every figure of a report:
pass the same ``colors`` (from :func:`method_colors`) everywhere.

Speed matters (a report over 300 cells draws ~40 figures): layouts are computed in inches
rather than with ``tight_layout`` (which draws every figure twice), tick counts are capped, and
:func:`mrbench.reporting.drawing.render` draws independent figures in parallel worker processes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

DPI = 80
# No "Software: matplotlib x.y" entry: regenerated figures stay byte-identical across upgrades
# that do not change the drawing.
_PNG_METADATA: dict[str, Any] = {"Software": None}


@dataclass(frozen=True)
class Band:
    """A mean curve with a CI band: ``steps``, ``mean``, ``low``, ``high`` are each ``[S]``."""

    steps: np.ndarray
    mean: np.ndarray
    low: np.ndarray
    high: np.ndarray
    n_runs: int = 1


@dataclass(frozen=True)
class ParetoPoint:
    """One method's position: (mean, low, high) on each axis plus the per-seed points."""

    x: tuple[float, float, float]
    y: tuple[float, float, float]
    seeds: Sequence[tuple[float, float]] = field(default_factory=tuple)


def method_colors(methods: Sequence[str]) -> dict[str, tuple[float, float, float, float]]:
    """A fixed RGBA colour per method, in the given order (tab10, then tab20 beyond 10 methods)."""
    from matplotlib import colormaps

    cmap = colormaps["tab10" if len(methods) <= 10 else "tab20"]
    return {m: tuple(float(c) for c in cmap(i % cmap.N)) for i, m in enumerate(methods)}


def _panels(
    n: int,
    *,
    max_cols: int,
    panel: tuple[float, float],
    left: float = 0.55,
    right: float = 0.15,
    top: float = 0.55,
    bottom: float = 0.45,
    gap: tuple[float, float] = (0.55, 0.6),
) -> tuple[Any, list[Any]]:
    """A figure with ``n`` panels of ``panel`` inches on a grid; margins and gaps in inches."""
    # Imported here: matplotlib costs ~0.3 s to import and most commands never plot.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    cols = min(max_cols, max(1, n))
    rows = math.ceil(n / cols)
    width = left + right + cols * panel[0] + (cols - 1) * gap[0]
    height = top + bottom + rows * panel[1] + (rows - 1) * gap[1]
    fig = Figure(figsize=(width, height), dpi=DPI)
    FigureCanvasAgg(fig)
    fig.subplots_adjust(
        left=left / width,
        right=1 - right / width,
        top=1 - top / height,
        bottom=bottom / height,
        wspace=gap[0] / panel[0],
        hspace=gap[1] / panel[1],
    )
    axes = fig.subplots(rows, cols, squeeze=False).flat
    axes = list(axes)
    for ax in axes[n:]:
        ax.set_visible(False)
    return fig, axes[:n]


def _style(ax: Any, title: str, xlabel: str, ylabel: str) -> None:
    from matplotlib.ticker import MaxNLocator

    ax.set_title(title, fontsize=9)
    ax.set_xlabel(xlabel, fontsize=8, labelpad=1)
    ax.set_ylabel(ylabel, fontsize=8, labelpad=1)
    ax.tick_params(labelsize=7, pad=1)
    ax.xaxis.set_major_locator(MaxNLocator(4))
    ax.yaxis.set_major_locator(MaxNLocator(4))
    ax.grid(alpha=0.3, lw=0.5)


def _save(fig: Any, path: Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # Fast zlib level: a third of the encoding time of the default for ~10 % larger files.
    fig.savefig(path, dpi=DPI, metadata=_PNG_METADATA, pil_kwargs={"compress_level": 1})
    return path


def _legend_below(fig: Any, handles: list[Any], labels: list[str]) -> Any:
    if handles:
        return fig.legend(
            handles,
            labels,
            loc="lower center",
            ncol=min(5, len(labels)),
            fontsize=7,
            frameon=False,
            bbox_to_anchor=(0.5, 0.0),
            borderaxespad=0.2,
        )


def learning_curves(
    path: Path,
    panels: Mapping[str, Mapping[str, Band]],
    *,
    title: str,
    colors: Mapping[str, Any] | None = None,
    ylabel: str = "mean reward",
) -> Path:
    """One panel per reward component, one line per method (mean across seeds) with its CI band.

    ``panels``: component name → method → :class:`Band` over training steps.
    """
    return learning_curves_series([(path, panels, title)], colors=colors, ylabel=ylabel)[0]


def learning_curves_series(
    figures: Sequence[tuple[Path, Mapping[str, Mapping[str, Band]], str]],
    *,
    colors: Mapping[str, Any] | None = None,
    ylabel: str = "mean reward",
) -> list[Path]:
    """Draw several :func:`learning_curves` figures ``(path, panels, title)``, reusing one matplotlib
    figure for all those with the same layout: building axes and ticks is half the cost of a
    figure, and a report over 300 cells draws 30 of these."""
    from matplotlib.collections import LineCollection, PolyCollection

    layouts: dict[tuple[int, int], tuple[Any, list[Any], list[Any], list[Any]]] = {}
    legend = None
    out = []
    for path, panels, title in figures:
        methods = list(dict.fromkeys(m for p in panels.values() for m in p))
        palette = colors or method_colors(methods)
        key = (len(panels), math.ceil(len(methods) / 5))
        if key not in layouts:
            fig, axes = _panels(key[0], max_cols=4, panel=(2.8, 2.0), bottom=0.55 + 0.17 * key[1])
            polys, lines = [], []
            for ax in axes:
                # One collection for all bands and one for all lines: far cheaper to draw than a
                # fill_between and a plot per method.
                polys.append(ax.add_collection(PolyCollection([], alpha=0.18, linewidths=0), autolim=False))
                lines.append(ax.add_collection(LineCollection([], linewidths=1.2), autolim=False))
                _style(ax, "", "step", ylabel)
            layouts[key] = (fig, axes, polys, lines)
        fig, axes, polys, lines = layouts[key]
        for ax, poly, line, (name, per_method) in zip(axes, polys, lines, panels.items(), strict=True):
            bands = [(m, b) for m, b in per_method.items() if b.n_runs > 1]
            poly.set_verts([_band_polygon(b) for _, b in bands])
            poly.set_facecolor([palette.get(m) for m, _ in bands])
            line.set_segments([np.column_stack([b.steps, b.mean]) for b in per_method.values()])
            line.set_color([palette.get(m) for m in per_method])
            ax.set_title(name, fontsize=9)
            _set_limits(ax, list(per_method.values()))
        if legend is not None:
            legend.remove()
        runs = {m: b.n_runs for p in panels.values() for m, b in p.items()}
        legend = _legend_below(
            fig, [_line_handle(palette.get(m)) for m in methods], [f"{m} (n={runs[m]})" for m in methods]
        )
        fig.suptitle(title, fontsize=10)
        out.append(_save(fig, path))
    return out


def _set_limits(ax: Any, bands: list[Band], pad: float = 0.05) -> None:
    """Axis limits around every band's steps and values (collections do not autoscale on reuse)."""
    steps = np.concatenate([b.steps for b in bands]) if bands else np.array([0.0, 1.0])
    values = (
        np.concatenate([np.concatenate([b.mean, b.low, b.high]) for b in bands]) if bands else np.array([])
    )
    values = values[np.isfinite(values)]
    x0, x1 = (float(steps.min()), float(steps.max())) if steps.size else (0.0, 1.0)
    y0, y1 = (float(values.min()), float(values.max())) if values.size else (0.0, 1.0)
    if x1 == x0:
        x0, x1 = x0 - 0.5, x1 + 0.5
    if y1 == y0:
        y0, y1 = y0 - 0.5, y1 + 0.5
    ax.set_xlim(x0 - pad * (x1 - x0), x1 + pad * (x1 - x0))
    ax.set_ylim(y0 - pad * (y1 - y0), y1 + pad * (y1 - y0))


def _band_polygon(band: Band) -> np.ndarray:
    """The CI band as one closed polygon ``[2S, 2]``; steps without a finite band are dropped."""
    ok = np.isfinite(band.low) & np.isfinite(band.high)
    steps, low, high = band.steps[ok], band.low[ok], band.high[ok]
    return np.column_stack([np.concatenate([steps, steps[::-1]]), np.concatenate([low, high[::-1]])])


def _line_handle(color: Any) -> Any:
    from matplotlib.lines import Line2D

    return Line2D([], [], color=color, lw=1.2)


def _marker_handle(color: Any) -> Any:
    from matplotlib.lines import Line2D

    return Line2D([], [], color=color, marker="o", ms=4, lw=0)


def pareto_front(points: Mapping[str, tuple[float, float]]) -> list[str]:
    """Names of the non-dominated points when both coordinates are to be maximised, sorted by x.

    >>> pareto_front({"a": (1, 0), "b": (0, 1), "c": (0.5, 0.5), "d": (0.2, 0.2)})
    ['b', 'c', 'a']
    """
    front = []
    for name, (x, y) in points.items():
        if not (math.isfinite(x) and math.isfinite(y)):
            continue
        dominated = any(
            ox >= x and oy >= y and (ox > x or oy > y) for other, (ox, oy) in points.items() if other != name
        )
        if not dominated:
            front.append(name)
    return sorted(front, key=lambda n: (points[n][0], -points[n][1]))


def pareto_plot(
    path: Path,
    panels: Mapping[str, Mapping[str, ParetoPoint]],
    *,
    x_label: str,
    y_label: str,
    title: str,
    colors: Mapping[str, Any] | None = None,
) -> Path:
    """One panel per model: each method's mean (x, y) with CI error bars, seeds as faint dots,
    and the Pareto front (both axes higher is better) as a dashed line.

    ``panels``: panel title (model) → method → :class:`ParetoPoint`.
    """
    from matplotlib.collections import LineCollection

    methods = list(dict.fromkeys(m for p in panels.values() for m in p))
    colors = colors or method_colors(methods)
    legend_rows = math.ceil(len(methods) / 5)
    fig, axes = _panels(len(panels), max_cols=4, panel=(2.6, 2.3), bottom=0.55 + 0.17 * legend_rows)
    for ax, (name, pts) in zip(axes, panels.items(), strict=True):
        names = list(pts)
        seeds = [(m, s) for m in names for s in pts[m].seeds]
        if seeds:
            ax.scatter(
                [s[0] for _, s in seeds],
                [s[1] for _, s in seeds],
                color=[colors.get(m) for m, _ in seeds],
                alpha=0.3,
                s=8,
                lw=0,
            )
        # CI bars of every method as one collection (errorbar() per method is several artists each).
        bars = [[(p.x[1], p.y[0]), (p.x[2], p.y[0])] for p in pts.values()]
        bars += [[(p.x[0], p.y[1]), (p.x[0], p.y[2])] for p in pts.values()]
        ax.add_collection(LineCollection(bars, colors=[colors.get(m) for m in names] * 2, linewidths=1.0))
        ax.scatter(
            [pts[m].x[0] for m in names],
            [pts[m].y[0] for m in names],
            color=[colors.get(m) for m in names],
            s=18,
            zorder=3,
        )
        front = pareto_front({m: (p.x[0], p.y[0]) for m, p in pts.items()})
        if len(front) > 1:
            ax.plot([pts[m].x[0] for m in front], [pts[m].y[0] for m in front], "k--", lw=0.8, alpha=0.6)
        ax.autoscale_view()
        _style(ax, name, x_label, y_label)
    _legend_below(fig, [_marker_handle(colors.get(m)) for m in methods], methods)
    fig.suptitle(title, fontsize=10)
    return _save(fig, path)


def correlation_heatmaps(
    path: Path,
    matrices: Mapping[str, np.ndarray],
    components: Sequence[str],
    *,
    title: str,
) -> Path:
    """One K×K heatmap (Pearson correlation in [-1, 1]) per method; NaN cells are left blank.

    ``matrices``: method → ``[K, K]`` mean within-group reward correlation over training.
    """
    k = len(components)
    size = 0.9 + 0.3 * k
    fig, axes = _panels(
        len(matrices),
        max_cols=5,
        panel=(size, size),
        left=0.25 + 0.07 * max(map(len, components), default=1),
        right=0.8,
        bottom=0.2 + 0.045 * max(map(len, components), default=1),
        gap=(0.25, 0.75 + 0.06 * k),
    )
    image = None
    for i, (ax, (name, mat)) in enumerate(zip(axes, matrices.items(), strict=True)):
        mat = np.asarray(mat, dtype=float)
        image = ax.imshow(np.ma.masked_invalid(mat), vmin=-1, vmax=1, cmap="RdBu_r")
        ax.set_xticks(range(k))
        ax.set_yticks(range(k))
        ax.set_xticklabels(components, rotation=60, ha="right", fontsize=6)
        ax.set_yticklabels(components if i % 5 == 0 else [], fontsize=6)
        ax.tick_params(length=2, pad=1)
        if k <= 7 and len(matrices) <= 5:  # numbers stay legible only in a few, large panels
            for r in range(k):
                for c in range(k):
                    if np.isfinite(mat[r, c]):
                        color = "white" if abs(mat[r, c]) > 0.6 else "black"  # readable on dark cells
                        ax.text(c, r, f"{mat[r, c]:.1f}", ha="center", va="center", fontsize=5, color=color)
        ax.set_title(name, fontsize=8)
    if image is not None:
        width = fig.get_size_inches()[0]
        cax = fig.add_axes((1 - 0.55 / width, 0.2, 0.12 / width, 0.6))
        fig.colorbar(image, cax=cax)
        cax.tick_params(labelsize=6)
    fig.suptitle(title, fontsize=10)
    return _save(fig, path)


def advantage_share_bars(
    path: Path,
    shares: Mapping[str, Sequence[float]],
    components: Sequence[str],
    *,
    title: str,
    colors: Mapping[str, Any] | None = None,
) -> Path:
    """Grouped bars: for each reward component, each method's share of the advantage (0–1).

    ``shares``: method → ``[K]`` shares in component order (NaN bars are drawn as 0).
    """
    methods = list(shares)
    colors = colors or method_colors(methods)
    k = len(components)
    width_in = max(3.5, 0.22 * k * max(1, len(methods)) + 0.6)
    fig, axes = _panels(1, max_cols=1, panel=(width_in, 2.2), bottom=0.9, top=0.45, right=1.9)
    ax = axes[0]
    width = 0.8 / max(1, len(methods))
    x = np.arange(k)
    for i, method in enumerate(methods):
        values = np.nan_to_num(np.asarray(shares[method], dtype=float))
        ax.bar(
            x + (i - (len(methods) - 1) / 2) * width, values, width, color=colors.get(method), label=method
        )
    _style(ax, title, "", "share of advantage")
    ax.set_xticks(x)
    ax.set_xticklabels(components, rotation=30, ha="right", fontsize=7)
    ax.legend(fontsize=7, frameon=False, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return _save(fig, path)


@dataclass(frozen=True)
class ScalingSeries:
    """One method's metric against model size: ``n_params``, ``mean``, ``low``, ``high`` are each
    ``[M]`` (one entry per model, in increasing size)."""

    n_params: list[float]
    mean: list[float]
    low: list[float]
    high: list[float]


def model_ticks(ax: Any, ticks: Mapping[float, str]) -> None:
    """Put a log x axis's ticks at the models (parameter count → label) and no others.

    Powers of ten between the models say little, and their minor labels overlap when the models
    are a few times apart. The limits leave a margin of 8 % of the span (in log space) each side.
    """
    from matplotlib.ticker import NullFormatter, NullLocator

    ax.set_xticks(list(ticks), list(ticks.values()), fontsize=7)
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_minor_formatter(NullFormatter())
    left, right = min(ticks), max(ticks)
    pad = (right / left) ** 0.08 if right > left else 2.0
    ax.set_xlim(left / pad, right * pad)


def scaling_plot(
    path: Path,
    series: Mapping[str, ScalingSeries],
    *,
    metric: str,
    title: str,
    colors: Mapping[str, Any] | None = None,
    ticks: Mapping[float, str] | None = None,
) -> Path:
    """The primary metric against parameter count (log axis): one line per method through its
    per-model means, with the 95 % CI of each as a vertical bar. ``ticks`` (parameter count →
    label, e.g. ``"tiny\n613K"``) puts the axis ticks at the models themselves."""
    from matplotlib.collections import LineCollection
    from matplotlib.ticker import LogLocator

    methods = list(series)
    colors = colors or method_colors(methods)
    fig, (ax,) = _panels(1, max_cols=1, panel=(5.0, 2.8), bottom=0.75)
    for name, s in series.items():
        ax.plot(s.n_params, s.mean, "-o", color=colors.get(name), ms=4, lw=1.2)
        bars = [[(x, lo), (x, hi)] for x, lo, hi in zip(s.n_params, s.low, s.high, strict=True)]
        ax.add_collection(LineCollection(bars, colors=colors.get(name), linewidths=1.0, alpha=0.7))
    ax.set_xscale("log")
    ax.autoscale_view()
    _style(ax, "", "parameters (log scale)", metric)
    if ticks:
        model_ticks(ax, ticks)
    else:
        ax.xaxis.set_major_locator(LogLocator())  # _style's linear locator does not suit a log axis
    _legend_below(fig, [_line_handle(colors.get(m)) for m in methods], methods)
    fig.suptitle(title, fontsize=10)
    return _save(fig, path)
