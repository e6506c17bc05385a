"""What a lab run logs per step: the series at the steps the figures draw."""

from __future__ import annotations

from dataclasses import replace

from mrbench.core import layout
from mrbench.lab.figures import MAX_POINTS, thin
from mrbench.lab.presets import get_scenario
from mrbench.lab.simulate import simulate
from mrbench.lab.tracking import _step_metrics


def test_per_step_series_are_logged_at_the_steps_the_figures_draw():
    steps = 150
    result = simulate(replace(get_scenario("scale"), prompts=2, responses=4, steps=steps), ["grpo"], [0, 1])
    by_key: dict[str, list[tuple[int, float]]] = {}
    for metric in _step_metrics(result, "grpo"):
        by_key.setdefault(metric.key, []).append((metric.step, metric.value))
    drawn = [int(i) for i in thin(steps + 1)]
    assert len(drawn) == MAX_POINTS and drawn[0] == 0 and drawn[-1] == steps
    objective = by_key[layout.lab_metric("objective")]
    assert [step for step, _ in objective] == drawn
    mean_big = result.runs["grpo"].components[:, :, 0].mean(axis=0)
    assert [value for _, value in by_key[layout.reward_mean("big")]] == [float(mean_big[i]) for i in drawn]
    # Advantage diagnostics belong to the updates 1..T, the last one included.
    updates = [step for step, _ in by_key[layout.adv_metric("max_abs")]]
    assert updates == [int(i) + 1 for i in thin(steps)] and updates[-1] == steps
