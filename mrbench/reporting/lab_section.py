"""The report's opening section: the estimator lab's scenarios, run by the sweep with its methods.

A sweep runs its ``lab`` scenarios before writing its report (:mod:`mrbench.lab.in_sweep`) and logs
each as ``mrbench simulate`` does: experiment ``lab-<scenario>``, a parent run (role ``lab``, tagged
with the sweep's name) whose ``lab.json`` holds every seed's scores and the scenario's key score.
This module reads those back from the store — the latest FINISHED lab run of this sweep per
scenario of the sweep config's ``lab`` list — and writes, per scenario and method, the key score
and the normalised objective as IQM with a bootstrap CI over seeds and the probability of a seed
ending higher than a seed of ``grpo``, then, in words, where the intervals say the estimators
differ. Statistics are the report's own (:mod:`mrbench.reporting.stats`, the report's resamples and
seed), computed from the per-seed scores, so a lab run's numbers here equal ``mrbench simulate``'s.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mrbench.core import layout
from mrbench.core.records import LabRecord
from mrbench.reporting import stats
from mrbench.reporting.context import ReportContext
from mrbench.reporting.render import fmt
from mrbench.store.reader import Reader, RunRecord

REFERENCE = "grpo"
OBJECTIVE = "objective"
FINAL = "final/"
LABELS = {
    OBJECTIVE: "objective (normalised)",
    "resolution": "advantage resolution",
    "max_abs_adv": "max \\|A\\|",
    "steps_to_90": "steps to 90 %",
    "sign_disagree": f"sign ≠ {REFERENCE}",
}
"""How the lab's scores (:func:`mrbench.lab.metrics.seed_scores`) are named in the table."""


def score_label(score: str) -> str:
    """The table's name of a lab score.

    >>> score_label("final/small"), score_label("max_abs_adv")
    ('`small` (final, normalised)', 'max \\\\|A\\\\|')
    """
    if score.startswith(FINAL):
        return f"`{score.removeprefix(FINAL)}` (final, normalised)"
    return LABELS.get(score, f"`{score}`")


@dataclass(frozen=True)
class LabRun:
    """One scenario's lab run of this sweep: the run and its ``lab.json``."""

    scenario: str
    run: RunRecord
    record: LabRecord

    @property
    def command(self) -> str:
        """The ``mrbench simulate`` command that reproduces it (with figures)."""
        return layout.read_tag(self.run.tags, layout.COMMAND)

    @property
    def key_score(self) -> str:
        return self.record.key_score or OBJECTIVE

    def scores(self, method: str, score: str) -> np.ndarray:
        """``[S]`` per-seed values of ``score`` for ``method`` (NaN where undefined)."""
        return np.asarray(self.record.methods[method].seed_scores(score), dtype=float)


def sweep_scenarios(ctx: ReportContext) -> list[str]:
    """The ``lab`` scenarios of the sweep's latest config (none for sweeps before the lab)."""
    return ctx.sweep_record.lab_scenarios if ctx.sweep_record else []


def read_lab(ctx: ReportContext, reader: Reader) -> tuple[list[LabRun], list[str]]:
    """The latest FINISHED lab run of this sweep per scenario, and the scenarios without one."""
    found, missing = [], []
    for name in sweep_scenarios(ctx):
        experiment_id = reader.experiment_id(layout.lab_experiment(name))
        runs = [
            r
            for r in (reader.runs(experiment_id) if experiment_id is not None else [])
            if r.status == "FINISHED"
            and layout.read_tag(r.tags, layout.ROLE) == layout.ROLE_LAB
            and layout.read_tag(r.tags, layout.SWEEP) == ctx.sweep
        ]
        latest = max(runs, key=lambda r: (r.end_time or 0, r.start_time, r.run_id), default=None)
        if latest is not None:
            layout.check_readable(latest.tags, f"lab run {latest.run_id} ({name})")
        data = reader.read_json_artifact(latest, layout.LAB_ARTIFACT) if latest is not None else None
        record = (
            None if data is None else LabRecord.from_json(data, f"{layout.LAB_ARTIFACT} of lab run {name}")
        )
        if latest is None or record is None or not record.methods:
            missing.append(name)
        else:
            found.append(LabRun(name, latest, record))
    return found, missing


@dataclass(frozen=True)
class Compared:
    """One method's statistics on one score of one scenario."""

    iqm: stats.Interval
    poi: stats.Interval | None  # P(a seed ends higher than a seed of grpo); None for grpo itself

    @property
    def direction(self) -> int:
        """+1 / −1 when the interval of P excludes ½ above / below, else 0."""
        if self.poi is None or not np.isfinite(self.poi.low):
            return 0
        return 1 if self.poi.low > 0.5 else -1 if self.poi.high < 0.5 else 0


