"""Markdown of the results: per task × model the primary eval metric per method (mean, IQM, 95 %
CI, per seed) with a winner only when its interval is separated, every eval metric, the
probability of improvement over the baseline and the learning curves; then the probability of
improvement over all tasks and models.

Scores are the final eval metrics; a lower-is-better metric is negated for the probability of
improvement, so that "improvement" always means "better".
"""

from __future__ import annotations

import math

import numpy as np

from mrbench.core import layout
from mrbench.reporting import stats
from mrbench.reporting.context import ReportContext
from mrbench.reporting.figures import FigureQueue, curve_panels
from mrbench.reporting.render import fmt, fmt_count
from mrbench.reporting.select import BASELINE, TaskInfo
from mrbench.store.reader import RunRecord

Scores = dict[str, tuple[list[float], bool]]
"""Method label → (primary metric per seed, lower is better) of one task × model."""


def results(ctx: ReportContext, figures: FigureQueue) -> list[str]:
    """``## Results per task and model`` with a subsection per task × model, then the overall
    probability of improvement."""
    lines = ["## Results per task and model", ""]
    all_scores: dict[tuple[str, str], Scores] = {}
    for task in ctx.tasks:
        for model in ctx.models_for(task):
            section, scores = cell_section(ctx, figures, task, model)
            lines += section
            all_scores[(task, model)] = scores
    return lines + overall_poi(ctx, all_scores)


def cell_section(ctx: ReportContext, figures: FigureQueue, task: str, model: str) -> tuple[list[str], Scores]:
    """Tables and learning curves for one task × model; returns the primary scores per method for
    the overall probability of improvement."""
    info = ctx.task_info[task]
    methods = ctx.sel.cells[(task, model)]
    names = [m for m in ctx.methods if m in methods]
    primary, lower = info.primary, info.primary_lower_is_better
    direction = "lower is better" if lower else "higher is better"
    lines = [
        f"### {task} · {model}",
        "",
        f"Primary metric `{primary}` ({direction}), final evaluation after training; one value per seed.",
        "",
        "| method | seeds | mean | IQM | 95 % CI | per seed |",
        "|---|---|---|---|---|---|",
    ]
    intervals, scores = {}, {}
    for name in names:
        runs = methods[name]
        values = ctx.scores(runs, primary)
        scores[name] = (values, lower)
        ci = intervals[name] = ctx.ci(values)
        per_seed = ", ".join(
            f"s{layout.read_tag(r.tags, layout.SEED)}: {fmt(v)}" for r, v in zip(runs, values, strict=True)
        )
        lines.append(
            f"| {name} | {len(runs)} | {fmt(ci.point)} | {fmt(stats.finite_iqm(values))} | "
            f"[{fmt(ci.low)}, {fmt(ci.high)}] | {per_seed} |"
        )
    lines.append("")
    enough = len(names) >= 2 and all(sum(math.isfinite(v) for v in scores[n][0]) >= 2 for n in names)
    winner = stats.separated_winner(intervals, lower_is_better=lower) if enough else None
    if winner:
        lines.append(f"**Winner: {winner}** — its 95 % CI is separated from every other method's.")
    elif not enough:
        lines.append("No winner named: it needs at least 2 methods with 2+ seeds each.")
    else:
        # Overlapping intervals of the means do not make two methods alike (a run-by-run
        # comparison can still resolve them), so the line points at the table that compares.
        line = "No winner: no method's 95 % CI is separated from every other's."
        if BASELINE in scores:
            line += (
                " Overlapping intervals can still hide a difference: the probability of improvement"
                f" below compares each method with `{BASELINE}` run by run."
            )
        lines.append(line)
    lines.append("")
    lines += _eval_table(ctx, methods, names, info)
    lines += _poi_table(ctx, scores, names)
    panels = curve_panels(ctx, methods, names, info)
    if panels:
        path = figures.curves(task, model, panels)
        lines += [f"![learning curves {task} {model}]({path.name})", ""]
    else:
        lines += ["No learning curves were logged for this cell.", ""]
    return lines, scores


