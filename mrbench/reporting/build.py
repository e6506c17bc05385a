"""``mrbench report SWEEP``: a markdown report with statistics and figures, from MLflow only.

Reads every run of the sweep's experiment (:mod:`mrbench.reporting.store`), keeps the latest FINISHED
run per run key (and per method × task × model × seed), and writes ``report.md`` plus PNGs
into ``reports/<sweep>/`` — also logged to the sweep's parent run under ``report/``.

Statistics follow rliable (:mod:`mrbench.reporting.stats`): the seed is the unit of replication; per
task × model the final eval metrics get mean, IQM and a 95 % percentile stratified bootstrap
CI; a winner is named only when its interval is separated from every other method's; the
probability of improvement over ``grpo`` comes with its CI. The report is deterministic: the
same store gives the same report.md, so it can be committed and regenerated.
"""

from __future__ import annotations

import math
import re
import warnings
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mrbench.core.errors import UserError
from mrbench.reporting import stats
from mrbench.reporting.store import History, Reader, RunRecord, local_artifact_path, open_reader

BASELINE = "grpo"
MIN_SEEDS = 5  # rliable: fewer seeds give intervals too wide/unstable to trust
MAX_CURVE_POINTS = 300
PARETO_AXES = {  # the trade-off each domain is about; other tasks use their first two components
    "code-generation": ("accuracy", "efficiency"),
    "agent-security": ("utility", "safety"),
    "tool-calling": ("values", "format"),
}
FIGURE_PATTERNS = ("curves-*.png", "pareto-*.png", "corr-*.png", "share-*.png")


# ------------------------------------------------------------------------------------------ selection


@dataclass
class Selection:
    """The runs a report uses and what it must warn about."""

    cells: dict[tuple[str, str], dict[str, list[RunRecord]]]  # (task, model) → method label → runs by seed
    failed: list[RunRecord] = field(default_factory=list)  # latest attempt of keys that never finished
    recovered: int = 0  # failed/killed attempts whose key later FINISHED
    superseded: list[str] = field(default_factory=list)  # cells with several configs; latest kept
    parents: list[RunRecord] = field(default_factory=list)  # sweep invocations, oldest first


def _end(run: RunRecord) -> int:
    return run.end_time or run.start_time


def _method_labels(runs: list[RunRecord]) -> dict[str, str]:
    """``run_id → method label``: the method name, plus its differing hyper-parameters when one
    method was run with several settings in the sweep (e.g. ``corrgrpo(floor=1.0)``)."""
    by_method: dict[str, set[tuple[tuple[str, str], ...]]] = defaultdict(set)
    signature = {}
    for run in runs:
        hp = tuple(
            sorted((k.removeprefix("method."), v) for k, v in run.params.items() if k.startswith("method."))
        )
        signature[run.run_id] = hp
        by_method[run.tags["mrbench.method"]].add(hp)
    labels = {}
    for run in runs:
        method = run.tags["mrbench.method"]
        variants = by_method[method]
        if len(variants) == 1:
            labels[run.run_id] = method
            continue
        differing = {k for variant in variants for k, v in variant if any((k, v) not in o for o in variants)}
        shown = ",".join(f"{k}={v}" for k, v in signature[run.run_id] if k in differing)
        labels[run.run_id] = f"{method}({shown})"
    return labels


def select_runs(runs: list[RunRecord]) -> Selection:
    """Latest FINISHED run per run key, then per (method label, task, model, seed)."""
    parents = sorted((r for r in runs if r.tags.get("mrbench.role") == "sweep"), key=lambda r: r.start_time)
    children = [r for r in runs if r.tags.get("mrbench.run_key")]
    by_key: dict[str, list[RunRecord]] = defaultdict(list)
    for run in children:
        by_key[run.tags["mrbench.run_key"]].append(run)
    chosen, failed, recovered = [], [], 0
    for attempts in by_key.values():
        finished = [r for r in attempts if r.status == "FINISHED"]
        if finished:
            chosen.append(max(finished, key=_end))
            recovered += sum(r.status in ("FAILED", "KILLED") for r in attempts)
        else:
            failed.append(max(attempts, key=lambda r: r.start_time))
    labels = _method_labels(chosen)
    by_cell: dict[tuple[str, str, str, str], list[RunRecord]] = defaultdict(list)
    for run in chosen:
        t = run.tags
        by_cell[
            (
                labels[run.run_id],
                t.get("mrbench.task", "?"),
                t.get("mrbench.model", "?"),
                t.get("mrbench.seed", "0"),
            )
        ].append(run)
    cells: dict[tuple[str, str], dict[str, list[RunRecord]]] = defaultdict(lambda: defaultdict(list))
    superseded = []
    for (label, task, model, seed), group in sorted(by_cell.items()):
        latest = max(group, key=_end)
        if len(group) > 1:
            superseded.append(f"{label}|{task}|{model}|s{seed} ({len(group)} settings)")
        cells[(task, model)][label].append(latest)
    for methods in cells.values():
        for runs_ in methods.values():
            runs_.sort(key=lambda r: int(r.tags.get("mrbench.seed", "0")))
    failed.sort(
        key=lambda r: (
            r.tags.get("mrbench.task", ""),
            r.tags.get("mrbench.model", ""),
            r.tags.get("mrbench.method", ""),
            r.tags.get("mrbench.seed", ""),
        )
    )
    return Selection({k: dict(v) for k, v in cells.items()}, failed, recovered, superseded, parents)


