"""Markdown of the report's findings, right under its header: per task, the methods ranked by the
primary metric, each compared with the baseline in words — the probability of improvement with
its interval, resolved or not — and how many seeds a difference of the observed size would need
(:func:`mrbench.reporting.power.seeds_needed`).

A task that ran on several models is one comparison with each model a stratum (seeds resampled
within it), as in the report's overall probability of improvement; its ranking is by the mean over
models of the per-model means. Lower-is-better metrics are negated for the comparison, so ``>``
always reads "beats". Count metrics (``n_…``, :func:`mrbench.core.layout.is_count_metric`) are
never ranked.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from mrbench.core import layout
from mrbench.reporting import power, predicted, stats
from mrbench.reporting.context import ReportContext
from mrbench.reporting.predicted import Prediction
from mrbench.reporting.render import fmt
from mrbench.reporting.select import BASELINE


@dataclass(frozen=True)
class Comparison:
    """One method against the baseline on one task (all models both ran on)."""

    p: stats.Interval  # P(run of the method beats a run of the baseline), with its CI; "beats" = better
    seeds: int  # fewest finite seeds of either method in any of the task's models
    diff: float  # mean difference method − baseline in the metric's own units (mean over models)
    spread: float  # pooled per-seed standard deviation (NaN with one seed)
    strata: int  # the models both ran on (each a stratum)


def verdict(method: str, cmp: Comparison) -> str:
    """The comparison in words.

    >>> verdict("corrgrpo", Comparison(stats.Interval(0.78, 0.56, 0.94), 3, 0.1, 0.1, 1))
    'corrgrpo > grpo: P = 0.78 [0.56, 0.94]'
    >>> verdict("gdpo", Comparison(stats.Interval(0.6, 0.3, 0.9), 3, 0.1, 0.1, 1))
    'not resolved with 3 seeds: the interval includes 0.5 (P = 0.60 [0.30, 0.90])'
    """
    p = f"P = {cmp.p.point:.2f} [{cmp.p.low:.2f}, {cmp.p.high:.2f}]"
    if cmp.seeds < 2:
        return f"not resolved with 1 seed: one seed has no spread to resample ({p})"
    if cmp.p.low > 0.5:
        return f"{method} > {BASELINE}: {p}"
    if cmp.p.high < 0.5:
        return f"{method} < {BASELINE}: {p}"
    return f"not resolved with {cmp.seeds} seeds: the interval includes 0.5 ({p})"


def seeds_for_power(cmp: Comparison, seed: int = stats.DEFAULT_SEED) -> str:
    """Seeds per method a difference of this size needs (``≥ 50`` beyond the grid; ``–`` when one
    seed leaves the spread unknown).

    >>> seeds_for_power(Comparison(stats.Interval(0.5, 0.5, 0.5), 1, 0.1, math.nan, 1))
    '–'
    """
    if not math.isfinite(cmp.spread):
        return "–"
    n = power.seeds_needed(cmp.diff, cmp.spread, strata=cmp.strata, seed=seed)
    return f"≥ {power.POWER_GRID[-1]}" if n is None else str(n)


def compare(ctx: ReportContext, task: str, method: str) -> Comparison | None:
    """``method`` against the baseline on ``task``'s primary metric over the models both ran on
    (None when they share none with a finite score)."""
    info = ctx.task_info[task]
    sign = -1.0 if info.primary_lower_is_better else 1.0
    xs, ys = [], []
    for model in ctx.models_for(task):
        cell = ctx.sel.cells[(task, model)]
        if method not in cell or BASELINE not in cell:
            continue
        x = [v for v in ctx.scores(cell[method], info.primary) if math.isfinite(v)]
        y = [v for v in ctx.scores(cell[BASELINE], info.primary) if math.isfinite(v)]
        if x and y:
            xs.append(x)
            ys.append(y)
    if not xs:
        return None
    p = ctx.poi(sign * stats.padded(xs), sign * stats.padded(ys))
    diff = stats.nanmean([stats.nanmean(x) - stats.nanmean(y) for x, y in zip(xs, ys, strict=True)])
    seeds = min(min(len(x), len(y)) for x, y in zip(xs, ys, strict=True))
    return Comparison(p, seeds, diff, power.pooled_spread(xs + ys), len(xs))


def ranking(ctx: ReportContext, task: str) -> list[tuple[str, float]]:
    """``(method, mean)`` of ``task``'s primary metric, best first: the mean over models of each
    model's mean over seeds; methods without a finite score last, in report order."""
    info = ctx.task_info[task]
    means = []
    for name in ctx.methods:
        per_model = [
            stats.nanmean(ctx.scores(ctx.sel.cells[(task, m)][name], info.primary))
            for m in ctx.models_for(task)
            if name in ctx.sel.cells[(task, m)]
        ]
        if per_model:
            means.append((name, stats.nanmean(per_model)))
    sign = 1.0 if info.primary_lower_is_better else -1.0

    def key(item: tuple[str, float]) -> tuple[bool, float]:
        finite = math.isfinite(item[1])
        return (not finite, sign * item[1] if finite else 0.0)

    return sorted(means, key=key)  # stable: equal means keep the report's method order


