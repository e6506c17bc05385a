"""The paper's tables: per domain, methods × models on its headline metrics (``paper`` sweeps).

The paper reports code generation as pass@1 on each benchmark and their average, tool calling as
exact match ("all-exact" / accuracy) on each benchmark, and agent security as joint success,
attack success rate (ASR) and utility. :func:`paper_tables` lays a sweep's results out the same
way, one table per task: a row per model with the model before training, then a row per method
with the mean over seeds of its trained policies; a column per benchmark and metric, the cell's
own evaluation first (named by its ``eval_dataset``, else its ``dataset``), then the sweep's extra
evaluations (its ``eval`` setting, :mod:`mrbench.reporting.extra_evals`), and for code the average.
A stand-in model of a rehearsal (``standin:<model>``) is shown as the model it stands for,
marked *stand-in*.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from mrbench.core import layout
from mrbench.core.standin import is_standin, stood_for
from mrbench.reporting.context import ReportContext
from mrbench.reporting.extra_evals import extra_datasets
from mrbench.reporting.render import fmt
from mrbench.store.reader import RunRecord


@dataclass(frozen=True)
class Headline:
    """A domain's headline metrics as the paper names them, and whether it averages its benchmarks."""

    title: str
    metrics: tuple[tuple[str, str], ...]
    """(metric name in mrbench, column name in the paper)."""
    average: str = ""
    """Column of the mean over benchmarks of the first metric ("" for none)."""


HEADLINES: dict[str, Headline] = {
    "code-generation": Headline("Code generation", (("sampled_pass_at_1", "pass@1"),), "avg pass@1"),
    "tool-calling": Headline("Tool calling", (("exact_match", "all-exact"),)),
    "agent-security": Headline(
        "Agent security", (("joint", "joint"), ("asr", "ASR ↓"), ("utility", "utility"))
    ),
}


def is_paper_sweep(ctx: ReportContext) -> bool:
    """Whether the sweep ran the ``paper`` preset (or its rehearsal)."""
    record = ctx.sweep_record
    return record is not None and record.config.get("preset") == "paper"


def paper_tables(ctx: ReportContext) -> list[str]:
    """``## The paper's tables`` for a ``paper`` sweep with a task of :data:`HEADLINES`; else ``[]``."""
    tasks = [t for t in ctx.tasks if t in HEADLINES]
    if not is_paper_sweep(ctx) or not tasks:
        return []
    lines = [
        "## The paper's tables",
        "",
        "Per domain as the paper lays it out: methods × models on its headline metrics, per benchmark "
        "(the cell's own evaluation first, then the extra evaluations). *before*: the model before "
        "training; a method: the mean over seeds of its trained policies.",
        "",
    ]
    if any(is_standin(m) for t in tasks for m in ctx.models_for(t)):
        lines += [
            "**Rehearsal**: the models are small random *stand-ins* of the named models' families and "
            "trained for a few steps, so these numbers test the pipeline, not the methods.",
            "",
        ]
    for task in tasks:
        lines += task_table(ctx, task)
    return lines


def _own_dataset(runs: list[RunRecord]) -> str:
    """The benchmark of the cells' own evaluation: their ``eval_dataset``, else ``dataset``."""
    for run in runs:
        for key in ("eval_dataset", "dataset"):
            value = run.params.get(layout.TASK_PARAM + key)
            if value:
                return value
    return "own eval"


def _mean(values: list[float]) -> float:
    finite = [v for v in values if math.isfinite(v)]
    return sum(finite) / len(finite) if finite else math.nan


def model_label(model: str) -> str:
    """``model`` as the table names it (a stand-in by the model it stands for).

    >>> model_label("standin:Qwen/Qwen3-8B"), model_label("tiny")
    ('Qwen/Qwen3-8B (stand-in)', 'tiny')
    """
    return f"{stood_for(model)} (stand-in)" if is_standin(model) else model


def task_table(ctx: ReportContext, task: str) -> list[str]:
    """The table of one task (see the module docstring)."""
    headline = HEADLINES[task]
    models = ctx.models_for(task)
    every = [r for m in models for runs in ctx.sel.cells.get((task, m), {}).values() for r in runs]
    own = _own_dataset(every)
    datasets = [own, *sorted(d for d in extra_datasets(every) if d != own)]
    columns = [(d, metric, f"{d} {name}") for d in datasets for metric, name in headline.metrics]
    header = ["model", "method", *(c[2] for c in columns)] + ([headline.average] if headline.average else [])
    lines = [f"### {headline.title}", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]

    def value(run: RunRecord, dataset: str, metric: str, before: bool) -> float:
        if dataset == own:
            key = layout.eval_before_metric(metric) if before else layout.eval_metric(metric)
        elif before:
            key = layout.extra_eval_before_metric(dataset, metric)
        else:
            key = layout.extra_eval_metric(dataset, metric)
        return run.metrics.get(key, math.nan)

    def row(runs: list[RunRecord], label: str, method: str, before: bool) -> str:
        cells = [_mean([value(r, d, m, before) for r in runs]) for d, m, _ in columns]
        if headline.average:
            first = headline.metrics[0][0]
            cells.append(_mean([_mean([value(r, d, first, before) for r in runs]) for d in datasets]))
        return "| " + " | ".join([label, method, *map(fmt, cells)]) + " |"

    for model in models:
        per_method = ctx.sel.cells.get((task, model), {})
        names = [m for m in ctx.methods if m in per_method]
        runs = [r for n in names for r in per_method[n]]
        lines.append(row(runs, model_label(model), "*before*", True))
        lines += [row(per_method[n], "", n, False) for n in names]
    return [*lines, ""]