# ------------------------------------------------------------------------------------------- helpers


def _fmt(x: float | None) -> str:
    if x is None or not math.isfinite(x):
        return "–"
    return f"{x:.3f}" if abs(x) < 1000 else f"{x:.4g}"


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_")


def _common(values: Sequence[str], default: str = "") -> str:
    return Counter(values).most_common(1)[0][0] if values else default


def _split(value: str) -> list[str]:
    return [v for v in (value or "").split(",") if v]


def _ordered(names: set[str] | list[str], preferred: Sequence[str]) -> list[str]:
    names = set(names)
    head = [n for n in preferred if n in names]
    rest = sorted(names - set(head), key=lambda n: (n != BASELINE, n))
    return head + rest


@dataclass
class TaskInfo:
    """What the runs of one task say about it (from their tags)."""

    components: list[str]
    primary: str
    lower_is_better: set[str]


def _task_info(runs: list[RunRecord]) -> TaskInfo:
    return TaskInfo(
        _split(_common([r.tags.get("mrbench.reward_components", "") for r in runs])),
        _common([r.tags.get("mrbench.primary_metric", "") for r in runs]),
        set(_split(_common([r.tags.get("mrbench.lower_is_better", "") for r in runs]))),
    )


WINDOW_MIN_STEPS = 10
"""Fewest logged steps averaged at either end of a curve: in a 30-step CPU run, 10 % would be 3
steps (96 rollouts), noisy enough to call a rising reward falling."""


def _window(n_values: int, fraction: float) -> int:
    return min(n_values, max(math.ceil(n_values * fraction), WINDOW_MIN_STEPS))


def _tail_mean(history: History | None, fraction: float = 0.1) -> float:
    """Mean of the last ``fraction`` of a metric's logged values (at least :data:`WINDOW_MIN_STEPS`)."""
    if history is None or len(history[1]) == 0:
        return math.nan
    values = history[1]
    return float(np.nanmean(values[-_window(len(values), fraction) :]))


def _head_mean(history: History | None, fraction: float = 0.1) -> float:
    """Mean of the first ``fraction`` of a metric's logged values (same window as :func:`_tail_mean`)."""
    if history is None or len(history[1]) == 0:
        return math.nan
    values = history[1]
    return float(np.nanmean(values[: _window(len(values), fraction)]))


def _band(histories: list[History | None]) -> Any:
    """Mean curve across seeds with a bootstrap band, on the union of logged steps."""
    from mrbench.reporting.plots import Band

    present = [h for h in histories if h is not None and len(h[0])]
    if not present:
        return None
    steps = np.unique(np.concatenate([h[0] for h in present]))
    if len(steps) > MAX_CURVE_POINTS:
        steps = steps[np.unique(np.linspace(0, len(steps) - 1, MAX_CURVE_POINTS).astype(int))]
    matrix = np.full((len(present), len(steps)), np.nan)
    for i, (s, v) in enumerate(present):
        idx = np.searchsorted(s, steps)
        ok = (idx < len(s)) & (s[np.minimum(idx, len(s) - 1)] == steps)
        matrix[i, ok] = v[idx[ok]]
    mean, low, high = stats.curve_band(matrix)
    return Band(steps, mean, low, high, n_runs=len(present))


def _nanmean(values: list[float]) -> float:
    finite = [v for v in values if math.isfinite(v)]
    return sum(finite) / len(finite) if finite else math.nan


def _padded(columns: list[list[float]]) -> np.ndarray:
    """Columns of different lengths → ``[max_len, n_columns]`` with NaN padding."""
    rows = max((len(c) for c in columns), default=0)
    out = np.full((rows, len(columns)), np.nan)
    for j, col in enumerate(columns):
        out[: len(col), j] = col
    return out


# ------------------------------------------------------------------------------------------- builder


