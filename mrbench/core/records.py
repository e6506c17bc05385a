"""The JSON records mrbench writes as run artifacts, one class each: written and read only here.

:mod:`mrbench.core.layout` names the runs' tags, params, metrics and artifacts; this module is
what the JSON artifacts hold. Writers build a record and store :meth:`to_json`; readers call
``from_json`` and use attributes, so no key of a record is spelled anywhere else.

=====================  ===================  ==================================================
artifact               class                written by → read by
=====================  ===================  ==================================================
``sweep.json``         :class:`SweepRecord`  the sweep's parent run → the report
``diagnostics.json``   :class:`Diagnostics`  every cell → the report (correlations, shares,
                                             shadow estimators); run means of the per-step
                                             :class:`BatchDiagnostics` and :class:`ShadowComparison`
``lab.json``           :class:`LabRecord`    a lab parent run → the report's lab section
=====================  ===================  ==================================================

A cell's ``rewards.npz`` (NumPy arrays, not JSON) is :mod:`mrbench.core.rewards_record`'s.

Every run that holds one carries the layout version (tag ``mrbench.schema``,
:data:`mrbench.core.layout.SCHEMA_VERSION`), checked before its records are read. ``from_json``
reads every record layout 1 has written, including those from before a field existed (the field
is then None or empty, as its docstring says), and raises :class:`RecordError` naming the artifact
for anything else.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from mrbench.core import layout
from mrbench.core.json_fields import RecordError, mapping, mapping_field, number, str_dict

# RecordError is json_fields' own: code that reads these records may import it from here.


def as_nan(value: float | None) -> float:
    """A record's number for arithmetic: NaN where the record says undefined (None).

    >>> as_nan(None), as_nan(0.5)
    (nan, 0.5)
    """
    return math.nan if value is None else float(value)


# --- sweep.json --------------------------------------------------------------------------------


@dataclass(frozen=True)
class CellEntry:
    """One cell of a sweep's grid, as ``sweep.json`` lists it."""

    run_key: str
    method: str
    task: str
    model: str
    seed: int

    @property
    def label(self) -> str:
        """How messages and reports name the cell (:func:`mrbench.core.layout.cell_label`)."""
        return layout.cell_label(self.method, self.task, self.model, self.seed)

    def to_json(self) -> dict[str, Any]:
        return {
            "run_key": self.run_key,
            "method": self.method,
            "task": self.task,
            "model": self.model,
            "seed": self.seed,
        }

    @classmethod
    def from_json(cls, data: Any, what: str) -> CellEntry:
        entry = mapping(data, what)
        try:
            return cls(
                str(entry["run_key"]),
                str(entry["method"]),
                str(entry["task"]),
                str(entry["model"]),
                int(entry["seed"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise RecordError(f"{what} is not a cell entry ({exc!r})") from None


@dataclass(frozen=True)
class SweepRecord:
    """``sweep.json`` on a sweep's parent run: what one invocation was asked to do.

    Attributes:
        name: the sweep (its experiment).
        command: the command line that started it.
        config: the resolved sweep config (:meth:`mrbench.sweeps.spec.SweepSpec.to_dict`), usable as
            ``--config``.
        versions: package → version of the invocation's environment (empty before it was recorded).
        cells: the grid, in run order.
        unavailable: task → why its cells were not run.
    """

    name: str
    command: str
    config: dict[str, Any]
    versions: dict[str, str] = field(default_factory=dict)
    cells: tuple[CellEntry, ...] = ()
    unavailable: dict[str, str] = field(default_factory=dict)

    def _config_names(self, key: str) -> list[str]:
        value = self.config.get(key) or []
        return [str(v) for v in value] if isinstance(value, list | tuple) else []

    @property
    def methods(self) -> list[str]:
        """The config's methods, in order (empty when the record has no config)."""
        return self._config_names("methods")

    @property
    def tasks(self) -> list[str]:
        """The config's tasks, in order."""
        return self._config_names("tasks")

    @property
    def lab_scenarios(self) -> list[str]:
        """The config's ``lab`` scenarios (none for sweeps from before the lab)."""
        return self._config_names("lab")

    @property
    def model_order(self) -> list[str]:
        """The config's models in order: a list, or per-size lists flattened."""
        models = self.config.get("models") or []
        if isinstance(models, Mapping):
            return [str(m) for group in models.values() for m in group]
        return [str(m) for m in models]

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "command": self.command,
            "config": self.config,
            "versions": self.versions,
            "cells": [c.to_json() for c in self.cells],
            "unavailable": self.unavailable,
        }

    @classmethod
    def from_json(cls, data: Any, what: str = layout.SWEEP_ARTIFACT) -> SweepRecord:
        record = mapping(data, what)
        cells = record.get("cells") or []
        if not isinstance(cells, list):
            raise RecordError(f"{what}: 'cells' is not a list")
        return cls(
            name=str(record.get("name", "")),
            command=str(record.get("command", "")),
            config=dict(mapping_field(record, "config", what)),
            versions=str_dict(record, "versions", what),
            cells=tuple(CellEntry.from_json(c, f"{what}: cell {i}") for i, c in enumerate(cells)),
            unavailable=str_dict(record, "unavailable", what),
        )


# --- diagnostics.json --------------------------------------------------------------------------


@dataclass(frozen=True)
class ShadowStats:
    """How a shadow estimator judged a batch, against the method in use
    (:data:`mrbench.core.layout.SHADOW_STATS`; None where a statistic is undefined)."""

    sign_agree: float | None
    rank_corr: float | None
    resolution: float | None

    def stats(self) -> list[float]:
        """``[sign_agree, rank_corr, resolution]`` in :data:`~mrbench.core.layout.SHADOW_STATS`
        order, NaN where undefined."""
        return [as_nan(getattr(self, stat)) for stat in layout.SHADOW_STATS]

    def metrics(self, method: str) -> dict[str, float]:
        """The defined statistics as per-step metrics (``adv/shadow/<method>/<stat>``)."""
        values = {stat: getattr(self, stat) for stat in layout.SHADOW_STATS}
        return {layout.shadow_metric(method, stat): v for stat, v in values.items() if v is not None}

    def to_json(self) -> dict[str, Any]:
        return {stat: getattr(self, stat) for stat in layout.SHADOW_STATS}


@dataclass(frozen=True)
class ShadowMeans(ShadowStats):
    """A shadow estimator's :class:`ShadowStats` as run means, and the number of steps it ran."""

    steps: int = 0

    def to_json(self) -> dict[str, Any]:
        return {**super().to_json(), "steps": self.steps}

    @classmethod
    def from_json(cls, data: Any, what: str) -> ShadowMeans:
        values = mapping(data or {}, what)
        numbers = {stat: number(values.get(stat)) for stat in layout.SHADOW_STATS}
        return cls(**numbers, steps=int(values.get("steps") or 0))


@dataclass(frozen=True)
class BatchDiagnostics:
    """One batch's advantage diagnostics (:func:`mrbench.methods.diagnostics.diagnostics`).

    Attributes:
        mean_offdiag_corr: mean over groups of the mean defined off-diagonal correlation of the
            weighted components (None if no group has one).
        corr_matrix: ``[K][K]`` mean per-group correlation, None where never defined.
        share: ``[K]`` share of the advantage's ordering each component drives (all None when
            no group is left).
        frac_zero_var_groups: fraction of groups whose weighted total has zero variance.
        denominator_mean, denominator_median: the effective normalisation scale
            ``std_g(R) / std_g(A)`` over groups where both are > 0 (None if none).
        sign_flip_vs_grpo: fraction of rollouts whose advantage sign differs from GRPO's.
        abs_mean, std, max_abs: of the advantages over scorable rollouts.
    """

    mean_offdiag_corr: float | None
    corr_matrix: list[list[float | None]]
    share: list[float | None]
    frac_zero_var_groups: float
    denominator_mean: float | None
    denominator_median: float | None
    sign_flip_vs_grpo: float
    abs_mean: float
    std: float
    max_abs: float

    # The scalars logged per step as ``adv/<name>`` (the median is in the JSON only).
    _STEP_SCALARS = (
        "mean_offdiag_corr",
        "frac_zero_var_groups",
        "denominator_mean",
        "sign_flip_vs_grpo",
        "abs_mean",
        "std",
        "max_abs",
    )

    def metrics(self, components: list[str] | tuple[str, ...]) -> dict[str, float]:
        """The per-step metrics (``adv/<scalar>``, ``adv/share/<component>``) of the defined values."""
        out = {layout.adv_metric(name): getattr(self, name) for name in self._STEP_SCALARS}
        out.update({layout.adv_share(c): v for c, v in zip(components, self.share, strict=False)})
        return {key: float(v) for key, v in out.items() if v is not None}

    def to_json(self) -> dict[str, Any]:
        """The JSON of ``mrbench advantages --json`` (magnitudes as ``adv_abs_mean``, …)."""
        return {
            "mean_offdiag_corr": self.mean_offdiag_corr,
            "corr_matrix": self.corr_matrix,
            "share": self.share,
            "frac_zero_var_groups": self.frac_zero_var_groups,
            "denominator_mean": self.denominator_mean,
            "denominator_median": self.denominator_median,
            "sign_flip_vs_grpo": self.sign_flip_vs_grpo,
            "adv_abs_mean": self.abs_mean,
            "adv_std": self.std,
            "adv_max_abs": self.max_abs,
        }


@dataclass(frozen=True)
class ShadowComparison:
    """The method in use against its shadow estimators on one batch
    (:func:`mrbench.methods.diagnostics.shadow_diagnostics`).

    Attributes:
        resolution: the method in use's resolution (None where undefined for the batch).
        shadow: shadow method → its :class:`ShadowStats`.
    """

    resolution: float | None
    shadow: dict[str, ShadowStats]

    def metrics(self) -> dict[str, float]:
        """The per-step metrics: ``adv/resolution`` and ``adv/shadow/<method>/<stat>``, where defined."""
        out = {} if self.resolution is None else {layout.ADV_RESOLUTION: float(self.resolution)}
        for name, stats in self.shadow.items():
            out.update(stats.metrics(name))
        return out

    def to_json(self) -> dict[str, Any]:
        return {"resolution": self.resolution, "shadow": {n: s.to_json() for n, s in self.shadow.items()}}


@dataclass(frozen=True)
class Diagnostics:
    """``diagnostics.json`` of a cell: run means of the per-step advantage diagnostics.

    Attributes:
        components: the reward components, in the order of the rows below.
        corr_matrix: ``[K][K]`` mean within-group Pearson correlation of the components (None
            where never defined; None when no step had diagnostics).
        share: ``[K]`` mean share of the advantage each component carries (same Nones).
        steps: steps that had diagnostics.
        resolution: mean ``adv/resolution`` of the method in use (None where never defined).
        shadow: per shadow estimator its :class:`ShadowMeans`; None for a run written before shadow
            estimators existed (its per-step ``adv/shadow/...`` curves stand in).
    """

    components: list[str]
    corr_matrix: list[list[float | None]] | None = None
    share: list[float | None] | None = None
    steps: int = 0
    resolution: float | None = None
    shadow: dict[str, ShadowMeans] | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "components": self.components,
            "corr_matrix": self.corr_matrix,
            "share": self.share,
            "steps": self.steps,
            "resolution": self.resolution,
            "shadow": None if self.shadow is None else {name: s.to_json() for name, s in self.shadow.items()},
        }

    @classmethod
    def from_json(cls, data: Any, what: str = layout.DIAGNOSTICS_ARTIFACT) -> Diagnostics:
        record = mapping(data, what)
        corr, share, shadow = record.get("corr_matrix"), record.get("share"), record.get("shadow")
        try:
            return cls(
                components=[str(c) for c in record.get("components") or []],
                corr_matrix=None if corr is None else [[number(v) for v in row] for row in corr],
                share=None if share is None else [number(v) for v in share],
                steps=int(record.get("steps") or 0),
                resolution=number(record.get("resolution")),
                shadow=None
                if "shadow" not in record
                else {
                    str(n): ShadowMeans.from_json(s, f"{what}: shadow {n}") for n, s in (shadow or {}).items()
                },
            )
        except (TypeError, ValueError) as exc:
            raise RecordError(f"{what} is not a diagnostics record ({exc!r})") from None


# --- lab.json ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class LabMethod:
    """One method's results in ``lab.json``.

    Attributes:
        params: its hyper-parameters.
        batch_coupled: it was called once per seed (:mod:`mrbench.lab.estimators`).
        scores: score → ``[S]`` per-seed values (None where undefined).
        iqm: score → ``[point, low, high]`` interquartile mean with its bootstrap CI over seeds.
        poi: score → ``[point, low, high]`` probability that a seed ends higher than a seed of grpo.
    """

    params: dict[str, Any]
    batch_coupled: bool
    scores: dict[str, list[float | None]]
    iqm: dict[str, list[float]] = field(default_factory=dict)
    poi: dict[str, list[float]] = field(default_factory=dict)

    def seed_scores(self, score: str) -> list[float]:
        """``[S]`` per-seed values of ``score``, NaN where undefined (empty when not scored)."""
        return [as_nan(v) for v in self.scores.get(score, [])]

    def to_json(self) -> dict[str, Any]:
        return {
            "params": self.params,
            "batch_coupled": self.batch_coupled,
            "scores": self.scores,
            "iqm": self.iqm,
            "poi": self.poi,
        }

    @classmethod
    def from_json(cls, data: Any, what: str) -> LabMethod:
        record = mapping(data, what)
        scores = mapping_field(record, "scores", what)
        return cls(
            params=dict(record.get("params") or {}),
            batch_coupled=bool(record.get("batch_coupled")),
            scores={str(k): [number(v) for v in values] for k, values in scores.items()},
            iqm=dict(record.get("iqm") or {}),
            poi=dict(record.get("poi") or {}),
        )


@dataclass(frozen=True)
class LabRecord:
    """``lab.json`` on a lab parent run (``mrbench simulate``, or a sweep's lab).

    Attributes:
        scenario: the scenario's settings (:meth:`mrbench.lab.scenarios.Scenario.to_dict`).
        seeds: the seeds, in the order of every per-seed list.
        key_score: the score that shows the scenario's phenomenon
            (:data:`mrbench.lab.presets.KEY_SCORES`); empty in records from before it was recorded.
        methods: method → its :class:`LabMethod`.
    """

    scenario: dict[str, Any]
    seeds: list[int]
    key_score: str
    methods: dict[str, LabMethod]

    @property
    def steps(self) -> int | None:
        """The scenario's training steps (None when the record lacks them)."""
        steps = self.scenario.get("steps")
        return None if steps is None else int(steps)

    @property
    def description(self) -> str:
        """The scenario's one-paragraph description."""
        return str(self.scenario.get("description") or "").strip()

    def to_json(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario,
            "seeds": self.seeds,
            "key_score": self.key_score,
            "methods": {name: m.to_json() for name, m in self.methods.items()},
        }

    @classmethod
    def from_json(cls, data: Any, what: str = layout.LAB_ARTIFACT) -> LabRecord:
        record = mapping(data, what)
        methods = mapping_field(record, "methods", what)
        try:
            seeds = [int(s) for s in record.get("seeds") or []]
        except (TypeError, ValueError):
            raise RecordError(f"{what}: 'seeds' is not a list of integers") from None
        return cls(
            scenario=dict(mapping_field(record, "scenario", what)),
            seeds=seeds,
            key_score=str(record.get("key_score") or ""),
            methods={str(n): LabMethod.from_json(m, f"{what}: method {n}") for n, m in methods.items()},
        )
