"""The lab's report: ``summary.md`` with its figures, written into one folder.

Everything in it comes from one :class:`~mrbench.lab.simulate.LabResult` and its statistics
(:func:`mrbench.lab.metrics.summarise`); the exact command that produced it is printed at the top.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from mrbench.lab.figures import learning_curves, pareto_trajectories
from mrbench.lab.metrics import REACH, MethodSummary, normalised
from mrbench.lab.simulate import LabResult
from mrbench.reporting.stats import CI_METHOD, Interval

SUMMARY_FILE = "summary.md"
CURVES_FIGURE = "curves.png"
PARETO_FIGURE = "pareto.png"
OBJECTIVE = "objective"
REST = "rest"  # the axis "mean of the other components" of a Pareto panel for K > 3


def normalised_curves(result: LabResult) -> dict[str, dict[str, np.ndarray]]:
    """Method → series → ``[S, T+1]`` normalised values: every component, then ``objective``."""
    inst = result.instance
    weights = np.asarray(result.scenario.weights)
    out = {}
    for method, run in result.runs.items():
        comp = normalised(run.components, inst.best.numpy(), inst.worst.numpy())
        series = {name: comp[:, :, i] for i, name in enumerate(result.scenario.components)}
        series[OBJECTIVE] = normalised(
            run.components @ weights, inst.best_total.numpy(), inst.worst_total.numpy()
        )
        out[method] = series
    return out


def pareto_pairs(components: tuple[str, ...]) -> list[tuple[str, str]]:
    """Axis pairs of the Pareto figure: every pair for K ≤ 3, else each component against the
    mean of the others (:data:`REST`)."""
    k = len(components)
    if k == 1:
        return [(components[0], OBJECTIVE)]
    if k <= 3:
        return [(components[i], components[j]) for i in range(k) for j in range(i + 1, k)]
    return [(c, f"{REST} of {c}") for c in components]


def write_figures(result: LabResult, out: Path) -> list[Path]:
    """``curves.png`` and ``pareto.png`` in ``out``."""
    curves = normalised_curves(result)
    names = [*result.scenario.components, OBJECTIVE]
    title = f"lab {result.scenario.name}: {len(result.seeds)} seeds"
    by_panel = {name: {m: curves[m][name] for m in curves} for name in names}
    paths = [learning_curves(out / CURVES_FIGURE, by_panel, title=f"{title} (mean, 95 % bootstrap band)")]
    pairs = pareto_pairs(result.scenario.components)
    traj: dict[str, dict[str, np.ndarray]] = {}
    for method, series in curves.items():
        axes = dict(series)
        for x_name, y_name in pairs:
            if y_name.startswith(REST):
                others = [series[c] for c in result.scenario.components if c != x_name]
                with np.errstate(all="ignore"):
                    axes[y_name] = np.nanmean(np.stack(others), axis=0)
        traj[method] = axes
    paths.append(
        pareto_trajectories(out / PARETO_FIGURE, pairs, traj, title=f"{title}: trajectories, final seeds")
    )
    return paths


def _fmt(value: float, digits: int = 3) -> str:
    if not math.isfinite(value):
        return "–"
    if abs(value) >= 1000:
        return f"{value:.3g}"
    return f"{value:.{digits}f}"


def _ci(interval: Interval, digits: int = 3) -> str:
    return f"{_fmt(interval.point, digits)} [{_fmt(interval.low, digits)}, {_fmt(interval.high, digits)}]"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    return [
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
        *("| " + " | ".join(row) + " |" for row in rows),
    ]


def _scenario_lines(result: LabResult) -> list[str]:
    s = result.scenario
    rows = []
    for i, name in enumerate(s.components):
        bounded = math.isfinite(s.lows[i]) or math.isfinite(s.highs[i])
        bounds = f"[{s.lows[i]:g}, {s.highs[i]:g}]" if s.kinds[i] == "continuous" and bounded else "none"
        rows.append(
            [
                f"`{name}`",
                s.kinds[i],
                f"{s.scales[i]:g}",
                f"{s.weights[i]:g}",
                f"{s.noise[i]:g}",
                f"{s.means[i]:.3f}",
                bounds,
            ]
        )
    lines = _table(["component", "kind", "scale", "weight", "noise", "latent mean", "clip"], rows)
    corr = [[f"`{n}`", *(f"{v:.2f}" for v in row)] for n, row in zip(s.components, s.corr, strict=True)]
    lines += [
        "",
        "Correlation of the responses' latent levels (noise: "
        + ("the same" if s.noise_corr is None else "its own matrix")
        + "):",
        "",
    ]
    lines += _table(["", *(f"`{n}`" for n in s.components)], corr)
    return lines


def _header_lines(result: LabResult, command: str) -> list[str]:
    """Title, description, the command that produced the report, and the scenario's settings."""
    s = result.scenario
    return [
        f"# Lab: `{s.name}`",
        "",
        s.description,
        "",
        f"Produced by `{command}` (rerun it to regenerate this folder).",
        "",
        f"{len(result.seeds)} seeds × {s.steps} steps; {s.prompts} prompts × {s.responses} candidate "
        f"responses per seed, {s.group_size} rollouts per group; {s.policy} softmax policy, lr {s.lr:g}, "
        f"PPO epochs {s.ppo_epochs}, clip {s.ppo_clip if s.ppo_clip is not None else 'none'}; "
        f"unscorable rollouts {s.unscorable:g}.",
        "",
        *_scenario_lines(result),
    ]


