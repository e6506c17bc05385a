"""Markdown of the extra evaluations (a sweep's ``eval`` key; :mod:`mrbench.engine.evaluation.extra_evals`).

Per task × model, one table: a row per extra dataset and metric (the task's primary metric first),
the model before training (one value: every method and seed starts from it), then per method the
IQM over seeds and the mean with its 95 % bootstrap CI, as the other result tables. Cells whose
policy was not evaluated (no saved checkpoint) are listed with the reason. Nothing when no cell of
the sweep has extra evaluations.
"""

from __future__ import annotations

import math

from mrbench.core import layout
from mrbench.reporting import stats
from mrbench.reporting.context import ReportContext
from mrbench.reporting.render import fmt, fmt_count
from mrbench.reporting.select import TaskInfo
from mrbench.store.reader import RunRecord


def extra_datasets(runs: list[RunRecord]) -> dict[str, set[str]]:
    """``{dataset: metrics}`` of the extra evaluations logged by ``runs``.

    >>> run = RunRecord("r", "FINISHED", 0, None, "", metrics={"eval_extra/humaneval/pass_at_1": 0.1})
    >>> extra_datasets([run])
    {'humaneval': {'pass_at_1'}}
    """
    out: dict[str, set[str]] = {}
    for run in runs:
        for key in run.metrics:
            split = layout.split_extra_eval_metric(key)
            if split is not None:
                out.setdefault(split[0], set()).add(split[1])
    return out


def extra_evals_section(ctx: ReportContext) -> list[str]:
    """``## Extra evaluations`` with one table per task × model that has any; ``[]`` without any."""
    body: list[str] = []
    for task in ctx.tasks:
        for model in ctx.models_for(task):
            body += _cell_table(ctx, task, model)
    if not body:
        return []
    return [
        "## Extra evaluations",
        "",
        "The trained policy of every cell evaluated on the extra datasets of the sweep's `eval` setting "
        "(as `mrbench eval --model run:<run id> --dataset <dataset>` would); *before*: the model before "
        "training, the same for every method and seed. Per method: IQM over seeds · mean [95 % CI].",
        "",
        *body,
    ]


def _cell_table(ctx: ReportContext, task: str, model: str) -> list[str]:
    methods = ctx.sel.cells.get((task, model), {})
    names = [m for m in ctx.methods if m in methods]
    runs = [r for n in names for r in methods[n]]
    datasets, skipped = extra_datasets(runs), _skipped(runs)
    if not datasets and not skipped:
        return []
    info = ctx.task_info[task]
    lines = [f"### {task} · {model} (extra datasets)", ""]
    if datasets:
        lines += [
            "| dataset | metric | before | " + " | ".join(names) + " |",
            "|" + "---|" * (len(names) + 3),
        ]
    for dataset in sorted(datasets):
        order = sorted(datasets[dataset], key=lambda m: (m != info.primary, layout.is_count_metric(m), m))
        for metric in order:
            key = layout.extra_eval_metric(dataset, metric)
            before = [r.metrics.get(layout.extra_eval_before_metric(dataset, metric), math.nan) for r in runs]
            shown = [_shown(ctx, [r.metrics.get(key, math.nan) for r in methods[n]], metric) for n in names]
            row = [dataset, _arrow(metric, info), _before(before, metric), *shown]
            lines.append("| " + " | ".join(row) + " |")
    return [*lines, "", *skipped, *([""] if skipped else [])]


def _arrow(metric: str, info: TaskInfo) -> str:
    if layout.is_count_metric(metric):
        return metric
    return f"{metric} {'↓' if metric in info.lower_is_better else '↑'}"


def _before(values: list[float], metric: str) -> str:
    """The pre-training value: one number (its runs agree), or the range where they differ."""
    if layout.is_count_metric(metric):
        return fmt_count(values)
    finite = sorted(v for v in values if math.isfinite(v))
    if not finite:
        return "–"
    return fmt(finite[0]) if finite[-1] - finite[0] < 1e-9 else f"{fmt(finite[0])}–{fmt(finite[-1])}"


def _shown(ctx: ReportContext, values: list[float], metric: str) -> str:
    if layout.is_count_metric(metric):  # a count, not a score: no interval
        return fmt_count(values)
    ci = ctx.ci(values)
    return f"{fmt(stats.finite_iqm(values))} · {fmt(ci.point)} [{fmt(ci.low)}, {fmt(ci.high)}]"


def _skipped(runs: list[RunRecord]) -> list[str]:
    """One line per (dataset, reason): how many cells' policies were not evaluated on it, and why."""
    prefix = layout.tag(layout.EVAL_EXTRA_SKIPPED)
    reasons: dict[tuple[str, str], int] = {}
    for run in runs:
        evaluated = extra_datasets([run])
        for key, reason in run.tags.items():
            dataset = key.removeprefix(prefix)
            if key.startswith(prefix) and dataset not in evaluated:  # a later invocation may have done it
                reasons[(dataset, reason)] = reasons.get((dataset, reason), 0) + 1
    return [f"- not evaluated on {d}: {n} cell(s), {reason}" for (d, reason), n in sorted(reasons.items())]