class ReportBuilder:
    """Computes the report's numbers and figures from a :class:`Selection` and writes report.md."""

    def __init__(
        self,
        sweep: str,
        reader: Reader,
        runs: list[RunRecord],
        out: Path,
        *,
        command: str,
        store_note: str,
        reps: int = stats.DEFAULT_REPS,
        seed: int = stats.DEFAULT_SEED,
        workers: int | None = None,
    ) -> None:
        self.sweep, self.reader, self.out = sweep, reader, out
        self.command, self.store_note = command, store_note
        self.reps, self.seed = reps, seed
        self.sel = select_runs(runs)
        self.latest_parent = self.sel.parents[-1] if self.sel.parents else None
        self.sweep_json = (
            self.reader.read_json_artifact(self.latest_parent, "sweep.json") if self.latest_parent else None
        )
        config = (self.sweep_json or {}).get("config", {})
        all_runs = [r for methods in self.sel.cells.values() for rs in methods.values() for r in rs]
        self.all_runs = all_runs
        self.methods = _ordered(
            {m for methods in self.sel.cells.values() for m in methods}, config.get("methods", [])
        )
        tasks = {t for t, _ in self.sel.cells}
        self.tasks = _ordered(tasks, config.get("tasks", []))
        self.task_info = {
            t: _task_info(
                [r for (tt, _), ms in self.sel.cells.items() if tt == t for rs in ms.values() for r in rs]
            )
            for t in self.tasks
        }
        model_pref = config.get("models", [])
        self.model_order = (
            model_pref if isinstance(model_pref, list) else [m for v in model_pref.values() for m in v]
        )
        from mrbench.reporting.plots import method_colors

        self.colors = method_colors(self.methods)
        self.jobs: list[Any] = []
        self.curve_items: dict[str, list[tuple[Path, dict[str, Any], str]]] = {}
        self.figures: list[Path] = []
        self.workers = workers
        self.histories: dict[str, dict[str, History]] = {}
        self.diagnostics: dict[str, Any] = {}

    def _figure(self, kind: str, path: Path, *args: Any, **kwargs: Any) -> None:
        """Queue a figure; :meth:`write` draws them all at the end (in parallel)."""
        from mrbench.reporting.plots import FigureJob

        self.jobs.append(FigureJob(kind, path, args, kwargs))

    # -- data ---------------------------------------------------------------------------------------

    def load(self) -> None:
        """Bulk-read learning curves and diagnostics of the selected runs."""
        keys = {"reward"} | {f"rewards/{c}/mean" for info in self.task_info.values() for c in info.components}
        self.histories = self.reader.histories([r.run_id for r in self.all_runs], keys)
        self.diagnostics = self.reader.read_json_artifacts(self.all_runs, "diagnostics.json")

    def models_for(self, task: str) -> list[str]:
        return _ordered({m for t, m in self.sel.cells if t == task}, self.model_order)

    def _scores(self, runs: list[RunRecord], metric: str) -> list[float]:
        return [r.metrics.get(f"eval/{metric}", math.nan) for r in runs]

    def _ci(self, values: list[float]) -> stats.Interval:
        clean = [v for v in values if math.isfinite(v)]
        if not clean:
            return stats.Interval(math.nan, math.nan, math.nan)
        return stats.stratified_bootstrap_ci(clean, stats.mean_score, reps=self.reps, seed=self.seed)

    # -- sections -----------------------------------------------------------------------------------

    def header(self) -> list[str]:
        sj = self.sweep_json or {}
        parent_tags = self.latest_parent.tags if self.latest_parent else {}
        commands = list(
            dict.fromkeys(
                p.tags.get("mrbench.command", "") for p in self.sel.parents if p.tags.get("mrbench.command")
            )
        )
        shas = Counter(r.tags.get("mrbench.git_sha", "unknown") for r in self.all_runs)
        versions = sj.get("versions") or {
            k.removeprefix("mrbench.version."): v
            for k, v in parent_tags.items()
            if k.startswith("mrbench.version.")
        }
        seed_counts = Counter(len(rs) for methods in self.sel.cells.values() for rs in methods.values())
        n_cells = sum(len(methods) for methods in self.sel.cells.values())
        lines = [
            f"# Sweep report: `{self.sweep}`",
            "",
            f"Every number and figure below is produced by `{self.command}` from the MLflow store alone "
            f"({self.store_note}, experiment `{self.sweep}`); rerun it to regenerate this folder.",
            "",
            "| | |",
            "|---|---|",
        ]
        if commands:
            lines.append(f"| sweep command | `{commands[-1]}` |")
            if len(commands) > 1:
                lines.append("| earlier commands | " + "<br>".join(f"`{c}`" for c in commands[:-1]) + " |")
        lines.append(f"| invocations (parent runs) | {len(self.sel.parents)} |")
        lines.append("| git sha | " + ", ".join(f"`{s}` ({n} runs)" for s, n in shas.most_common()) + " |")
        if versions:
            lines.append("| packages | " + ", ".join(f"{k} {v}" for k, v in sorted(versions.items())) + " |")
        lines.append(
            f"| cells (method × task × model) | {n_cells}: {len(self.methods)} methods × "
            f"{len(self.tasks)} tasks, "
            f"{len(self.all_runs)} runs used |"
        )
        lines.append(
            "| seeds per cell | "
            + ", ".join(f"{k} seeds: {v} cells" for k, v in sorted(seed_counts.items(), reverse=True))
            + " |"
        )
        lines.append(
            f"| statistics | mean and IQM (mean of the middle 50 %) over seeds; 95 % percentile CIs from a "
            f"stratified bootstrap over seeds ({self.reps} resamples, numpy seed {self.seed}); "
            "probability of improvement = P(run of X beats run of Y), ties ½, CI by the same bootstrap; "
            "the seed is the unit "
            "of replication |"
        )
        lines.append("")
        if sj.get("config"):
            import yaml

            lines += [
                "<details><summary>sweep config (latest invocation; usable as <code>--config</code>)"
                "</summary>",
                "",
                "```yaml",
                yaml.safe_dump(sj["config"], sort_keys=False).rstrip(),
                "```",
                "",
                "</details>",
                "",
            ]
        return lines

    def warnings(self) -> list[str]:
        out = []
        few = [
            (t, m, meth, len(rs))
            for (t, m), methods in self.sel.cells.items()
            for meth, rs in methods.items()
            if len(rs) < MIN_SEEDS
        ]
        if few:
            least = min(n for *_, n in few)
            out.append(
                f"**Few seeds**: {len(few)} of {sum(len(v) for v in self.sel.cells.values())} cells have "
                "fewer "
                f"than {MIN_SEEDS} seeds (fewest: {least}). Intervals from so few seeds are wide or (1 seed) "
                "degenerate; add seeds (`--seeds` / `--n-seeds`) before trusting a ranking."
            )
        if self.sel.failed:
            shown = [
                f"`{r.tags.get('mrbench.method')}|{r.tags.get('mrbench.task')}|{r.tags.get('mrbench.model')}"
                f"|s{r.tags.get('mrbench.seed')}` {r.status}"
                + (f" ({r.tags['mrbench.error'][:160]})" if r.tags.get("mrbench.error") else "")
                for r in self.sel.failed[:20]
            ]
            more = f" … and {len(self.sel.failed) - 20} more" if len(self.sel.failed) > 20 else ""
            out.append(
                f"**Failed cells** ({len(self.sel.failed)}, never FINISHED; not in the statistics): "
                + "; ".join(shown)
                + more
            )
        if self.sel.recovered:
            out.append(
                f"{self.sel.recovered} failed or interrupted attempt(s) were re-run and FINISHED later "
                "(only the finished runs are used)."
            )
        unavailable = (self.sweep_json or {}).get("unavailable") or {}
        if not unavailable and self.latest_parent is not None:
            unavailable = {
                t: "not built" for t in _split(self.latest_parent.tags.get("mrbench.unavailable_tasks", ""))
            }
        for task, reason in unavailable.items():
            out.append(f"**Unavailable task** `{task}`: {reason}. Its cells were not run.")
        grid = (self.sweep_json or {}).get("cells") or []
        used = {r.tags.get("mrbench.run_key") for r in self.all_runs}
        failed_keys = {r.tags.get("mrbench.run_key") for r in self.sel.failed}
        missing = [c for c in grid if c["run_key"] not in used and c["run_key"] not in failed_keys]
        if missing:
            names = ", ".join(f"`{c['method']}|{c['task']}|{c['model']}|s{c['seed']}`" for c in missing[:10])
            out.append(
                f"**Missing cells**: {len(missing)} cell(s) of the latest sweep grid have no run yet "
                f"({names}{' …' if len(missing) > 10 else ''}); rerun the sweep command to complete it."
            )
        if self.sel.superseded:
            out.append(
                f"**Several settings for one cell**: {len(self.sel.superseded)} cell(s) have FINISHED runs "
                "with different run keys (e.g. a changed `--steps`); the latest is used: "
                + ", ".join(self.sel.superseded[:5])
                + (" …" if len(self.sel.superseded) > 5 else "")
            )
        shas = {r.tags.get("mrbench.git_sha") for r in self.all_runs}
        if len(shas) > 1:
            out.append(f"**Mixed code versions**: runs come from {len(shas)} git commits (see the header).")
        if not out:
            return []
        return ["## Warnings", "", *[f"- {w}" for w in out], ""]

    def cell_section(self, task: str, model: str) -> tuple[list[str], dict[str, tuple[list[float], bool]]]:
        """Tables and learning curves for one task × model; returns the primary scores per method for
        the overall probability of improvement."""
        info = self.task_info[task]
        methods = self.sel.cells[(task, model)]
        names = [m for m in self.methods if m in methods]
        primary, lower = info.primary, info.primary in info.lower_is_better
        direction = "lower is better" if lower else "higher is better"
        lines = [
            f"### {task} · {model}",
            "",
            f"Primary metric `{primary}` ({direction}), final evaluation after training; one value per seed.",
            "",
            "| method | seeds | mean | IQM | 95 % CI | per seed |",
            "|---|---|---|---|---|---|",
        ]
        intervals, scores = {}, {}
        for name in names:
            runs = methods[name]
            values = self._scores(runs, primary)
            scores[name] = (values, lower)
            ci = self._ci(values)
            intervals[name] = ci
            finite = np.array([v for v in values if math.isfinite(v)])
            iqm = float(stats.iqm(stats.as_matrix(finite))) if len(finite) else math.nan
            per_seed = ", ".join(
                f"s{r.tags.get('mrbench.seed')}: {_fmt(v)}" for r, v in zip(runs, values, strict=True)
            )
            lines.append(
                f"| {name} | {len(runs)} | {_fmt(ci.point)} | {_fmt(iqm)} | "
                f"[{_fmt(ci.low)}, {_fmt(ci.high)}] | {per_seed} |"
            )
        lines.append("")
        enough = len(names) >= 2 and all(sum(math.isfinite(v) for v in scores[n][0]) >= 2 for n in names)
        winner = stats.separated_winner(intervals, lower_is_better=lower) if enough else None
        if winner:
            lines.append(f"**Winner: {winner}** — its 95 % CI is separated from every other method's.")
        elif not enough:
            lines.append("No winner named: it needs at least 2 methods with 2+ seeds each.")
        else:
            lines.append("No winner: the 95 % CIs overlap.")
        lines.append("")
        lines += self._eval_table(methods, names, info)
        lines += self._poi_table(scores, names)
        lines += self._curves(task, model, methods, names, info)
        return lines, scores

    def _eval_table(self, methods: dict[str, list[RunRecord]], names: list[str], info: TaskInfo) -> list[str]:
        metrics = sorted(
            {
                k.removeprefix("eval/")
                for n in names
                for r in methods[n]
                for k in r.metrics
                if k.startswith("eval/")
            },
            key=lambda m: (m != info.primary, m),
        )
        if len(metrics) <= 1:
            return []
        cell = {
            (name, metric): self._ci(self._scores(methods[name], metric))
            for name in names
            for metric in metrics
        }
        shown = {k: f"{_fmt(ci.point)} [{_fmt(ci.low)}, {_fmt(ci.high)}]" for k, ci in cell.items()}
        arrow = {m: f"{m} {'↓' if m in info.lower_is_better else '↑'}" for m in metrics}
        lines = ["All eval metrics: mean [95 % CI] over seeds.", ""]
        if len(metrics) > len(names):  # many metrics, few methods: one row per metric stays readable
            lines += ["| metric | " + " | ".join(names) + " |", "|" + "---|" * (len(names) + 1)]
            lines += [f"| {arrow[m]} | " + " | ".join(shown[(n, m)] for n in names) + " |" for m in metrics]
        else:
            lines += [
                "| method | " + " | ".join(arrow[m] for m in metrics) + " |",
                "|" + "---|" * (len(metrics) + 1),
            ]
            lines += [f"| {n} | " + " | ".join(shown[(n, m)] for m in metrics) + " |" for n in names]
        return [*lines, ""]

    def _poi(self, x: np.ndarray, y: np.ndarray) -> stats.Interval:
        return stats.probability_of_improvement(x, y, reps=self.reps, seed=self.seed)

    def _poi_table(self, scores: dict[str, tuple[list[float], bool]], names: list[str]) -> list[str]:
        if BASELINE not in scores or len(names) < 2:
            return []
        base, lower = scores[BASELINE]
        sign = -1.0 if lower else 1.0
        lines = [
            f"Probability of improvement over `{BASELINE}` on the primary metric (0.5 = no difference):",
            "",
            f"| method | P(method > {BASELINE}) | 95 % CI |",
            "|---|---|---|",
        ]
        y = np.array([v for v in base if math.isfinite(v)]) * sign
        for name in names:
            if name == BASELINE:
                continue
            x = np.array([v for v in scores[name][0] if math.isfinite(v)]) * sign
            if not len(x) or not len(y):
                continue
            p = self._poi(x, y)
            lines.append(f"| {name} | {_fmt(p.point)} | [{_fmt(p.low)}, {_fmt(p.high)}] |")
        return [*lines, ""]

    def _curves(
        self, task: str, model: str, methods: dict[str, list[RunRecord]], names: list[str], info: TaskInfo
    ) -> list[str]:
        panels: dict[str, dict[str, Any]] = {}
        for comp in [*info.components, None]:
            key = "reward" if comp is None else f"rewards/{comp}/mean"
            title = "total reward (weighted)" if comp is None else comp
            per_method = {}
            for name in names:
                band = _band([self.histories.get(r.run_id, {}).get(key) for r in methods[name]])
                if band is not None:
                    per_method[name] = band
            if per_method:
                panels[title] = per_method
        if not panels:
            return ["No learning curves were logged for this cell.", ""]
        path = self.out / f"curves-{_slug(task)}-{_slug(model)}.png"
        title = f"{task} · {model}: training reward per component (mean ± 95 % CI over seeds)"
        # Drawn in one series per task on a reused figure (see plots.learning_curves_series).
        self.curve_items.setdefault(task, []).append((path, panels, title))
        return [f"![learning curves {task} {model}]({path.name})", ""]

    def overall_poi(
        self, all_scores: dict[tuple[str, str], dict[str, tuple[list[float], bool]]]
    ) -> list[str]:
        columns = [(k, s) for k, s in all_scores.items() if BASELINE in s]
        if not columns or len(self.methods) < 2:
            return []
        lines = [
            "## Probability of improvement over grpo, all tasks and models",
            "",
            "Each task × model is one stratum (seeds resampled within it); lower-is-better metrics are "
            "negated.",
            "",
            f"| method | cells | P(method > {BASELINE}) | 95 % CI |",
            "|---|---|---|---|",
        ]
        for name in self.methods:
            if name == BASELINE:
                continue
            xs, ys = [], []
            for _key, s in columns:
                if name not in s:
                    continue
                sign = -1.0 if s[name][1] else 1.0
                x = [v * sign for v in s[name][0] if math.isfinite(v)]
                y = [v * sign for v in s[BASELINE][0] if math.isfinite(v)]
                if x and y:
                    xs.append(x)
                    ys.append(y)
            if not xs:
                continue
            p = self._poi(_padded(xs), _padded(ys))
            lines.append(f"| {name} | {len(xs)} | {_fmt(p.point)} | [{_fmt(p.low)}, {_fmt(p.high)}] |")
        return [*lines, ""]

    def pareto_section(self) -> list[str]:
        from mrbench.reporting.plots import ParetoPoint

        lines = [
            "## Trade-offs between reward components (Pareto)",
            "",
            "Final training reward of two main components (mean of the last 10 % of logged steps per run, "
            f"at least {WINDOW_MIN_STEPS}); "
            "dots are seeds, bars 95 % CIs, the dashed line the Pareto front (both higher is better).",
            "",
        ]
        for task in self.tasks:
            comps = self.task_info[task].components
            x_c, y_c = PARETO_AXES.get(task, (None, None))
            if x_c not in comps or y_c not in comps:
                if len(comps) < 2:
                    lines += [f"`{task}` has fewer than two reward components: no Pareto plot.", ""]
                    continue
                x_c, y_c = comps[0], comps[1]
            panels: dict[str, dict[str, Any]] = {}
            for model in self.models_for(task):
                per_method = {}
                for name, runs in self.sel.cells[(task, model)].items():
                    pts = [
                        (
                            _tail_mean(self.histories.get(r.run_id, {}).get(f"rewards/{x_c}/mean")),
                            _tail_mean(self.histories.get(r.run_id, {}).get(f"rewards/{y_c}/mean")),
                        )
                        for r in runs
                    ]
                    pts = [p for p in pts if math.isfinite(p[0]) and math.isfinite(p[1])]
                    if not pts:
                        continue
                    cx = self._ci([p[0] for p in pts])
                    cy = self._ci([p[1] for p in pts])
                    per_method[name] = ParetoPoint(
                        (cx.point, cx.low, cx.high), (cy.point, cy.low, cy.high), pts
                    )
                if per_method:
                    panels[model] = {m: per_method[m] for m in self.methods if m in per_method}
            if not panels:
                continue
            path = self.out / f"pareto-{_slug(task)}.png"
            self._figure(
                "pareto_plot",
                path,
                panels,
                x_label=x_c,
                y_label=y_c,
                title=f"{task}: {x_c} vs {y_c}",
                colors=self.colors,
            )
            lines += [f"![pareto {task}]({path.name})", ""]
        return lines

    def why_section(self) -> list[str]:
        lines = [
            "## Why methods differ: reward correlations and advantage shares",
            "",
            "From each run's `diagnostics.json`: the within-group Pearson correlation of the reward "
            "components (mean over training, then over runs) and each component's share of the advantage. "
            "Strongly correlated components inflate GRPO's denominator; a component with a large share "
            "dominates the learning signal.",
            "",
        ]
        for task in self.tasks:
            comps = self.task_info[task].components
            matrices: dict[str, np.ndarray] = {}
            shares: dict[str, np.ndarray] = {}
            for name in self.methods:
                runs = [r for m in self.models_for(task) for r in self.sel.cells[(task, m)].get(name, [])]
                mats, shs = [], []
                for run in runs:
                    diag = self.diagnostics.get(run.run_id) or {}
                    order = diag.get("components") or comps
                    if diag.get("corr_matrix") is not None and list(order) == comps:
                        mats.append(
                            np.array(
                                [[math.nan if v is None else v for v in row] for row in diag["corr_matrix"]],
                                dtype=float,
                            )
                        )
                    share = diag.get("share") if list(order) == comps else None
                    if share is None:
                        share = [run.metrics.get(f"adv/share/{c}") for c in comps]
                    shs.append(np.array([math.nan if v is None else v for v in share], dtype=float))
                with np.errstate(invalid="ignore"):
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore", RuntimeWarning)
                        if mats:
                            matrices[name] = np.nanmean(np.stack(mats), axis=0)
                        if shs and not np.all(np.isnan(np.stack(shs))):
                            shares[name] = np.nanmean(np.stack(shs), axis=0)
            if matrices:
                path = self.out / f"corr-{_slug(task)}.png"
                self._figure(
                    "correlation_heatmaps",
                    path,
                    matrices,
                    comps,
                    title=f"{task}: within-group reward correlation (mean over training and runs)",
                )
                lines += [f"![correlations {task}]({path.name})", ""]
            else:
                lines += [f"`{task}`: no correlation diagnostics logged.", ""]
            if shares:
                path = self.out / f"share-{_slug(task)}.png"
                self._figure(
                    "advantage_share_bars",
                    path,
                    shares,
                    comps,
                    title=f"{task}: share of the advantage per component",
                    colors=self.colors,
                )
                lines += [f"![advantage share {task}]({path.name})", ""]
                lines += ["| method | " + " | ".join(comps) + " |", "|" + "---|" * (len(comps) + 1)]
                for name, share in shares.items():
                    lines.append(f"| {name} | " + " | ".join(_fmt(v) for v in share) + " |")
                lines.append("")
        return lines

    def improvement_section(self) -> list[str]:
        lines = [
            "## Did training improve the primary eval metric?",
            "",
            "Each run's primary metric after training vs. its own pre-training value (`eval_before/…`).",
            "",
            "| task | model | method | before (mean) | after (mean) | improved seeds |",
            "|---|---|---|---|---|---|",
        ]
        not_improved = []
        for task in self.tasks:
            info = self.task_info[task]
            lower = info.primary in info.lower_is_better
            for model in self.models_for(task):
                for name in [m for m in self.methods if m in self.sel.cells[(task, model)]]:
                    runs = self.sel.cells[(task, model)][name]
                    befores = [r.metrics.get(f"eval_before/{info.primary}", math.nan) for r in runs]
                    afters = [r.metrics.get(f"eval/{info.primary}", math.nan) for r in runs]
                    better = [(a < b) if lower else (a > b) for b, a in zip(befores, afters, strict=True)]
                    lines.append(
                        f"| {task} | {model} | {name} | {_fmt(_nanmean(befores))} | "
                        f"{_fmt(_nanmean(afters))} | "
                        f"{sum(better)}/{len(runs)} |"
                    )
                    for run, b, a, ok in zip(runs, befores, afters, better, strict=True):
                        if not ok:
                            not_improved.append(
                                f"`{name}|{task}|{model}|s{run.tags.get('mrbench.seed')}`: "
                                f"{info.primary} {_fmt(b)} → {_fmt(a)}; {self._why_not(run)}"
                            )
        lines.append("")
        if not_improved:
            lines += [
                f"Not improved ({len(not_improved)} run(s)) and what the logs suggest (training rewards: "
                f"mean of the first → the last 10 % of logged steps, at least {WINDOW_MIN_STEPS}):",
                "",
            ]
            lines += [f"- {item}" for item in not_improved]
        else:
            lines.append("Every run's primary metric improved over its pre-training value.")
        return [*lines, ""]

    def _why_not(self, run: RunRecord) -> str:
        reasons = []
        hist = self.histories.get(run.run_id, {}).get("reward")
        first, last = _head_mean(hist), _tail_mean(hist)
        if not math.isfinite(first) or not math.isfinite(last):
            reasons.append("no training reward was logged")
        elif last <= first:
            reasons.append(f"the training reward did not rise ({_fmt(first)} → {_fmt(last)})")
        else:
            reasons.append(
                f"the training reward rose ({_fmt(first)} → {_fmt(last)}) but the eval metric did not "
                "follow (too few steps, or the reward does not track the metric)"
            )
        moves = self._component_moves(run)
        if moves:
            reasons.append(f"per component: {moves}")
        zero_var = run.metrics.get("adv/frac_zero_var_groups")
        if zero_var is not None and math.isfinite(zero_var) and zero_var >= 0.5:
            reasons.append(
                f"{zero_var:.0%} of groups had zero reward variance at the end (no learning signal)"
            )
        return "; ".join(reasons)

    def _component_moves(self, run: RunRecord) -> str:
        """``"utility 0.047 → 0.091 (rose), safety …"`` over the same windows as the total, or ``""``.

        Why: a summed reward can fall while one component rises (a safety gain paid for with
        utility, or the reverse), which is what a multi-reward comparison needs to see.
        """
        info = self.task_info.get(run.tags.get("mrbench.task", ""))
        if info is None or len(info.components) < 2:
            return ""
        parts = []
        for comp in info.components:
            hist = self.histories.get(run.run_id, {}).get(f"rewards/{comp}/mean")
            first, last = _head_mean(hist), _tail_mean(hist)
            if math.isfinite(first) and math.isfinite(last):
                trend = "rose" if last > first else "fell" if last < first else "flat"
                parts.append(f"{comp} {_fmt(first)} → {_fmt(last)} ({trend})")
        return ", ".join(parts)

    # -- assembly -----------------------------------------------------------------------------------

    def write(self) -> Path:
        self.out.mkdir(parents=True, exist_ok=True)
        for pattern in FIGURE_PATTERNS:  # figures of an earlier report that this one may not redraw
            for old in self.out.glob(pattern):
                old.unlink()
        self.load()
        lines = self.header() + self.warnings()
        if not self.sel.cells:
            lines += ["No FINISHED runs yet: nothing to compare.", ""]
        else:
            lines += ["## Results per task and model", ""]
            all_scores = {}
            for task in self.tasks:
                for model in self.models_for(task):
                    section, scores = self.cell_section(task, model)
                    lines += section
                    all_scores[(task, model)] = scores
            lines += self.overall_poi(all_scores)
            lines += self.pareto_section()
            lines += self.why_section()
            lines += self.improvement_section()
        lines += ["---", f"Generated by `{self.command}`."]
        from mrbench.reporting.plots import FigureJob, render

        series = [
            FigureJob("learning_curves_series", None, (items,), {"colors": self.colors})
            for items in self.curve_items.values()
        ]
        self.figures = render(series + self.jobs, self.workers)
        path = self.out / "report.md"
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        return path


