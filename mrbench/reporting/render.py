"""Markdown of the report's top: number formatting, the header (how the report was made, what it
covers), the sweep config and the warnings (too few seeds, failed, missing, superseded or
duplicated cells, mixed code).

The result sections are in :mod:`mrbench.reporting.results` and :mod:`mrbench.reporting.diagnosis`;
:mod:`mrbench.reporting.build` puts them together.
"""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path
from typing import Any

from mrbench.core import layout
from mrbench.core.pretrained import PRETRAINED_PRESETS
from mrbench.reporting.context import ReportContext
from mrbench.reporting.select import cell_label

MIN_SEEDS = 5  # rliable: fewer seeds give intervals too wide/unstable to trust


def fmt(x: float | None) -> str:
    """A number as the report shows it: 3 decimals, 4 significant digits from 1000 on, ``–`` for
    missing or non-finite.

    >>> fmt(0.12345), fmt(12345.6), fmt(float("nan")), fmt(None)
    ('0.123', '1.235e+04', '–', '–')
    """
    if x is None or not math.isfinite(x):
        return "–"
    return f"{x:.3f}" if abs(x) < 1000 else f"{x:.4g}"


def fmt_count(values: list[float]) -> str:
    """Count-metric values (:func:`mrbench.core.layout.is_count_metric`) as the report shows them:
    an integer when every run has the same count, else the range; ``–`` without any.

    >>> fmt_count([298.0, 298.0]), fmt_count([100.0, float("nan"), 102.0]), fmt_count([])
    ('298', '100–102', '–')
    """
    finite = sorted(round(v) for v in values if math.isfinite(v))
    if not finite:
        return "–"
    return str(finite[0]) if finite[0] == finite[-1] else f"{finite[0]}–{finite[-1]}"


def _versions(ctx: ReportContext) -> dict[str, str]:
    """Package versions of the latest invocation: from sweep.json, else from its parent-run tags."""
    recorded = ctx.sweep_record.versions if ctx.sweep_record else {}
    if recorded:
        return dict(recorded)  # the caller takes the CPU out
    prefix = layout.tag(layout.VERSION)
    parent_tags = ctx.latest_parent.tags if ctx.latest_parent else {}
    return {layout.strip_prefix(prefix, k): v for k, v in parent_tags.items() if k.startswith(prefix)}


def _provenance_rows(ctx: ReportContext) -> list[str]:
    """The header's rows of what made the numbers: git commits, package versions, and the CPU kind
    (CPU kernels round by instruction set, so a CPU sweep reproduces on that kind of CPU only)."""
    shas = Counter(layout.read_tag(r.tags, layout.GIT_SHA, "unknown") for r in ctx.all_runs)
    rows = ["| git sha | " + ", ".join(f"`{s}` ({n} runs)" for s, n in shas.most_common()) + " |"]
    versions = _versions(ctx)
    cpu = versions.pop(layout.VERSION_CPU, None)
    if versions:
        rows.append("| packages | " + ", ".join(f"{k} {v}" for k, v in sorted(versions.items())) + " |")
    if cpu:
        rows.append(f"| CPU (the sweeping machine's) | {cpu} |")
    return rows