def _signed(x: float) -> str:
    return "–" if not math.isfinite(x) else f"{x:+.3f}" if abs(x) < 1000 else f"{x:+.4g}"


def task_findings(ctx: ReportContext, task: str) -> list[str]:
    """The ranked table of one task."""
    info = ctx.task_info[task]
    if layout.is_count_metric(info.primary):
        return [
            f"**{task}**: its primary metric `{info.primary}` is a count; methods are not ranked by it.",
            "",
        ]
    models = ctx.models_for(task)
    direction = "lower is better" if info.primary_lower_is_better else "higher is better"
    where = f"{len(models)} models (mean of the per-model means)" if len(models) > 1 else models[0]
    ranked = ranking(ctx, task)
    has_baseline = any(name == BASELINE for name, _ in ranked)
    lines = [f"**{task}** · {where} — `{info.primary}` ({direction}):", ""]
    if not has_baseline:
        lines += [f"No `{BASELINE}` runs on this task: ranking only.", ""]
        lines += ["| rank | method | mean |", "|---|---|---|"]
        lines += [f"| {i} | {name} | {fmt(mean)} |" for i, (name, mean) in enumerate(ranked, 1)]
        return [*lines, ""]
    lines += [
        f"| rank | method | mean | Δ vs {BASELINE} | compared with {BASELINE} | seeds for 80 % power |",
        "|---|---|---|---|---|---|",
    ]
    for i, (name, mean) in enumerate(ranked, 1):
        cmp = compare(ctx, task, name) if name != BASELINE else None
        if name == BASELINE:
            row = ["–", "baseline", "–"]
        elif cmp is None:
            row = ["–", f"no model shared with {BASELINE}", "–"]
        else:
            row = [_signed(cmp.diff), verdict(name, cmp), seeds_for_power(cmp, ctx.seed)]
        lines.append(f"| {i} | {name} | {fmt(mean)} | " + " | ".join(row) + " |")
    return [*lines, ""]


def findings(ctx: ReportContext, predictions: Mapping[str, Prediction] | None = None) -> list[str]:
    """The ``## Findings`` section (nothing when no run finished); with ``predictions`` (task → the lab
    on that task's fitted rewards), each task's table is followed by what the lab predicts for its
    rewards (:func:`mrbench.reporting.predicted.task_lines`)."""
    if not ctx.sel.cells:
        return []
    grid = ", ".join(map(str, power.POWER_GRID))
    lines = [
        "## Findings",
        "",
        f"Per task, the methods ranked by the primary metric, each compared with `{BASELINE}` by the "
        f"probability of improvement P = P(a run of the method beats a run of `{BASELINE}`; ties ½) with "
        "its 95 % bootstrap CI. A comparison is resolved only when the interval excludes 0.5; `>` reads "
        '"beats" (for a lower-is-better metric: lower). A task\'s models are strata (seeds resampled within '
        "each). *Seeds for 80 % power*: the fewest seeds per method and model (of "
        f"{grid}) at which a difference of the observed size, with the observed seed-to-seed spread, gives "
        "an interval away from 0.5 in at least 80 % of simulated sweeps (normal seeds, "
        f"{power.SIMULATED_SWEEPS} sweeps × {power.POWER_REPS} resamples, numpy seed {ctx.seed}). Count "
        "metrics (`n_…`) are never ranked.",
        "",
    ]
    for task in ctx.tasks:
        lines += task_findings(ctx, task)
        if predictions and task in predictions:
            measured = {
                m: predicted.Measured(c.p, c.seeds, seeds_for_power(c, ctx.seed))
                for m in ctx.methods
                if m != BASELINE and (c := compare(ctx, task, m)) is not None
            }
            lines += predicted.task_lines(ctx, task, predictions[task], measured)
    return lines
