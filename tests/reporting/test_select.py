"""Run selection without a store: latest FINISHED per run key and per cell, method labels for
hyper-parameter variants, task info by majority, report order, and the diagnostics aggregation."""

from __future__ import annotations

import math

import numpy as np

from mrbench.core import layout
from mrbench.core.records import Diagnostics
from mrbench.reporting.context import ReportContext
from mrbench.reporting.figures import diagnostic_means, pareto_axes
from mrbench.reporting.select import (
    BASELINE,
    Duplicate,
    cell_label,
    latest,
    method_labels,
    ordered,
    select_runs,
    task_info,
)
from mrbench.store.reader import RunRecord

_clock = iter(range(1, 10_000))


def run(
    method: str = "grpo",
    seed: int = 0,
    *,
    key: str | None = None,
    status: str = "FINISHED",
    task: str = "t",
    params: dict[str, str] | None = None,
    components: str = "a,b",
    **metrics: float,
) -> RunRecord:
    """A cell run that ends after every run made before it."""
    tags = layout.cell_tags(
        method=method,
        task=task,
        task_version="1",
        model="m",
        seed=seed,
        run_key=key or f"{method}-{task}-{seed}",
        git_sha="abc",
        sweep="s",
        primary_metric="score",
        lower_is_better=frozenset(),
        reward_components=layout.split_list(components),
    )
    start = next(_clock)
    return RunRecord(
        f"id{start}",
        status,
        start,
        start,
        "",
        tags,
        {layout.METHOD_PARAM + k: v for k, v in (params or {}).items()},
        {layout.adv_share(k): v for k, v in metrics.items()},
    )


def test_latest_finished_attempt_per_key_and_per_cell() -> None:
    failed_first = run(seed=0, key="k0", status="FAILED")
    done = run(seed=0, key="k0")
    redone = run(seed=0, key="k0")
    old_settings = run(seed=1, key="k1-old")
    new_settings = run(seed=1, key="k1")
    killed = run(seed=2, key="k2", status="KILLED")
    parent = RunRecord("p", "FINISHED", 0, 1, "", {layout.tag(layout.ROLE): layout.ROLE_SWEEP})
    sel = select_runs([new_settings, parent, failed_first, killed, done, redone, old_settings])
    assert sel.cells == {("t", "m"): {"grpo": [redone, new_settings]}}
    assert sel.failed == [killed] and cell_label(killed) == "grpo|t|m|s2"
    assert sel.recovered == 1
    assert sel.superseded == ["grpo|t|m|s1 (2 settings)"]
    assert sel.parents == [parent]
    assert sel.runs() == [redone, new_settings]
    # k0 has two FINISHED runs (a failed attempt is not one): the report names it and the run it uses.
    assert sel.duplicates == [Duplicate("grpo|t|m|s0", 2, redone.run_id)]


def test_duplicate_finished_runs_use_the_latest_finished_in_a_total_order() -> None:
    # Two sweeps raced on one cell: three FINISHED runs of one run key, two ending at the same time.
    first, raced_a, raced_b = run(seed=0, key="k"), run(seed=0, key="k"), run(seed=0, key="k")
    raced_a.end_time = raced_b.end_time = 100
    raced_a.start_time, raced_b.start_time = 50, 50
    raced_a.run_id, raced_b.run_id = "b-run", "a-run"
    assert latest([first, raced_b, raced_a]) is raced_a  # same end and start: the greater run id
    raced_b.start_time = 60
    assert latest([first, raced_a, raced_b]) is raced_b  # same end: the later start
    for order in ([first, raced_a, raced_b], [raced_b, first, raced_a]):
        sel = select_runs(order)
        assert sel.cells[("t", "m")]["grpo"] == [raced_b]
        assert sel.duplicates == [Duplicate("grpo|t|m|s0", 3, "a-run")]
    assert select_runs([first, run(seed=1, key="k1")]).duplicates == []


def test_runs_are_ordered_by_seed_and_failed_cells_by_task_model_method_seed() -> None:
    runs = [run(seed=s) for s in (10, 2, 1)]
    failed = [
        run("b", 1, status="FAILED"),
        run("a", 3, task="u", status="FAILED"),
        run("a", 2, status="FAILED"),
    ]
    sel = select_runs(runs + failed)
    assert [layout.read_tag(r.tags, layout.SEED) for r in sel.cells[("t", "m")]["grpo"]] == ["1", "2", "10"]
    assert [cell_label(r) for r in sel.failed] == ["a|t|m|s2", "b|t|m|s1", "a|u|m|s3"]


def test_method_labels_name_only_differing_hyper_parameters() -> None:
    plain = run("grpo", params={"eps": "1e-06"})
    low = run("guarded", params={"eps": "1e-06", "floor": "1.0"})
    high = run("guarded", params={"eps": "1e-06", "floor": "2.0"})
    labels = method_labels([plain, low, high])
    assert labels == {
        plain.run_id: "grpo",
        low.run_id: "guarded(floor=1.0)",
        high.run_id: "guarded(floor=2.0)",
    }


def test_task_info_takes_the_majority_and_order_puts_the_baseline_first() -> None:
    info = task_info([run(components="a,b"), run(components="a,b"), run(components="x")])
    assert info.components == ["a", "b"] and info.primary == "score" and not info.primary_lower_is_better
    assert ordered({"z", "gdpo", BASELINE, "c"}, ["c", "missing"]) == ["c", BASELINE, "gdpo", "z"]
    assert pareto_axes("agent-security", ["safety", "utility"]) == ("utility", "safety")
    assert pareto_axes("other", ["b", "a", "c"]) == ("b", "a")
    assert pareto_axes("other", ["a"]) is None


def test_diagnostic_means_fall_back_to_logged_shares() -> None:
    # Run 1 logged a diagnostics.json in the task's component order; run 2 logged none (its final
    # adv/share metrics stand in); run 3's diagnostics list the components in another order.
    runs = [run(seed=0), run(seed=1, a=0.2, b=0.8), run(seed=2, a=0.4, b=0.6)]
    sel = select_runs(runs)
    ctx = ReportContext("s", "cmd", "store", sel, None, None, ["grpo"], ["t"], {"t": task_info(runs)}, ["m"])
    ctx.diagnostics = {
        runs[0].run_id: Diagnostics(["a", "b"], [[1.0, None], [None, 1.0]], [0.6, 0.4]),
        runs[2].run_id: Diagnostics(["b", "a"], [[1.0, 0.5], [0.5, 1.0]], [0.9, 0.1]),
    }
    matrices, shares = diagnostic_means(ctx, "t")
    assert np.allclose(shares["grpo"], [(0.6 + 0.2 + 0.4) / 3, (0.4 + 0.8 + 0.6) / 3])
    assert matrices["grpo"][0, 0] == 1.0 and math.isnan(matrices["grpo"][0, 1])
