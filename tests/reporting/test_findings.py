"""The findings (ranking, comparisons in words, seeds for power), count metrics and the shadow
estimators' table, from run records without a store; and the reporting modules' doctests."""

from __future__ import annotations

import doctest
import importlib
import math
from collections.abc import Sequence

import numpy as np
import pytest

from mrbench.core import layout
from mrbench.core.records import Diagnostics, ShadowMeans
from mrbench.reporting.context import ReportContext
from mrbench.reporting.findings import findings, ranking
from mrbench.reporting.select import ordered, select_runs, task_info
from mrbench.reporting.shadows import shadow_lines, shadow_table
from mrbench.store.reader import RunRecord

_clock = iter(range(1, 100_000))


def record(method: str, seed: int, score: float, *, model: str = "m", lower: bool = False) -> RunRecord:
    """A FINISHED cell run of task ``t`` with the final eval value ``score`` of its primary metric."""
    tags = layout.cell_tags(
        method=method,
        task="t",
        task_version="1",
        model=model,
        seed=seed,
        run_key=f"{method}-{model}-{seed}",
        git_sha="abc",
        sweep="s",
        primary_metric="score",
        lower_is_better=frozenset({"score"} if lower else set()),
        reward_components=["a", "b"],
    )
    t = next(_clock)
    return RunRecord(f"id{t}", "FINISHED", t, t, "", tags, {}, {layout.eval_metric("score"): score})


def context(runs: list[RunRecord]) -> ReportContext:
    sel = select_runs(runs)
    methods = ordered({m for per in sel.cells.values() for m in per}, [])
    models = sorted({m for _, m in sel.cells})
    return ReportContext("s", "cmd", "store", sel, None, None, methods, ["t"], {"t": task_info(runs)}, models)


def cell(method: str, scores: Sequence[float], **kwargs: object) -> list[RunRecord]:
    return [record(method, seed, v, **kwargs) for seed, v in enumerate(scores)]  # type: ignore[arg-type]


def rows(text: list[str]) -> dict[str, str]:
    """Findings table rows by method name."""
    return {line.split(" | ")[1]: line for line in text if line.startswith("| ") and line[2].isdigit()}


def test_findings_rank_and_state_each_comparison_in_words() -> None:
    runs = (
        cell("grpo", [0.50, 0.52, 0.51])
        + cell("corrgrpo", [0.60, 0.62, 0.61])  # every seed above every grpo seed
        + cell("gdpo", [0.40, 0.60, 0.55])  # overlapping
        + cell("dr-grpo", [0.10, 0.12, 0.11])
    )
    text = findings(context(runs))
    assert text[0] == "## Findings"
    assert "**t** · m — `score` (higher is better):" in text
    table = rows(text)
    assert list(table) == ["corrgrpo", "gdpo", "grpo", "dr-grpo"]  # ranked by mean, best first
    assert table["corrgrpo"] == (
        "| 1 | corrgrpo | 0.610 | +0.100 | corrgrpo > grpo: P = 1.00 [1.00, 1.00] | 3 |"
    )
    assert (
        "| 2 | gdpo | 0.517 | +0.007 | not resolved with 3 seeds: the interval includes 0.5 (P = "
        in table["gdpo"]
    )
    assert table["gdpo"].endswith("| ≥ 50 |")  # a tiny difference in a wide spread
    assert table["grpo"] == "| 3 | grpo | 0.510 | – | baseline | – |"
    assert "dr-grpo < grpo: P = 0.00 [0.00, 0.00]" in table["dr-grpo"]


def test_findings_for_a_lower_is_better_metric_read_beats_as_lower() -> None:
    runs = cell("grpo", [0.50, 0.52, 0.51], lower=True) + cell("corrgrpo", [0.10, 0.12, 0.11], lower=True)
    text = findings(context(runs))
    assert "**t** · m — `score` (lower is better):" in text
    table = rows(text)
    assert list(table) == ["corrgrpo", "grpo"]
    assert "| -0.400 | corrgrpo > grpo: P = 1.00 [1.00, 1.00] |" in table["corrgrpo"]


