"""Read the reward correlations of real runs back from a report's correlation heatmaps.

The ``paper-*`` scenarios take their correlations from real mrbench runs: the committed report
``reports/smoke/`` shows each task's within-group Pearson correlation of the reward components
(from the runs' ``diagnostics.json`` ``corr_matrix``, mean over training) as ``corr-<task>.png``,
one panel per method, drawn with ``imshow(vmin=-1, vmax=1, cmap="RdBu_r")``
(:func:`mrbench.reporting.plots.correlation_heatmaps`). The MLflow store those runs wrote is not
part of the repository, so this module recovers the numbers from the figures: it finds each
panel's cells and inverts the colour map at a point of every cell away from its printed label.
The colour map has 256 levels over [−1, 1], so a value is recovered to about ±0.01 (the labels
print one decimal). Cells never defined (a component constant in every group) are blank → NaN.

Reproduce the numbers in :mod:`mrbench.lab.presets`::

    python -m mrbench.lab.smoke_corr reports/smoke
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

TASKS = {"code-generation": 7, "tool-calling": 4, "agent-security": 2}
"""Task → number of reward components (``mrbench tasks --json``)."""

_MATCH = 60.0  # squared RGB distance under which a pixel counts as a colour of the map
_INSET = 0.15  # sample each cell this far (fraction of a cell) from its top-left corner: no label


def _colour_table() -> tuple[np.ndarray, np.ndarray]:
    from matplotlib import colormaps

    values = np.linspace(-1.0, 1.0, 4001)
    rgb = colormaps["RdBu_r"]((values + 1.0) / 2.0)[:, :3] * 255.0
    return values, rgb


def decode_panels(path: Path, n_defined: int) -> list[np.ndarray]:
    """The ``n_defined × n_defined`` matrices of every heatmap panel in the PNG at ``path``.

    ``n_defined`` is the number of components with a defined correlation (the coloured block of
    each panel: blank rows and columns of constant components come last in these reports).
    """
    from PIL import Image

    values, rgb = _colour_table()
    image = np.asarray(Image.open(path).convert("RGB"), dtype=float)
    # Only the heatmap cells and the colour bar are coloured: text, axes and background are grey.
    mask = image.max(-1) - image.min(-1) > 40
    columns = np.flatnonzero(mask.any(0))
    panels = []
    for run in np.split(columns, np.flatnonzero(np.diff(columns) > 3) + 1):
        if len(run) < 20:
            continue
        x0, x1 = run[0], run[-1]
        rows = np.flatnonzero(mask[:, x0 : x1 + 1].any(1))
        y0, y1 = rows[0], rows[-1]
        if x1 - x0 < 0.5 * (y1 - y0):
            continue  # the colour bar: tall and thin
        cw, ch = (x1 - x0 + 1) / n_defined, (y1 - y0 + 1) / n_defined
        matrix = np.full((n_defined, n_defined), np.nan)
        for i in range(n_defined):
            for j in range(n_defined):
                y, x = int(y0 + (i + _INSET) * ch), int(x0 + (j + _INSET) * cw)
                patch = image[y : y + 3, x : x + 3].reshape(-1, 3).mean(0)
                d = ((rgb - patch) ** 2).sum(-1)
                if d.min() < _MATCH:
                    matrix[i, j] = values[d.argmin()]
        np.fill_diagonal(matrix, 1.0)
        panels.append(matrix)
    return panels


def task_correlations(report_dir: Path) -> dict[str, tuple[int, np.ndarray]]:
    """Task → (panels found, mean matrix over the panels rounded to 2 decimals)."""
    out = {}
    for task in TASKS:
        path = Path(report_dir) / f"corr-{task}.png"
        if not path.exists():
            continue
        # code-generation's efficiency was constant in every group of the smoke runs (blank).
        defined = TASKS[task] - 1 if task == "code-generation" else TASKS[task]
        panels = decode_panels(path, defined)
        if panels:
            out[task] = (len(panels), np.round(np.mean(panels, axis=0), 2))
    return out


def main(argv: list[str] | None = None) -> None:
    """Print each task's decoded mean correlation matrix."""
    args = sys.argv[1:] if argv is None else argv
    report_dir = Path(args[0] if args else "reports/smoke")
    for task, (n, matrix) in task_correlations(report_dir).items():
        print(f"{task}: mean of {n} panels")
        print(np.array2string(matrix, separator=", "))


if __name__ == "__main__":
    main()
