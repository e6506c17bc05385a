"""What every report section reads: the selected runs in report order, their learning curves and
diagnostics, the sweep's own record, and the statistics settings.

:func:`load_context` builds it from a sweep's runs and a store reader (one bulk read of the curves
and of ``diagnostics.json``, plus the shadow-estimator curves of runs whose ``diagnostics.json``
lacks them); the sections then only compute and format.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from mrbench.core import layout
from mrbench.core.records import Diagnostics, SweepRecord
from mrbench.reporting import stats
from mrbench.reporting.select import Selection, TaskInfo, ordered, select_runs, task_info
from mrbench.store.reader import History, Reader, RunRecord


@dataclass
class ReportContext:
    """The selection of one sweep's runs and the data loaded for it."""

    sweep: str
    command: str  # the command that regenerates the report
    store_note: str  # how the report names the tracking store
    sel: Selection
    latest_parent: RunRecord | None  # the latest sweep invocation
    sweep_record: SweepRecord | None  # its sweep.json: config, cells, versions, unavailable tasks
    methods: list[str]  # method labels, in the sweep config's order
    tasks: list[str]
    task_info: dict[str, TaskInfo]
    model_order: list[str]
    reps: int = stats.DEFAULT_REPS
    seed: int = stats.DEFAULT_SEED
    histories: dict[str, dict[str, History]] = field(default_factory=dict)  # run_id → metric → curve
    diagnostics: dict[str, Diagnostics] = field(default_factory=dict)  # run_id → its diagnostics.json

    @property
    def all_runs(self) -> list[RunRecord]:
        """Every selected run."""
        return self.sel.runs()

    def models_for(self, task: str) -> list[str]:
        """The models ``task`` ran on, in the sweep config's order."""
        return ordered({m for t, m in self.sel.cells if t == task}, self.model_order)

    def history(self, run: RunRecord, metric: str) -> History | None:
        """A run's logged curve of ``metric`` (None when it logged none)."""
        return self.histories.get(run.run_id, {}).get(metric)

    def curve(self, run: RunRecord, metric: str) -> np.ndarray | None:
        """The values ``[S]`` of a run's curve of ``metric``, in step order (None when not logged)."""
        history = self.history(run, metric)
        return None if history is None else history[1]

    def scores(self, runs: list[RunRecord], metric: str) -> list[float]:
        """Each run's final value of eval ``metric`` (NaN where it has none)."""
        return [r.metrics.get(layout.eval_metric(metric), math.nan) for r in runs]

    def ci(self, values: list[float]) -> stats.Interval:
        """Mean of the finite ``values`` with its bootstrap CI, at the report's settings."""
        return stats.finite_mean_ci(values, reps=self.reps, seed=self.seed)

    def poi(self, x: np.ndarray, y: np.ndarray) -> stats.Interval:
        """P(run of X beats run of Y) over ``[runs, cells]`` scores, at the report's settings."""
        return stats.probability_of_improvement(x, y, reps=self.reps, seed=self.seed)


def load_context(
    sweep: str,
    reader: Reader,
    runs: list[RunRecord],
    *,
    command: str,
    store_note: str,
    reps: int = stats.DEFAULT_REPS,
    seed: int = stats.DEFAULT_SEED,
) -> ReportContext:
    """Select among ``runs`` (every run of the sweep's experiment), order methods, tasks and models
    as the latest sweep config lists them, and bulk-read the selected runs' curves and diagnostics."""
    sel = select_runs(runs)
    latest_parent = sel.parents[-1] if sel.parents else None
    sweep_record = read_sweep_record(reader, latest_parent) if latest_parent else None
    record = sweep_record or SweepRecord("", "", {})
    methods = ordered({m for per_method in sel.cells.values() for m in per_method}, record.methods)
    tasks = ordered({t for t, _ in sel.cells}, record.tasks)
    infos = {
        t: task_info([r for (tt, _), ms in sel.cells.items() if tt == t for rs in ms.values() for r in rs])
        for t in tasks
    }
    model_order = record.model_order
    context = ReportContext(
        sweep,
        command,
        store_note,
        sel,
        latest_parent,
        sweep_record,
        methods,
        tasks,
        infos,
        model_order,
        reps,
        seed,
    )
    selected = context.all_runs
    keys = {layout.REWARD} | {layout.reward_mean(c) for info in infos.values() for c in info.components}
    context.histories = reader.histories([r.run_id for r in selected], keys)
    context.diagnostics = {
        run_id: Diagnostics.from_json(data, f"{layout.DIAGNOSTICS_ARTIFACT} of run {run_id}")
        for run_id, data in reader.read_json_artifacts(selected, layout.DIAGNOSTICS_ARTIFACT).items()
    }
    _read_shadow_curves(context, reader)
    return context


def _read_shadow_curves(context: ReportContext, reader: Reader) -> None:
    """Add the per-step shadow-estimator curves of the runs whose ``diagnostics.json`` lacks their
    run means (the curves stand in); most runs have them there, so this reads little or nothing."""

    def is_shadow(key: str) -> bool:
        return key == layout.ADV_RESOLUTION or key.startswith(layout.ADV_SHADOW)

    lacking = [
        r
        for r in context.all_runs
        if _lacks_shadow_means(context.diagnostics.get(r.run_id)) and any(map(is_shadow, r.metrics))
    ]
    keys = {k for r in lacking for k in r.metrics if is_shadow(k)}
    if lacking:
        for run_id, curves in reader.histories([r.run_id for r in lacking], keys).items():
            context.histories.setdefault(run_id, {}).update(curves)


def _lacks_shadow_means(diagnostics: Diagnostics | None) -> bool:
    return diagnostics is None or diagnostics.shadow is None


def read_sweep_record(reader: Reader, parent: RunRecord) -> SweepRecord | None:
    """The ``sweep.json`` of a sweep's parent run (None when it has none)."""
    data = reader.read_json_artifact(parent, layout.SWEEP_ARTIFACT)
    if data is None:
        return None
    return SweepRecord.from_json(data, f"{layout.SWEEP_ARTIFACT} of sweep run {parent.run_id}")