def _report_command(sweep: str, tracking_uri: str, out: Path) -> tuple[str, str]:
    """The command that regenerates this report, and how the store is described."""
    import shlex

    from mrbench.engine.tracking import resolve_tracking_uri

    parts = ["mrbench", "report", sweep]
    default_uri = resolve_tracking_uri(None)
    if tracking_uri != default_uri:
        parts += ["--tracking-uri", tracking_uri]
        note = f"store `{tracking_uri}`"
    else:
        note = "the default store"
    default_out = (Path("reports") / sweep).resolve()
    if out.resolve() != default_out:
        parts += ["--out", str(out)]
    return shlex.join(parts), note


def build_report(
    sweep: str,
    *,
    tracking_uri: str | None = None,
    out: Path | None = None,
    parent_run_id: str | None = None,
    log_to_parent: bool = True,
    reader: str = "auto",
    reps: int = stats.DEFAULT_REPS,
    workers: int | None = None,
) -> Path:
    """Write ``<out>/report.md`` (default ``reports/<sweep>``) and its figures; return the report path.

    Logs the folder to ``parent_run_id`` (default: the sweep's latest parent run) under
    ``report/``. Raises UserError if the sweep's experiment does not exist.
    """
    from mrbench.engine.tracking import resolve_tracking_uri

    uri = resolve_tracking_uri(tracking_uri)
    out = Path(out) if out is not None else Path("reports") / sweep
    if uri.startswith("sqlite:///") and not Path(uri.removeprefix("sqlite:///")).exists():
        raise UserError(f"no tracking store at {uri!r}: run a sweep first, or pass --tracking-uri")
    store = open_reader(uri, reader)
    try:
        experiment_id = store.experiment_id(sweep)
        if experiment_id is None:
            raise UserError(
                f"no sweep named {sweep!r} in the tracking store {uri!r} (no such MLflow experiment)"
            )
        runs = store.runs(experiment_id)
        command, note = _report_command(sweep, uri, out)
        builder = ReportBuilder(
            sweep, store, runs, out, command=command, store_note=note, reps=reps, workers=workers
        )
        path = builder.write()
    finally:
        store.close()
    if log_to_parent:
        parent_id = parent_run_id or (builder.latest_parent.run_id if builder.latest_parent else None)
        parent = next((r for r in runs if r.run_id == parent_id), None)
        if parent_id:
            _log_to_run(uri, parent_id, parent.artifact_uri if parent else "", [path, *builder.figures])
    return path


def _log_to_run(tracking_uri: str, run_id: str, artifact_uri: str, files: list[Path]) -> None:
    """Log ``files`` under ``report/`` of run ``run_id``; a local artifact store is written through
    MLflow's local artifact repository directly (no tracking client to start: ~1 s saved)."""
    if local_artifact_path(artifact_uri) is not None:
        from mlflow.store.artifact.local_artifact_repo import LocalArtifactRepository

        repo = LocalArtifactRepository(artifact_uri)
        for file in files:
            repo.log_artifact(str(file), "report")
        return
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=tracking_uri)
    for file in files:
        client.log_artifact(run_id, str(file), artifact_path="report")
