"""The task-independent machinery of ``mrbench score``.

A task becomes scorable by overriding the three scoring hooks of
:class:`~mrbench.core.contracts.Task` — ``score_datasets()`` (the datasets ``--dataset`` may
name), ``gold_items(dataset)`` (reference answers as input items, ``--gold``) and
``score_items(items)`` (one :class:`~mrbench.core.contracts.ScoredItem` per item, a bad item
reported in its own ``ScoredItem``); their defaults raise a :class:`UserError` saying the task
cannot be scored.

Everything else — reading the JSONL input with per-line errors, the summary (mean of each
reward component over the scored items), the status counts, timing and the JSON/text output —
is here, shared by every task.
"""

from __future__ import annotations

import json
import math
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mrbench.core.contracts import ScoredItem, Task
from mrbench.core.errors import UserError


@dataclass
class ScoreReport:
    """Result of scoring one input: ``to_dict()`` is the ``--json`` output."""

    task: str
    dataset: str
    summary: dict[str, float | None]
    status_counts: dict[str, int]
    wall_s: float
    items: list[dict[str, Any]]
    errors: list[dict[str, Any]] = field(default_factory=list)

    @property
    def n(self) -> int:
        """Items scored (invalid items and malformed lines excluded)."""
        return sum(1 for item in self.items if "error" not in item)

    def to_dict(self) -> dict[str, Any]:
        """``{"task", "dataset", "n", "summary", "status_counts", "wall_s", "items", "errors"}``."""
        return {
            "task": self.task,
            "dataset": self.dataset,
            "n": self.n,
            "summary": self.summary,
            "status_counts": self.status_counts,
            "wall_s": round(self.wall_s, 4),
            "items": self.items,
            "errors": self.errors,
        }


REQUIRED_FIELDS = ("dataset", "id", "completion")


def read_items(path: str | Path) -> tuple[list[tuple[int, dict[str, Any]]], list[dict[str, Any]]]:
    """(line number, item) for every valid line of a JSONL file, and ``{"line", "error"}`` for the rest.

    A valid line is a JSON object with a string ``dataset``, an ``id`` (string or integer,
    kept as a string) and a string ``completion``. Blank lines are skipped.
    """
    file = Path(path)
    if not file.is_file():
        raise UserError(f"input file {str(path)!r} does not exist")
    items: list[tuple[int, dict[str, Any]]] = []
    errors: list[dict[str, Any]] = []
    with file.open(encoding="utf-8", errors="replace") as fh:
        for number, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                item = json.loads(line)
            except json.JSONDecodeError as exc:
                errors.append({"line": number, "error": f"not valid JSON: {exc.msg} (column {exc.colno})"})
                continue
            except RecursionError:  # e.g. 100,000 '[': Python's parser recurses once per level
                errors.append({"line": number, "error": "not valid JSON here: nested too deeply"})
                continue
            problem = _field_problem(item)
            if problem:
                errors.append({"line": number, "error": problem})
                continue
            item["id"] = str(item["id"])
            items.append((number, item))
    return items, errors


def _field_problem(item: Any) -> str | None:
    if not isinstance(item, dict):
        return f"expected a JSON object with {', '.join(REQUIRED_FIELDS)}, got {type(item).__name__}"
    missing = [k for k in REQUIRED_FIELDS if k not in item]
    if missing:
        return f"missing field(s) {', '.join(repr(k) for k in missing)}"
    if not isinstance(item["dataset"], str):
        return f"'dataset' must be a string, got {item['dataset']!r}"
    if isinstance(item["id"], bool) or not isinstance(item["id"], str | int):
        return f"'id' must be a string or an integer, got {item['id']!r}"
    if not isinstance(item["completion"], str):
        return f"'completion' must be a string, got {type(item['completion']).__name__}"
    return None


def parse_settings(values: list[str], flag: str) -> dict[str, str]:
    """``["key=value", …]`` → ``{key: value}`` by the rules of :mod:`mrbench.kit.keyvalue`;
    :class:`UserError` naming ``flag`` and the bad item otherwise.

    >>> parse_settings(["n_train=10", "weights = paper"], "--task-param")
    {'n_train': '10', 'weights': 'paper'}
    """
    from mrbench.kit.keyvalue import parse_key_values

    return parse_key_values(values, flag=flag)


