"""Markdown of the sections that explain the results: the trade-off between two reward components
(Pareto), why methods differ (reward correlations, advantage shares and shadow estimators), and
whether training improved each run's primary eval metric, with what the logs suggest where it did not.
"""

from __future__ import annotations

import math

from mrbench.core import layout
from mrbench.reporting import stats
from mrbench.reporting.context import ReportContext
from mrbench.reporting.figures import FigureQueue, diagnostic_means, pareto_axes, pareto_panels
from mrbench.reporting.render import fmt
from mrbench.reporting.shadows import SHADOW_INTRO, shadow_lines
from mrbench.store.reader import RunRecord

ZERO_VAR_GROUPS = "frac_zero_var_groups"
"""The advantage diagnostic (``adv/<name>``) with the fraction of groups without reward variance."""


def pareto_section(ctx: ReportContext, figures: FigureQueue) -> list[str]:
    """Per task, each method's final training reward on two components, against each other."""
    lines = [
        "## Trade-offs between reward components (Pareto)",
        "",
        "Final training reward of two main components (mean of the last 10 % of logged steps per run, "
        f"at least {stats.WINDOW_MIN_STEPS}); "
        "dots are seeds, bars 95 % CIs, the dashed line the Pareto front (both higher is better).",
        "",
    ]
    for task in ctx.tasks:
        axes = pareto_axes(task, ctx.task_info[task].components)
        if axes is None:
            lines += [f"`{task}` has fewer than two reward components: no Pareto plot.", ""]
            continue
        panels = pareto_panels(ctx, task, *axes)
        if not panels:
            continue
        path = figures.pareto(task, panels, *axes)
        lines += [f"![pareto {task}]({path.name})", ""]
    return lines


def why_section(ctx: ReportContext, figures: FigureQueue) -> list[str]:
    """Per task, heatmaps of the mean reward correlations, bars and a table of the advantage shares
    per method, and the shadow estimators' table (:mod:`mrbench.reporting.shadows`)."""
    shadows = {task: shadow_lines(ctx, task) for task in ctx.tasks}  # empty for runs without shadows
    any_shadows = any(shadows.values())
    topics = (
        "reward correlations, advantage shares and shadow estimators"
        if any_shadows
        else "reward correlations and advantage shares"
    )
    lines = [
        f"## Why methods differ: {topics}",
        "",
        f"From each run's `{layout.DIAGNOSTICS_ARTIFACT}`: the within-group Pearson correlation of the "
        "reward components (mean over training, then over runs) and each component's share of the "
        "advantage. Strongly correlated components inflate GRPO's denominator; a component with a large "
        "share dominates the learning signal.",
        "",
    ]
    if any_shadows:
        lines += [SHADOW_INTRO, ""]
    for task in ctx.tasks:
        comps = ctx.task_info[task].components
        matrices, shares = diagnostic_means(ctx, task)
        if matrices:
            path = figures.correlations(task, matrices, comps)
            lines += [f"![correlations {task}]({path.name})", ""]
        else:
            lines += [f"`{task}`: no correlation diagnostics logged.", ""]
        if shares:
            path = figures.shares(task, shares, comps)
            lines += [f"![advantage share {task}]({path.name})", ""]
            lines += ["| method | " + " | ".join(comps) + " |", "|" + "---|" * (len(comps) + 1)]
            for name, share in shares.items():
                lines.append(f"| {name} | " + " | ".join(fmt(v) for v in share) + " |")
            lines.append("")
        lines += shadows[task]
    return lines


def improvement_section(ctx: ReportContext) -> list[str]:
    """Per task × model × method, the primary metric before and after training and how many seeds
    improved; then each run that did not, with the likely reasons."""
    lines = [
        "## Did training improve the primary eval metric?",
        "",
        f"Each run's primary metric after training vs. its own pre-training value (`{layout.EVAL_BEFORE}…`).",
        "",
        "| task | model | method | before (mean) | after (mean) | improved seeds |",
        "|---|---|---|---|---|---|",
    ]
    not_improved = []
    for task in ctx.tasks:
        info = ctx.task_info[task]
        lower = info.primary_lower_is_better
        for model in ctx.models_for(task):
            cell = ctx.sel.cells[(task, model)]
            for name in [m for m in ctx.methods if m in cell]:
                runs = cell[name]
                befores = [r.metrics.get(layout.eval_before_metric(info.primary), math.nan) for r in runs]
                afters = ctx.scores(runs, info.primary)
                better = [(a < b) if lower else (a > b) for b, a in zip(befores, afters, strict=True)]
                lines.append(
                    f"| {task} | {model} | {name} | {fmt(stats.nanmean(befores))} | "
                    f"{fmt(stats.nanmean(afters))} | {sum(better)}/{len(runs)} |"
                )
                for run, b, a, ok in zip(runs, befores, afters, better, strict=True):
                    if not ok:
                        seed = layout.read_tag(run.tags, layout.SEED)
                        not_improved.append(
                            f"`{layout.cell_label(name, task, model, seed)}`: "
                            f"{info.primary} {fmt(b)} → {fmt(a)}; {_why_not(ctx, run)}"
                        )
    lines.append("")
    if not_improved:
        lines += [
            f"Not improved ({len(not_improved)} run(s)) and what the logs suggest (training rewards: "
            f"mean of the first → the last 10 % of logged steps, at least {stats.WINDOW_MIN_STEPS}):",
            "",
        ]
        lines += [f"- {item}" for item in not_improved]
    else:
        lines.append("Every run's primary metric improved over its pre-training value.")
    return [*lines, ""]


def _why_not(ctx: ReportContext, run: RunRecord) -> str:
    """What a run's logs suggest about why its primary metric did not improve."""
    reasons = []
    curve = ctx.curve(run, layout.REWARD)
    first, last = stats.head_mean(curve), stats.tail_mean(curve)
    if not math.isfinite(first) or not math.isfinite(last):
        reasons.append("no training reward was logged")
    elif last <= first:
        reasons.append(f"the training reward did not rise ({fmt(first)} → {fmt(last)})")
    else:
        reasons.append(
            f"the training reward rose ({fmt(first)} → {fmt(last)}) but the eval metric did not "
            "follow (too few steps, or the reward does not track the metric)"
        )
    moves = _component_moves(ctx, run)
    if moves:
        reasons.append(f"per component: {moves}")
    zero_var = run.metrics.get(layout.adv_metric(ZERO_VAR_GROUPS))
    if zero_var is not None and math.isfinite(zero_var) and zero_var >= 0.5:
        reasons.append(f"{zero_var:.0%} of groups had zero reward variance at the end (no learning signal)")
    return "; ".join(reasons)


def _component_moves(ctx: ReportContext, run: RunRecord) -> str:
    """``"utility 0.047 → 0.091 (rose), safety …"`` over the same windows as the total, or ``""``.

    Why: a summed reward can fall while one component rises (a safety gain paid for with
    utility, or the reverse), which is what a multi-reward comparison needs to see.
    """
    info = ctx.task_info.get(layout.read_tag(run.tags, layout.TASK))
    if info is None or len(info.components) < 2:
        return ""
    parts = []
    for comp in info.components:
        curve = ctx.curve(run, layout.reward_mean(comp))
        first, last = stats.head_mean(curve), stats.tail_mean(curve)
        if math.isfinite(first) and math.isfinite(last):
            trend = "rose" if last > first else "fell" if last < first else "flat"
            parts.append(f"{comp} {fmt(first)} → {fmt(last)} ({trend})")
    return ", ".join(parts)