def _statistics_lines(result: LabResult, reps: int, reference: str) -> list[str]:
    """The "Statistics" section: how the numbers of the tables were computed."""
    return [
        "## Statistics",
        "",
        f"Seed = unit of replication. Point estimates are IQMs (mean of the middle 50 %) over the "
        f"{len(result.seeds)} seeds; brackets are 95 % {CI_METHOD} confidence intervals from a stratified "
        f"bootstrap over seeds ({reps} resamples, numpy seed 0). Rewards are expected rewards under the "
        "policy (exact, not sampled), normalised per prompt: 0 = its worst response, 1 = its best. "
        f"`steps to {REACH:.0%}` = first step where the normalised weighted objective reaches {REACH:g} "
        f"({result.scenario.steps + 1} = never). `sign ≠ {reference}` = fraction of groups where some "
        f"rollout's advantage has the opposite sign of {reference}'s for the same rewards; `max |A|` = "
        "largest advantage magnitude of the run; `resolution` = distinct advantages / distinct reward "
        "vectors per group (1 = every distinct reward combination keeps its own advantage). Methods "
        "marked † couple the groups of a batch (a batch statistic) and were called once per seed.",
    ]


def _diagnostics_lines(
    result: LabResult, summaries: Mapping[str, MethodSummary], reference: str
) -> list[str]:
    """The table of objective, steps to 90 %, sign disagreement, max |A| and resolution."""
    rows = [
        [
            f"`{method}`" + (" †" if result.runs[method].batch_coupled else ""),
            _ci(summ.iqm[OBJECTIVE]),
            _ci(summ.iqm["steps_to_90"], 0),
            _ci(summ.iqm["sign_disagree"]),
            _ci(summ.iqm["max_abs_adv"], 2),
            _ci(summ.iqm["resolution"]),
        ]
        for method, summ in summaries.items()
    ]
    header = ["method", "objective (final)", f"steps to {REACH:.0%}", f"sign ≠ {reference}", "max \\|A\\|"]
    return ["## Objective and advantage diagnostics", "", *_table([*header, "resolution"], rows)]


def _final_lines(components: tuple[str, ...], summaries: Mapping[str, MethodSummary]) -> list[str]:
    """The table of each component's final position."""
    rows = [[f"`{m}`", *(_ci(summ.iqm[f"final/{c}"]) for c in components)] for m, summ in summaries.items()]
    return [
        "## Final position of each component (the Pareto position)",
        "",
        *_table(["method", *(f"`{c}`" for c in components)], rows),
    ]


def _poi_lines(
    components: tuple[str, ...], summaries: Mapping[str, MethodSummary], reference: str
) -> list[str]:
    """The probability-of-improvement table (no lines when no method has one)."""
    rows = [
        [
            f"`{m}`",
            *(_ci(summ.poi[f"final/{c}"]) if f"final/{c}" in summ.poi else "–" for c in components),
            _ci(summ.poi[OBJECTIVE]) if OBJECTIVE in summ.poi else "–",
        ]
        for m, summ in summaries.items()
        if summ.poi
    ]
    if not rows:
        return []
    return [
        "",
        f"## Probability of improvement over `{reference}`",
        "",
        f"P(a seed of the method ends higher than a seed of `{reference}`), ties ½; 0.5 = no difference.",
        "",
        *_table(["method", *(f"`{c}`" for c in components), OBJECTIVE], rows),
    ]


FIGURE_LINES = [
    "## Figures",
    "",
    f"![learning curves]({CURVES_FIGURE})",
    "",
    "Per-component normalised expected reward and the weighted objective over training: mean over seeds "
    "with a 95 % bootstrap band.",
    "",
    f"![pareto trajectories]({PARETO_FIGURE})",
    "",
    "Mean trajectory of each method over training (dot: the end) and every seed's final position.",
    "",
]
"""The "Figures" section (the same for every scenario)."""


def render(
    result: LabResult,
    summaries: Mapping[str, MethodSummary],
    *,
    command: str,
    reps: int,
    reference: str = "grpo",
) -> str:
    """The markdown of ``summary.md``."""
    components = result.scenario.components
    lines = [
        *_header_lines(result, command),
        "",
        *_statistics_lines(result, reps, reference),
        "",
        *_diagnostics_lines(result, summaries, reference),
        "",
        *_final_lines(components, summaries),
        *_poi_lines(components, summaries, reference),
        "",
        *FIGURE_LINES,
    ]
    return "\n".join(lines)


def write_summary(
    result: LabResult,
    summaries: Mapping[str, MethodSummary],
    out: Path,
    *,
    command: str,
    reps: int,
) -> Path:
    """Write ``summary.md`` and the figures into ``out``; return the summary's path."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    write_figures(result, out)
    path = out / SUMMARY_FILE
    path.write_text(render(result, summaries, command=command, reps=reps), encoding="utf-8")
    return path
