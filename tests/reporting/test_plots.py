"""Report figures: each kind draws a PNG from aggregated numbers, NaN included; parallel = serial."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from mrbench.reporting.drawing import FigureJob, render
from mrbench.reporting.plots import (
    Band,
    ParetoPoint,
    advantage_share_bars,
    correlation_heatmaps,
    learning_curves,
    learning_curves_series,
    method_colors,
    pareto_front,
    pareto_plot,
)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def is_png(path: Path) -> bool:
    data = Path(path).read_bytes()
    return data.startswith(PNG_MAGIC) and len(data) > 2000


def band(offset: float, n_runs: int = 3) -> Band:
    steps = np.arange(1, 21)
    mean = offset + np.log1p(steps) / 5
    return Band(steps, mean, mean - 0.05, mean + 0.05, n_runs=n_runs)


def curve_panels() -> dict[str, dict[str, Band]]:
    return {
        comp: {"grpo": band(0.0), "corrgrpo": band(0.1), "gdpo": band(0.05, n_runs=1)}
        for comp in ("format", "accuracy", "total reward (weighted)")
    }


def test_learning_curves_png(tmp_path: Path) -> None:
    assert is_png(learning_curves(tmp_path / "c.png", curve_panels(), title="t"))


def test_learning_curves_tolerate_nan_steps(tmp_path: Path) -> None:
    nan = np.full(5, np.nan)
    gap = Band(np.arange(5), np.array([0.1, np.nan, 0.3, 0.4, 0.5]), nan, nan, n_runs=2)
    assert is_png(learning_curves(tmp_path / "c.png", {"a": {"grpo": gap}}, title="t"))


def test_learning_curves_series_reuses_layouts_deterministically(tmp_path: Path) -> None:
    two_panels = dict(list(curve_panels().items())[:2])
    items = [
        (tmp_path / "a.png", curve_panels(), "a"),
        (tmp_path / "b.png", two_panels, "b"),
        (tmp_path / "c.png", {"x": {"grpo": band(0.3)}}, "c"),
    ]
    paths = learning_curves_series(items)
    assert paths == [tmp_path / "a.png", tmp_path / "b.png", tmp_path / "c.png"]
    assert all(is_png(p) for p in paths)
    first = [p.read_bytes() for p in paths]
    learning_curves_series(items)
    assert [p.read_bytes() for p in paths] == first


def test_pareto_front_maximises_both_axes() -> None:
    points = {"a": (1.0, 0.0), "b": (0.0, 1.0), "c": (0.5, 0.5), "d": (0.2, 0.2)}
    assert pareto_front(points) == ["b", "c", "a"]
    assert pareto_front({"a": (1.0, 1.0), "b": (1.0, 1.0)}) == ["a", "b"]  # equal points dominate neither
    assert pareto_front({"a": (float("nan"), 1.0), "b": (0.0, 0.0)}) == ["b"]


def test_pareto_plot_png(tmp_path: Path) -> None:
    panels = {
        model: {
            "grpo": ParetoPoint((0.3, 0.25, 0.35), (0.6, 0.55, 0.65), [(0.28, 0.6), (0.32, 0.62)]),
            "corrgrpo": ParetoPoint((0.5, 0.45, 0.55), (0.5, 0.45, 0.55), [(0.5, 0.5)]),
        }
        for model in ("tiny", "tiny-s")
    }
    assert is_png(pareto_plot(tmp_path / "p.png", panels, x_label="utility", y_label="safety", title="t"))


def test_correlation_heatmaps_png_with_undefined_cells(tmp_path: Path) -> None:
    mat = np.array([[1.0, 0.4, np.nan], [0.4, 1.0, -0.7], [np.nan, -0.7, np.nan]])
    path = correlation_heatmaps(tmp_path / "h.png", {"grpo": mat, "gdpo": -mat}, ["a", "b", "c"], title="t")
    assert is_png(path)


def test_advantage_share_bars_png(tmp_path: Path) -> None:
    shares = {"grpo": [0.5, 0.3, 0.2], "corrgrpo": [0.4, np.nan, 0.6]}
    assert is_png(advantage_share_bars(tmp_path / "s.png", shares, ["a", "b", "c"], title="t"))


def test_method_colors_are_stable_and_distinct() -> None:
    colors = method_colors(["grpo", "gdpo", "corrgrpo"])
    assert colors == method_colors(["grpo", "gdpo", "corrgrpo"])
    assert len(set(colors.values())) == 3
    assert len(set(method_colors([f"m{i}" for i in range(15)]).values())) == 15


def test_render_in_worker_processes_matches_serial(tmp_path: Path) -> None:
    def jobs(folder: Path) -> list[FigureJob]:
        panels = {"reward": {"grpo": band(0.0)}}  # one small panel: the test is about the workers
        return [
            FigureJob("learning_curves", folder / f"c{i}.png", (panels,), {"title": f"fig {i}"})
            for i in range(6)
        ]

    serial = render(jobs(tmp_path / "serial"), workers=1)
    parallel = render(jobs(tmp_path / "parallel"), workers=2)
    assert [p.name for p in serial] == [p.name for p in parallel]
    for a, b in zip(serial, parallel, strict=True):
        assert a.read_bytes() == b.read_bytes()


def test_scaling_axis_ticks_sit_at_the_models_only() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from mrbench.reporting.plots import model_ticks

    fig, ax = plt.subplots()
    ax.set_xscale("log")
    ax.plot([613e3, 1.87e6, 8.4e6], [0.3, 0.1, 0.0])
    model_ticks(ax, {613e3: "tiny\n613K", 1.87e6: "tiny-s\n1.87M", 8.4e6: "tiny-m\n8.4M"})
    assert list(ax.get_xticks()) == [613e3, 1.87e6, 8.4e6]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["tiny\n613K", "tiny-s\n1.87M", "tiny-m\n8.4M"]
    assert len(ax.xaxis.get_minorticklocs()) == 0  # no 2×10⁶, 3×10⁶, … labels between them
    left, right = ax.get_xlim()
    assert left < 613e3 and right > 8.4e6  # the end points are inside the frame
    plt.close(fig)