def compare(ctx: ReportContext, lab: LabRun, method: str, score: str) -> Compared:
    """IQM with CI of ``method``'s ``score`` and its P(higher than grpo), at the report's settings."""
    values = lab.scores(method, score)
    interval = stats.stratified_bootstrap_ci(values, stats.iqm, reps=ctx.reps, seed=ctx.seed)
    poi = None
    if method != REFERENCE and REFERENCE in lab.record.methods and not np.isnan(values).all():
        poi = ctx.poi(values, lab.scores(REFERENCE, score))
    return Compared(interval, poi)


def _ci(interval: stats.Interval) -> str:
    return f"{fmt(interval.point)} [{fmt(interval.low)}, {fmt(interval.high)}]"


def _poi(compared: Compared) -> str:
    return "–" if compared.poi is None else _ci(compared.poi)


def _words(lab: LabRun, table: dict[str, dict[str, Compared]]) -> str:
    """Where the scenario's methods differ from grpo, in words."""
    parts = []
    for score in dict.fromkeys([lab.key_score, OBJECTIVE]):
        higher, lower = [], []
        for method, by_score in table.items():
            compared = by_score[score]
            if compared.poi is None:
                continue
            text = f"{method} (P = {_ci(compared.poi)})"
            (higher if compared.direction > 0 else lower if compared.direction < 0 else []).append(text)
        label = score_label(score)
        if higher or lower:
            said = [f"higher than {REFERENCE}'s for " + ", ".join(higher)] if higher else []
            said += [f"lower than {REFERENCE}'s for " + ", ".join(lower)] if lower else []
            parts.append(f"{label}: " + "; ".join(said))
        else:
            parts.append(f"{label}: no method differs from {REFERENCE} (every interval of P includes 0.5)")
    return ". ".join(parts) + "."


def lab_section(ctx: ReportContext, reader: Reader) -> list[str]:
    """The ``## Estimator lab`` section (nothing when the sweep ran no lab scenarios)."""
    labs, missing = read_lab(ctx, reader)
    if not labs and not missing:
        return []
    lines = [
        "## Estimator lab: where the estimators differ",
        "",
        "Before the language-model cells: the sweep's methods on the estimator lab's reward scenarios "
        "(a simulated policy trained with each estimator over many seeds, expected rewards computed "
        "exactly; see docs/lab.md), simulated by the sweep and read from the store's experiments "
        "`lab-<scenario>` (the latest FINISHED run tagged with this sweep). Per scenario: the number that "
        "shows its phenomenon (a final reward, or an advantage diagnostic) and the weighted objective; "
        "rewards are normalised per prompt, 0 = its worst response and 1 = its best. IQM [95 % CI] over "
        f"seeds; P(> {REFERENCE}) = probability that a seed of the method ends higher than a seed of "
        f"`{REFERENCE}` (ties ½) with its 95 % CI: 0.5 = no difference.",
        "",
    ]
    if labs:
        lines += [
            f"| scenario | seeds × steps | method | key number | IQM [95 % CI] | P(> {REFERENCE}) "
            f"| objective | P(> {REFERENCE}) |",
            "|---|---|---|---|---|---|---|---|",
        ]
    words = []
    for lab in labs:
        methods = list(lab.record.methods)
        scores = list(dict.fromkeys([lab.key_score, OBJECTIVE]))
        table = {m: {s: compare(ctx, lab, m, s) for s in scores} for m in methods}
        size = f"{len(lab.record.seeds)} × {lab.record.steps if lab.record.steps is not None else '–'}"
        for i, method in enumerate(methods):
            key, objective = table[method][lab.key_score], table[method][OBJECTIVE]
            first = i == 0
            lines.append(
                f"| {f'`{lab.scenario}`' if first else ''} | {size if first else ''} | `{method}` "
                f"| {score_label(lab.key_score) if first else ''} | {_ci(key.iqm)} | {_poi(key)} "
                f"| {_ci(objective.iqm)} | {_poi(objective)} |"
            )
        description = lab.record.description
        others = {m: t for m, t in table.items() if m != REFERENCE}
        words.append(
            f"- **`{lab.scenario}`** — {description} {_words(lab, others)}"
            + (f" Reproduce with figures: `{lab.command}`." if lab.command else "")
        )
    if labs:
        lines += ["", *words]
    if missing:
        lines += [
            "",
            f"No lab result of this sweep in the store for {', '.join(f'`{m}`' for m in missing)}: the sweep "
            "simulates its `lab` scenarios just before writing its report (not with `--no-report`); "
            "`mrbench simulate --scenario NAME` runs one on its own.",
        ]
    return [*lines, ""]
