"""What the lab predicts for each task's own rewards, beside what the task's cells measured.

Once a sweep's cells are done, its lab step fits a scenario to every task's cells' rewards
(``mrbench simulate --like sweep:<name>``; :func:`mrbench.lab.in_sweep.plan_like`) and simulates it
with the sweep's methods: a lab run tagged ``like_task`` in experiment
``lab-like-<sweep>-<task>`` (:func:`mrbench.core.layout.like_scenario`). This module reads it back
and compares, per method against ``grpo``: the lab's P(> grpo) on the normalised objective with
the seeds it needs to resolve a difference of that size, and the cells' P on the primary metric
with their seeds for power (:mod:`mrbench.reporting.findings`). The two measure different things
(the lab: the expected training reward of a simulated policy; the cells: a held-out metric of a
language model), so they are compared by verdict only: resolved higher, resolved lower, or not
resolved. One sentence per task says whether they agree and, when not, what that means.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from mrbench.core import layout
from mrbench.core.records import LabRecord
from mrbench.reporting import power, stats
from mrbench.reporting.context import ReportContext
from mrbench.store.reader import Reader

REFERENCE = "grpo"
OBJECTIVE = "objective"


@dataclass(frozen=True)
class Prediction:
    """The lab on one task's fitted scenario: its run id and ``lab.json``."""

    task: str
    run_id: str
    record: LabRecord

    def scores(self, method: str) -> np.ndarray:
        """``[S]`` per-seed normalised objective of ``method``."""
        return np.asarray(self.record.methods[method].seed_scores(OBJECTIVE), dtype=float)


def read_predictions(ctx: ReportContext, reader: Reader) -> dict[str, Prediction]:
    """Task → the latest FINISHED lab run of this sweep on that task's fitted scenario."""
    found = {}
    for task in ctx.tasks:
        experiment = reader.experiment_id(layout.lab_experiment(layout.like_scenario(ctx.sweep, task)))
        runs = [
            r
            for r in (reader.runs(experiment) if experiment is not None else [])
            if r.status == "FINISHED"
            and layout.read_tag(r.tags, layout.SWEEP) == ctx.sweep
            and layout.read_tag(r.tags, layout.LIKE_TASK) == task
        ]
        latest = max(runs, key=lambda r: (r.end_time or 0, r.start_time, r.run_id), default=None)
        if latest is None:
            continue
        layout.check_readable(latest.tags, f"lab run {latest.run_id} (fitted to {task})")
        data = reader.read_json_artifact(latest, layout.LAB_ARTIFACT)
        if data is None:
            continue
        record = LabRecord.from_json(data, f"{layout.LAB_ARTIFACT} of lab run {latest.run_id}")
        if REFERENCE in record.methods:
            found[task] = Prediction(task, latest.run_id, record)
    return found


@dataclass(frozen=True)
class Measured:
    """What the cells measured for one method against grpo (:func:`mrbench.reporting.findings.compare`):
    P(> grpo) on the primary metric, the seeds it rests on and the seeds for 80 % power."""

    p: stats.Interval
    seeds: int
    seeds_for_power: str


@dataclass(frozen=True)
class Predicted:
    """The lab's comparison of one method with grpo: P(> grpo) on the objective, its direction
    (+1, −1, 0 unresolved) and the seeds per method a difference of this size needs (None: more than
    the power grid's largest)."""

    p: stats.Interval
    direction: int
    seeds: int | None


def predict(ctx: ReportContext, prediction: Prediction, method: str) -> Predicted | None:
    """``method`` against grpo in the lab (None when the lab run lacks it)."""
    if method not in prediction.record.methods:
        return None
    x, y = prediction.scores(method), prediction.scores(REFERENCE)
    p = ctx.poi(x, y)
    diff = float(np.nanmean(x) - np.nanmean(y))
    seeds = power.seeds_needed(diff, power.pooled_spread([x.tolist(), y.tolist()]), seed=ctx.seed)
    return Predicted(p, _direction(p), seeds)


def _direction(p: stats.Interval) -> int:
    if not (math.isfinite(p.low) and math.isfinite(p.high)):
        return 0
    return 1 if p.low > 0.5 else -1 if p.high < 0.5 else 0


def _p(p: stats.Interval) -> str:
    return f"{p.point:.2f} [{p.low:.2f}, {p.high:.2f}]"


def _seeds(n: int | None) -> str:
    return f"≥ {power.POWER_GRID[-1]}" if n is None else str(n)


def task_lines(
    ctx: ReportContext, task: str, prediction: Prediction, measured_by: Mapping[str, Measured]
) -> list[str]:
    """The predicted-vs-measured table of one task and its sentence; ``measured_by``: method → what
    the cells measured."""
    record = prediction.record
    rows, agree, differ = [], [], []
    for method, cells in measured_by.items():
        if method == REFERENCE:
            continue
        lab = predict(ctx, prediction, method)
        if lab is None:
            continue
        measured = _direction(cells.p) if cells.seeds >= 2 else 0
        rows.append(
            f"| {method} | {_p(lab.p)} | {_seeds(lab.seeds)} | {_p(cells.p)} ({cells.seeds} seeds) "
            f"| {cells.seeds_for_power} |"
        )
        (agree if measured == lab.direction else differ).append((method, lab, cells, measured))
    if not rows:
        return []
    seeds = len(record.seeds)
    lines = [
        f"*{task}: the lab on these rewards* (the scenario fitted to this task's cells' rewards, "
        f"{seeds} seeds × {record.steps} steps; lab run `{prediction.run_id}`):",
        "",
        f"| method | predicted P(> {REFERENCE}), objective | seeds the lab needs "
        f"| measured P(> {REFERENCE}) | seeds for 80 % power |",
        "|---|---|---|---|---|",
        *rows,
        "",
        _sentence(agree, differ),
        "",
    ]
    return lines


def _sentence(agree: list, differ: list) -> str:
    """One sentence: the lab and the cells agree, or where they do not and what that means."""
    if not differ:
        if all(lab.direction == 0 for _, lab, _, _ in agree):
            return (
                "They agree: on these rewards the estimators are predicted not to differ, and the cells "
                "resolve no difference either."
            )
        said = ", ".join(
            f"{m} {'>' if lab.direction > 0 else '<'} {REFERENCE}" for m, lab, _, _ in agree if lab.direction
        )
        return f"They agree: the lab predicts {said}, and the cells resolve the same."
    parts = []
    for method, lab, cells, measured in differ:
        if measured == 0:
            unresolved = (
                f"{method}: the lab predicts a difference (P = {_p(lab.p)}) that {cells.seeds} seeds of "
                "the cells do not resolve"
            )
            if lab.seeds is None or cells.seeds < lab.seeds:
                parts.append(f"{unresolved} — too few seeds (the lab needs {_seeds(lab.seeds)})")
            else:  # as many seeds as the lab's own difference needs: the cells' metric differs less
                parts.append(
                    f"{unresolved}, though the lab resolves one of its size with {lab.seeds} — on the "
                    "cells' metric the difference is smaller or noisier than these rewards predict"
                )
        elif lab.direction == 0:
            parts.append(
                f"{method}: the cells resolve a difference (P = {_p(cells.p)}) that the lab does not "
                "predict on these rewards — it comes from what the reward model leaves out"
            )
        else:
            parts.append(f"{method}: the lab and the cells point opposite ways")
    return "They do not agree: " + "; ".join(parts) + "."