def test_findings_with_one_seed_several_models_or_no_baseline() -> None:
    one = findings(context(cell("grpo", [0.5]) + cell("gdpo", [0.7])))
    assert rows(one)["gdpo"].endswith(
        "| not resolved with 1 seed: one seed has no spread to resample (P = 1.00 [1.00, 1.00]) | – |"
    )
    # Two models, each a stratum: corrgrpo beats grpo on both although the models' levels differ.
    runs = [
        *cell("grpo", [0.10, 0.12, 0.11], model="small"),
        *cell("corrgrpo", [0.20, 0.22, 0.21], model="small"),
        *cell("grpo", [0.80, 0.82, 0.81], model="large"),
        *cell("corrgrpo", [0.90, 0.92, 0.91], model="large"),
    ]
    ctx = context(runs)
    text = findings(ctx)
    assert "**t** · 2 models (mean of the per-model means) — `score` (higher is better):" in text
    assert "corrgrpo > grpo: P = 1.00 [1.00, 1.00]" in rows(text)["corrgrpo"]
    assert ranking(ctx, "t") == [("corrgrpo", pytest.approx(0.56)), ("grpo", pytest.approx(0.46))]
    alone = findings(context(cell("gdpo", [0.5, 0.6]) + cell("corrgrpo", [0.7, 0.8])))
    assert "No `grpo` runs on this task: ranking only." in alone
    assert rows(alone) == {"corrgrpo": "| 1 | corrgrpo | 0.750 |", "gdpo": "| 2 | gdpo | 0.550 |"}
    assert findings(context([])) == []


def test_findings_are_deterministic() -> None:
    runs = cell("grpo", [0.50, 0.55, 0.45, 0.52]) + cell("gdpo", [0.53, 0.58, 0.47, 0.50])
    assert findings(context(runs)) == findings(context(runs))


def test_shadow_table_from_diagnostics_or_curves_and_none_for_old_runs() -> None:
    grpo_a, grpo_b, gdpo = record("grpo", 0, 0.5), record("grpo", 1, 0.5), record("gdpo", 0, 0.5)
    ctx = context([grpo_a, grpo_b, gdpo])
    assert shadow_table(ctx, "t") is None and shadow_lines(ctx, "t") == []  # runs without shadows
    stats_ = ShadowMeans(sign_agree=0.9, rank_corr=0.8, resolution=None)
    shadow = {"gdpo": stats_, "corrgrpo": stats_}
    ctx.diagnostics = {grpo_a.run_id: Diagnostics([], resolution=0.5, shadow=shadow)}
    steps = np.array([1, 2])
    ctx.histories = {  # grpo_b has no diagnostics.json: its logged curves stand in
        grpo_b.run_id: {
            layout.ADV_RESOLUTION: (steps, np.array([0.6, 0.8])),
            layout.shadow_metric("gdpo", "sign_agree"): (steps, np.array([0.5, 0.7])),
            layout.shadow_metric("gdpo", "resolution"): (steps, np.array([1.0, 1.0])),
        },
    }
    table = shadow_table(ctx, "t")
    assert table is not None and list(table.own) == ["grpo"] and table.shadows == ["gdpo", "corrgrpo"]
    assert table.own["grpo"] == pytest.approx((0.5 + 0.7) / 2)
    assert table.compared["grpo"]["gdpo"] == pytest.approx(((0.9 + 0.6) / 2, 0.8, 1.0))
    assert math.isnan(table.compared["grpo"]["corrgrpo"][2])
    lines = shadow_lines(ctx, "t")
    assert "| method in use | own resolution | gdpo | corrgrpo |" in lines
    assert "| grpo | 0.600 | 0.750 / 0.800 / 1.000 | 0.900 / 0.800 / – |" in lines


@pytest.mark.parametrize(
    "module", ["stats", "power", "findings", "render", "select", "shadows", "figures", "plots"]
)
def test_doctests(module: str) -> None:
    result = doctest.testmod(importlib.import_module(f"mrbench.reporting.{module}"))
    assert result.failed == 0