def header(ctx: ReportContext) -> list[str]:
    """Title, the regenerating command, and a table of what the report covers and how it counts."""
    sel, runs = ctx.sel, ctx.all_runs
    commands = list(
        dict.fromkeys(
            layout.read_tag(p.tags, layout.COMMAND)
            for p in sel.parents
            if layout.read_tag(p.tags, layout.COMMAND)
        )
    )
    seed_counts = Counter(len(rs) for methods in sel.cells.values() for rs in methods.values())
    n_cells = sum(len(methods) for methods in sel.cells.values())
    lines = [
        f"# Sweep report: `{ctx.sweep}`",
        "",
        f"Every number and figure below is produced by `{ctx.command}` from the MLflow store alone "
        f"({ctx.store_note}, experiment `{ctx.sweep}`); rerun it to regenerate this folder.",
        "",
        "| | |",
        "|---|---|",
    ]
    if commands:
        lines.append(f"| sweep command | `{commands[-1]}` |")
        if len(commands) > 1:
            lines.append("| earlier commands | " + "<br>".join(f"`{c}`" for c in commands[:-1]) + " |")
    lines.append(f"| invocations (parent runs) | {len(sel.parents)} |")
    lines += _provenance_rows(ctx)
    lines.append(
        f"| cells (method × task × model) | {n_cells}: {len(ctx.methods)} methods × "
        f"{len(ctx.tasks)} tasks, {len(runs)} runs used |"
    )
    used = dict.fromkeys(layout.read_tag(r.tags, layout.MODEL) for r in runs)
    for model in used:
        if model in PRETRAINED_PRESETS:  # a quantised real model: every figure below is of that
            lines.append(f"| model `{model}` | {PRETRAINED_PRESETS[model].description} |")
    lines.append(
        "| seeds per cell | "
        + ", ".join(
            f"{k} seed{'s' * (k != 1)}: {v} cell{'s' * (v != 1)}"
            for k, v in sorted(seed_counts.items(), reverse=True)
        )
        + " |"
    )
    reused = sum(1 for r in runs if layout.read_tag(r.tags, layout.EVAL_BEFORE_FROM))
    if reused:
        lines.append(
            f"| pre-training evaluation | computed once per (model, task settings) and reused by {reused} "
            f"of {len(runs)} runs (their `{layout.tag(layout.EVAL_BEFORE_FROM)}` tag names the run that "
            "computed it) |"
        )
    lines.append(
        f"| statistics | mean and IQM (mean of the middle 50 %) over seeds; 95 % percentile CIs from a "
        f"stratified bootstrap over seeds ({ctx.reps} resamples, numpy seed {ctx.seed}); "
        "probability of improvement = P(run of X beats run of Y), ties ½, CI by the same bootstrap; "
        "the seed is the unit of replication |"
    )
    lines.append("")
    return lines


PACKAGE_DIR = str(Path(__file__).resolve().parents[1])
"""Where this mrbench is installed: paths under it are written ``<mrbench>/…`` in a report."""


