"""``## Model-size scaling``: the primary metric against parameter count, per task and method.

Only tasks that ran on two or more models get a table (model × method, mean [95 % CI] over seeds)
and a figure (metric against parameter count on a log axis). A model's size is the ``n_params``
param its cells log (:data:`mrbench.core.layout.PARAM_N_PARAMS`); a model whose runs do not log it
(older runs) stays in the table with its size shown as unknown and is left out of the figure.
"""

from __future__ import annotations

import math

from mrbench.core import layout
from mrbench.reporting.context import ReportContext
from mrbench.reporting.figures import FigureQueue
from mrbench.reporting.plots import ScalingSeries
from mrbench.reporting.render import fmt


def model_size(ctx: ReportContext, task: str, model: str) -> int | None:
    """The parameter count of ``model`` as its cells of ``task`` logged it (None when none did)."""
    for runs in ctx.sel.cells.get((task, model), {}).values():
        for run in runs:
            value = run.params.get(layout.PARAM_N_PARAMS)
            if value and value.isdigit():
                return int(value)
    return None


def human_size(n: int | None) -> str:
    """A parameter count as people say it.

    >>> human_size(561_000), human_size(32_500_000), human_size(7_615_616_512), human_size(None)
    ('561K', '32.5M', '7.62B', 'unknown')
    """
    if n is None:
        return "unknown"
    for unit, scale in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g}{unit}"
    return str(n)


def scaling_section(ctx: ReportContext, figures: FigureQueue) -> list[str]:
    """The section (nothing when no task ran on more than one model)."""
    tasks = [t for t in ctx.tasks if len(ctx.models_for(t)) > 1]
    if not tasks:
        return []
    lines = [
        "## Model-size scaling",
        "",
        "Per task run on several models: the primary metric after training against the policy's "
        "parameter count, mean [95 % CI] over seeds per method.",
        "",
    ]
    for task in tasks:
        lines += _task(ctx, figures, task)
    return lines


def _task(ctx: ReportContext, figures: FigureQueue, task: str) -> list[str]:
    info = ctx.task_info[task]
    sizes = {m: model_size(ctx, task, m) for m in ctx.models_for(task)}
    # Smallest first; models of unknown size keep the sweep's order after them.
    models = sorted(sizes, key=lambda m: (sizes[m] is None, sizes[m] or 0))
    methods = [n for n in ctx.methods if any(n in ctx.sel.cells.get((task, m), {}) for m in models)]
    direction = "lower is better" if info.primary_lower_is_better else "higher is better"
    lines = [
        f"**{task}** — `{info.primary}` ({direction}):",
        "",
        "| model | parameters | " + " | ".join(methods) + " |",
        "|" + "---|" * (len(methods) + 2),
    ]
    series: dict[str, ScalingSeries] = {n: ScalingSeries([], [], [], []) for n in methods}
    for model in models:
        cells = []
        for name in methods:
            runs = ctx.sel.cells.get((task, model), {}).get(name, [])
            if not runs:
                cells.append("–")
                continue
            ci = ctx.ci(ctx.scores(runs, info.primary))
            cells.append(f"{fmt(ci.point)} [{fmt(ci.low)}, {fmt(ci.high)}]")
            size = sizes[model]
            if size is not None and math.isfinite(ci.point):
                s = series[name]
                s.n_params.append(float(size))
                s.mean.append(ci.point)
                s.low.append(ci.low if math.isfinite(ci.low) else ci.point)
                s.high.append(ci.high if math.isfinite(ci.high) else ci.point)
        lines.append(f"| {model} | {human_size(sizes[model])} | " + " | ".join(cells) + " |")
    lines.append("")
    drawable = {n: s for n, s in series.items() if len(s.n_params) >= 2}
    if drawable:
        ticks = {float(s): f"{m}\n{human_size(s)}" for m, s in sizes.items() if s is not None}
        path = figures.scaling(task, drawable, info.primary, ticks)
        lines += [f"![model-size scaling {task}]({path.name})", ""]
    else:
        lines += ["No figure: fewer than two models with a logged parameter count.", ""]
    return lines