def summarize(scored: list[ScoredItem]) -> dict[str, float | None]:
    """Mean of each component over the items where it is a finite number (None if there are none).

    >>> summarize([ScoredItem("a", {"x": 1.0, "y": None}, "ok"), ScoredItem("b", {"x": 0.0, "y": 0.5}, "ok")])
    {'x': 0.5, 'y': 0.5}
    """
    names: list[str] = []
    for item in scored:
        names += [k for k in item.rewards if k not in names]
    summary: dict[str, float | None] = {}
    for name in names:
        values = [item.rewards.get(name) for item in scored if item.error is None]
        finite = [float(v) for v in values if isinstance(v, int | float) and math.isfinite(v)]
        summary[name] = round(sum(finite) / len(finite), 6) if finite else None
    return summary


def score_task(
    task_name: str,
    *,
    input_path: str | Path | None = None,
    dataset: str | None = None,
    gold: bool = False,
    task_params: dict[str, Any] | None = None,
) -> ScoreReport:
    """Score an input file, or a dataset's reference answers (``gold``), with a registered task."""
    from mrbench.tasks import build_task

    if (input_path is None) == (dataset is None):
        raise UserError("give either --input FILE.jsonl or --dataset NAME --gold")
    if dataset is not None and not gold:
        raise UserError(
            f"--dataset {dataset!r} scores the reference answers: add --gold (or use --input FILE.jsonl)"
        )
    if gold and dataset is None:
        raise UserError("--gold needs --dataset NAME")
    task = build_task(task_name, task_params)  # a bad name or setting is a UserError already
    try:
        return _score(task, task_name, input_path, dataset)
    finally:
        task.close()


def _score(task: Task, task_name: str, input_path: str | Path | None, dataset: str | None) -> ScoreReport:
    known = list(task.score_datasets())  # first: a task without scoring says so before any input is read
    errors: list[dict[str, Any]] = []
    if dataset is not None:
        if dataset not in known:
            raise UserError(f"task {task_name!r} has no dataset {dataset!r}; choose from {', '.join(known)}")
        try:
            raw = task.gold_items(dataset)
        except (RuntimeError, ValueError, OSError) as exc:  # e.g. a hub dataset while offline
            raise UserError(str(exc)) from None
        numbered: list[tuple[int | None, dict[str, Any]]] = [(None, item) for item in raw]
        label = dataset
    else:
        assert input_path is not None
        read, errors = read_items(input_path)
        if not read and not errors:
            raise UserError(
                f"input file {str(input_path)!r} has no items: expected one JSON object per line "
                '({"dataset", "id", "completion"})'
            )
        numbered = list(read)
        names = sorted({item["dataset"] for _, item in numbered})
        label = names[0] if len(names) == 1 else ("mixed" if names else "")
    started = time.perf_counter()
    scored = task.score_items([item for _, item in numbered]) if numbered else []
    wall_s = time.perf_counter() - started
    if len(scored) != len(numbered):
        raise RuntimeError(f"task {task_name!r} returned {len(scored)} scores for {len(numbered)} items")
    items: list[dict[str, Any]] = []
    for (line, _), result in zip(numbered, scored, strict=True):
        row: dict[str, Any] = {"id": result.id, "rewards": result.rewards, "status": result.status}
        if line is not None:
            row["line"] = line
        if result.error is not None:
            row["error"] = result.error
            errors.append({"line": line, "id": result.id, "error": result.error})
        items.append(row)
    counts = Counter(result.status for result in scored)
    if any("id" not in e for e in errors):
        counts["malformed_input"] = sum(1 for e in errors if "id" not in e)
    errors.sort(key=lambda e: e.get("line") or 0)
    return ScoreReport(task_name, label, summarize(scored), dict(counts), wall_s, items, errors)


def format_report(report: ScoreReport) -> str:
    """Human-readable summary: per-component means, status counts and per-line errors."""
    lines = [
        f"task {report.task} · dataset {report.dataset or '-'} · {report.n} scored · {report.wall_s:.2f} s"
    ]
    if report.summary:
        header = "component"  # as wide as the names at least: "utility" alone would glue it to "mean"
        width = max(len(header), *(len(name) for name in report.summary)) + 2
        lines.append(f"{header:<{width}}mean")
        for name, value in report.summary.items():
            lines.append(f"{name:<{width}}{'-' if value is None else f'{value:.3f}'}")
    lines.append("status: " + ", ".join(f"{k} {v}" for k, v in sorted(report.status_counts.items())))
    for error in report.errors:
        where = f"line {error['line']}" if error.get("line") else f"id {error.get('id')!r}"
        lines.append(f"error: {where}: {error['error']}")
    return "\n".join(lines)