def portable(value: Any) -> Any:
    """``value`` (a sweep config) with every string path under the installed package (the
    rehearsal's bundled data, for one) written ``<mrbench>/…``: a report committed to git must not
    carry the folder one clone happened to sit in."""
    if isinstance(value, dict):
        return {k: portable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [portable(v) for v in value]
    if isinstance(value, str) and (value == PACKAGE_DIR or value.startswith(PACKAGE_DIR + "/")):
        return "<mrbench>" + value[len(PACKAGE_DIR) :]
    return value


def config_details(ctx: ReportContext) -> list[str]:
    """The latest invocation's sweep config, folded (nothing when sweep.json has none); paths
    inside the installed package as ``<mrbench>/…`` (:func:`portable`)."""
    lines: list[str] = []
    raw = ctx.sweep_record.config if ctx.sweep_record else {}
    config = portable(raw)
    if config:
        import yaml

        where = ", <code>&lt;mrbench&gt;</code> standing for the installed package" if config != raw else ""
        summary = f"sweep config (latest invocation; usable as <code>--config</code>{where})"
        lines += [
            f"<details><summary>{summary}</summary>",
            "",
            "```yaml",
            yaml.safe_dump(config, sort_keys=False).rstrip(),
            "```",
            "",
            "</details>",
            "",
        ]
    return lines


def _failed_cells(ctx: ReportContext) -> str | None:
    failed = ctx.sel.failed
    if not failed:
        return None
    shown = []
    for run in failed[:20]:
        error = layout.read_tag(run.tags, layout.ERROR)
        shown.append(f"`{cell_label(run)}` {run.status}" + (f" ({error[:160]})" if error else ""))
    more = f" … and {len(failed) - 20} more" if len(failed) > 20 else ""
    return (
        f"**Failed cells** ({len(failed)}, never FINISHED; not in the statistics): " + "; ".join(shown) + more
    )


def _missing_cells(ctx: ReportContext) -> str | None:
    """Cells of the latest sweep grid (sweep.json) with neither a selected nor a failed run."""
    grid = ctx.sweep_record.cells if ctx.sweep_record else ()
    used = {layout.read_tag(r.tags, layout.RUN_KEY) for r in ctx.all_runs}
    failed_keys = {layout.read_tag(r.tags, layout.RUN_KEY) for r in ctx.sel.failed}
    missing = [c for c in grid if c.run_key not in used and c.run_key not in failed_keys]
    if not missing:
        return None
    names = ", ".join(f"`{c.label}`" for c in missing[:10])
    return (
        f"**Missing cells**: {len(missing)} cell(s) of the latest sweep grid have no run yet "
        f"({names}{' …' if len(missing) > 10 else ''}); rerun the sweep command to complete it."
    )


def _duplicate_runs(ctx: ReportContext) -> str | None:
    """Run keys with several FINISHED runs (two sweeps raced on a cell) and the run each uses."""
    dups = ctx.sel.duplicates
    if not dups:
        return None
    shown = "; ".join(f"`{d.label}` ({d.finished} FINISHED, uses run `{d.used}`)" for d in dups[:10])
    return (
        f"**Duplicate runs**: {len(dups)} cell(s) have more than one FINISHED run of the same run key "
        "(e.g. two sweeps ran it at once); each uses its latest finished run (latest end time, then "
        f"start time, then run id) and leaves the others out: {shown}" + (" …" if len(dups) > 10 else "")
    )


def warnings(ctx: ReportContext) -> list[str]:
    """The ``## Warnings`` section, or nothing when there is nothing to warn about."""
    sel = ctx.sel
    out = []
    few = [len(rs) for methods in sel.cells.values() for rs in methods.values() if len(rs) < MIN_SEEDS]
    if few:
        out.append(
            f"**Few seeds**: {len(few)} of {sum(len(v) for v in sel.cells.values())} cells have fewer "
            f"than {MIN_SEEDS} seeds (fewest: {min(few)}). Intervals from so few seeds are wide or (1 seed) "
            "degenerate; add seeds (`--seeds` / `--n-seeds`) before trusting a ranking."
        )
    failed = _failed_cells(ctx)
    if failed:
        out.append(failed)
    if sel.recovered:
        out.append(
            f"{sel.recovered} failed or interrupted attempt(s) were re-run and FINISHED later "
            "(only the finished runs are used)."
        )
    unavailable = ctx.sweep_record.unavailable if ctx.sweep_record else {}
    if not unavailable and ctx.latest_parent is not None:
        listed = layout.read_tag(ctx.latest_parent.tags, layout.UNAVAILABLE_TASKS)
        unavailable = {t: "not built" for t in layout.split_list(listed)}
    for task, reason in unavailable.items():
        out.append(f"**Unavailable task** `{task}`: {reason}. Its cells were not run.")
    missing = _missing_cells(ctx)
    if missing:
        out.append(missing)
    if sel.superseded:
        out.append(
            f"**Several settings for one cell**: {len(sel.superseded)} cell(s) have FINISHED runs "
            "with different run keys (e.g. a changed `--steps`); the latest is used: "
            + ", ".join(sel.superseded[:5])
            + (" …" if len(sel.superseded) > 5 else "")
        )
    duplicates = _duplicate_runs(ctx)
    if duplicates:
        out.append(duplicates)
    shas = {layout.read_tag(r.tags, layout.GIT_SHA) for r in ctx.all_runs}
    if len(shas) > 1:
        out.append(f"**Mixed code versions**: runs come from {len(shas)} git commits (see the header).")
    if not out:
        return []
    return ["## Warnings", "", *[f"- {w}" for w in out], ""]
