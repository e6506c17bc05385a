"""Shadow estimators in the "why methods differ" section: how the other advantage estimators would
have judged the batches each run trained on.

On every diagnosed batch the trainer also computes the other registered methods' advantages on
the same rewards ("shadows") and compares each with the method in use: sign agreement (the
fraction of rollouts both push the same way), rank correlation (Spearman, within groups) and
resolution (distinct advantages per distinct reward vector; GRPO maps vectors with equal totals
to one advantage). They are per-step metrics (``adv/resolution``,
``adv/shadow/<method>/<stat>``, :mod:`mrbench.core.layout`) whose run means the trainer also
writes into ``diagnostics.json``.

Per task, :func:`shadow_table` averages each method's runs (a run's mean over steps, then the
mean over runs) and :func:`shadow_lines` writes it: a ``grpo`` row says how GDPO and CorrGRPO
would have ranked GRPO's own rollouts. Runs from before the shadows existed add nothing; a task
with none gets no table.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from mrbench.core import layout
from mrbench.core.records import as_nan
from mrbench.reporting import stats
from mrbench.reporting.context import ReportContext
from mrbench.reporting.render import fmt
from mrbench.reporting.select import ordered
from mrbench.store.reader import RunRecord

SHADOW_INTRO = (
    "Shadow estimators: on every diagnosed batch the other methods' advantages are computed on the same "
    "rewards and compared with the method in use — sign agreement (fraction of rollouts both push the "
    "same way), rank correlation (Spearman, within groups) and resolution (distinct advantages per "
    "distinct reward vector; GRPO gives reward vectors with equal totals one advantage). So a `grpo` "
    "row also says how the other estimators would have ranked GRPO's own rollouts."
)
"""The paragraph that introduces the shadow tables (written only when some run logged shadows)."""

Stats = tuple[float, ...]
"""Sign agreement, rank correlation and resolution (the order of ``layout.SHADOW_STATS``)."""


@dataclass
class ShadowTable:
    """One task's shadow comparisons, per method label in use (NaN where undefined)."""

    own: dict[str, float]  # method in use → its mean resolution
    compared: dict[str, dict[str, Stats]]  # method in use → shadow method → mean stats
    shadows: list[str]  # the shadow methods, in the report's method order


def _curve_mean(history: tuple[np.ndarray, np.ndarray] | None) -> float:
    return math.nan if history is None else stats.nanmean(history[1].tolist())


def run_shadows(ctx: ReportContext, run: RunRecord) -> tuple[float, dict[str, list[float]]]:
    """``(own resolution, {shadow: [sign_agree, rank_corr, resolution]})`` of one run, each its mean
    over steps: from ``diagnostics.json``, else from the logged per-step metrics (which
    :func:`mrbench.reporting.context.load_context` reads only for such runs); ``(NaN, {})`` for a run
    without any."""
    diag = ctx.diagnostics.get(run.run_id)
    if diag is not None and diag.shadow is not None:
        return as_nan(diag.resolution), {name: means.stats() for name, means in diag.shadow.items()}
    curves = ctx.histories.get(run.run_id, {})
    compared: dict[str, list[float]] = {}
    for key, history in curves.items():
        if not key.startswith(layout.ADV_SHADOW):
            continue
        name, _, stat = layout.strip_prefix(layout.ADV_SHADOW, key).rpartition("/")
        if stat in layout.SHADOW_STATS:
            row = compared.setdefault(name, [math.nan] * len(layout.SHADOW_STATS))
            row[layout.SHADOW_STATS.index(stat)] = _curve_mean(history)
    return _curve_mean(curves.get(layout.ADV_RESOLUTION)), compared


def shadow_table(ctx: ReportContext, task: str) -> ShadowTable | None:
    """Each method's runs of ``task`` (all models) averaged; None when no run logged shadows."""
    own: dict[str, float] = {}
    compared: dict[str, dict[str, Stats]] = {}
    for name in ctx.methods:
        runs = [r for m in ctx.models_for(task) for r in ctx.sel.cells[(task, m)].get(name, [])]
        resolutions: list[float] = []
        per_shadow: dict[str, list[list[float]]] = {}
        for run in runs:
            resolution, shadows = run_shadows(ctx, run)
            resolutions.append(resolution)
            for shadow, values in shadows.items():
                per_shadow.setdefault(shadow, []).append(values)
        if per_shadow or any(math.isfinite(v) for v in resolutions):
            own[name] = stats.nanmean(resolutions)
            compared[name] = {
                shadow: tuple(stats.nanmean(column) for column in zip(*rows, strict=True))
                for shadow, rows in per_shadow.items()
            }
    if not own:
        return None
    names = {shadow for per in compared.values() for shadow in per}
    preferred = [label.partition("(")[0] for label in ctx.methods]  # a label's base method name
    return ShadowTable(own, compared, ordered(names, preferred))


def shadow_lines(ctx: ReportContext, task: str) -> list[str]:
    """The table of one task: a row per method in use, its own resolution, then per shadow method
    ``sign agreement / rank correlation / resolution``; nothing when no run logged shadows."""
    table = shadow_table(ctx, task)
    if table is None:
        return []
    lines = [
        f"`{task}`, shadow estimators (mean over steps, then runs): per shadow method, sign agreement / "
        "rank correlation / resolution on the batches of the method in use.",
        "",
        "| method in use | own resolution | " + " | ".join(table.shadows) + " |",
        "|" + "---|" * (len(table.shadows) + 2),
    ]
    for name, resolution in table.own.items():
        cells = [
            " / ".join(fmt(v) for v in table.compared[name][shadow])
            if shadow in table.compared[name]
            else "–"
            for shadow in table.shadows
        ]
        lines.append(f"| {name} | {fmt(resolution)} | " + " | ".join(cells) + " |")
    return [*lines, ""]