def _eval_table(
    ctx: ReportContext, methods: dict[str, list[RunRecord]], names: list[str], info: TaskInfo
) -> list[str]:
    """Every eval metric (primary first): mean [95 % CI] per method; nothing when only the primary
    metric was logged."""
    metrics = sorted(
        {
            layout.strip_prefix(layout.EVAL, k)
            for n in names
            for r in methods[n]
            for k in r.metrics
            if k.startswith(layout.EVAL)
        },
        key=lambda m: (m != info.primary, layout.is_count_metric(m), m),
    )
    if len(metrics) <= 1:
        return []
    shown = {}
    for name in names:
        for metric in metrics:
            values = ctx.scores(methods[name], metric)
            if layout.is_count_metric(metric):  # a count, not a score: no interval, no direction
                shown[(name, metric)] = fmt_count(values)
            else:
                ci = ctx.ci(values)
                shown[(name, metric)] = f"{fmt(ci.point)} [{fmt(ci.low)}, {fmt(ci.high)}]"
    arrow = {
        m: m if layout.is_count_metric(m) else f"{m} {'↓' if m in info.lower_is_better else '↑'}"
        for m in metrics
    }
    counts = [m for m in metrics if layout.is_count_metric(m)]
    note = (
        f" Counts ({', '.join(counts)}) are shown as the integer per run (a range where runs differ)."
        if counts
        else ""
    )
    lines = [f"All eval metrics: mean [95 % CI] over seeds.{note}", ""]
    if len(metrics) > len(names):  # many metrics, few methods: one row per metric stays readable
        lines += ["| metric | " + " | ".join(names) + " |", "|" + "---|" * (len(names) + 1)]
        lines += [f"| {arrow[m]} | " + " | ".join(shown[(n, m)] for n in names) + " |" for m in metrics]
    else:
        lines += [
            "| method | " + " | ".join(arrow[m] for m in metrics) + " |",
            "|" + "---|" * (len(metrics) + 1),
        ]
        lines += [f"| {n} | " + " | ".join(shown[(n, m)] for m in metrics) + " |" for n in names]
    return [*lines, ""]


def _poi_table(ctx: ReportContext, scores: Scores, names: list[str]) -> list[str]:
    """P(method > baseline) on the primary metric of one task × model, per method."""
    if BASELINE not in scores or len(names) < 2:
        return []
    base, lower = scores[BASELINE]
    sign = -1.0 if lower else 1.0
    lines = [
        f"Probability of improvement over `{BASELINE}` on the primary metric (0.5 = no difference):",
        "",
        f"| method | P(method > {BASELINE}) | 95 % CI |",
        "|---|---|---|",
    ]
    y = np.array([v for v in base if math.isfinite(v)]) * sign
    for name in names:
        if name == BASELINE:
            continue
        x = np.array([v for v in scores[name][0] if math.isfinite(v)]) * sign
        if not len(x) or not len(y):
            continue
        p = ctx.poi(x, y)
        lines.append(f"| {name} | {fmt(p.point)} | [{fmt(p.low)}, {fmt(p.high)}] |")
    return [*lines, ""]


def overall_poi(ctx: ReportContext, all_scores: dict[tuple[str, str], Scores]) -> list[str]:
    """P(method > baseline) over every task × model where both ran, each cell one stratum."""
    columns = [s for s in all_scores.values() if BASELINE in s]
    if not columns or len(ctx.methods) < 2:
        return []
    lines = [
        f"## Probability of improvement over {BASELINE}, all tasks and models",
        "",
        "Each task × model is one stratum (seeds resampled within it); lower-is-better metrics are negated.",
        "",
        f"| method | cells | P(method > {BASELINE}) | 95 % CI |",
        "|---|---|---|---|",
    ]
    for name in ctx.methods:
        if name == BASELINE:
            continue
        xs, ys = [], []
        for s in columns:
            if name not in s:
                continue
            sign = -1.0 if s[name][1] else 1.0
            x = [v * sign for v in s[name][0] if math.isfinite(v)]
            y = [v * sign for v in s[BASELINE][0] if math.isfinite(v)]
            if x and y:
                xs.append(x)
                ys.append(y)
        if not xs:
            continue
        p = ctx.poi(stats.padded(xs), stats.padded(ys))
        lines.append(f"| {name} | {len(xs)} | {fmt(p.point)} | [{fmt(p.low)}, {fmt(p.high)}] |")
    return [*lines, ""]
