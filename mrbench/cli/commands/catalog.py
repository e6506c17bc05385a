"""``mrbench methods`` and ``mrbench tasks``: what is registered, with hyper-parameters and rewards.

Both list the built-ins and the plugins of installed distributions (entry points), each with
where it came from (``source``: ``built-in``, ``entry point <distribution>`` or ``module
<module>``). A plugin that cannot be loaded or built is listed as unavailable with the reason;
it never hides the others.
"""

from __future__ import annotations

import json
from typing import Any

import typer

from mrbench.core.errors import UserError
from mrbench.core.registry import BUILT_IN, PluginProblem, Range


def _unavailable(problem: PluginProblem) -> dict[str, Any]:
    return {"name": problem.name, "source": problem.source, "available": False, "reason": problem.reason}


def list_methods() -> list[dict[str, Any]]:
    """``[{"name", "source", "params": {name: default}, "ranges": {name: {"gt"|"ge"|"lt"|"le":
    bound}}, "summary", "available"}]`` for every registered method (``ranges``: the declared
    :class:`~mrbench.core.registry.Range` of each hyper-parameter that has one); a plugin that
    cannot be loaded has ``"available": false`` and ``"reason"``."""
    import mrbench.methods as methods

    entries, problems = methods.METHODS.catalog()
    rows: list[dict[str, Any]] = [
        {
            "name": e.name,
            "source": e.source,
            "params": e.params,
            "ranges": {k: r.bounds() for k, r in e.ranges.items()},
            "summary": e.summary,
            "available": True,
        }
        for e in entries
    ]
    return rows + [{**_unavailable(p), "params": {}, "ranges": {}, "summary": ""} for p in problems]


def _param_text(row: dict[str, Any]) -> str:
    """``eps=1e-06 (> 0), n=3`` for the table of ``mrbench methods``."""
    parts = []
    for key, default in row["params"].items():
        bound = row["ranges"].get(key)
        parts.append(f"{key}={default!r}" + (f" ({Range(**bound)})" if bound else ""))
    return ", ".join(parts) or "-"


def _task_row(entry: Any) -> dict[str, Any]:
    import mrbench.tasks as tasks

    base = {"name": entry.name, "source": entry.source}
    try:
        task = tasks.build_task(entry.name)
    except ImportError as exc:
        reason = str(exc)
    except Exception as exc:  # a plugin's own failure must not hide the other tasks
        if entry.source == BUILT_IN:
            raise
        reason = str(exc) if isinstance(exc, UserError) else f"{type(exc).__name__}: {exc}"
    else:
        try:
            components = task.reward_components()
            return {
                **base,
                "version": task.version,
                "rewards": [c.name for c in components],
                "weights": {c.name: c.weight for c in components},
                "primary_metric": task.primary_metric,
                "params": entry.params,
                "available": True,
                "summary": entry.summary,
            }
        finally:
            close = getattr(task, "close", None)
            if callable(close):
                close()
    row = {"version": None, "rewards": [], "weights": {}, "available": False, "reason": reason}
    return {**base, **row, "summary": entry.summary}


def list_tasks() -> list[dict[str, Any]]:
    """``[{"name", "source", "version", "rewards", "weights", "primary_metric", "params",
    "available", "summary"}]``; tasks that cannot be built here are listed with
    ``"available": false`` and the reason."""
    import mrbench.tasks as tasks

    entries, problems = tasks.TASKS.catalog()
    rows = [_task_row(entry) for entry in entries]
    extra = {"version": None, "rewards": [], "weights": {}, "summary": ""}
    return rows + [{**_unavailable(p), **extra} for p in problems]


def _origin(row: dict[str, Any]) -> str:
    """``""`` for a built-in, else ``"  [<source>]"`` after the row."""
    return "" if row["source"] == BUILT_IN else f"  [{row['source']}]"


def register(app: typer.Typer) -> None:
    @app.command("methods")
    def methods_cmd(
        as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
    ) -> None:
        """List the advantage estimators (built-in and plugins) with their hyper-parameters."""
        rows = list_methods()
        if as_json:
            typer.echo(json.dumps(rows, indent=2))
            return
        for row in rows:
            if not row["available"]:
                typer.echo(f"{row['name']:<18} unavailable: {row['reason']}")
                continue
            typer.echo(f"{row['name']:<18} {_param_text(row):<44} {row['summary']}{_origin(row)}")

    @app.command("tasks")
    def tasks_cmd(
        as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
    ) -> None:
        """List the tasks (built-in and plugins) with their reward components and default weights."""
        rows = list_tasks()
        if as_json:
            typer.echo(json.dumps(rows, indent=2))
            return
        for row in rows:
            if not row["available"]:
                typer.echo(f"{row['name']:<16} unavailable: {row['reason']}{_origin(row)}")
                continue
            weights = ", ".join(f"{k}×{v:g}" for k, v in row["weights"].items())
            typer.echo(
                f"{row['name']:<16} v{row['version']:<6} primary={row['primary_metric']:<12} "
                f"{weights}{_origin(row)}"
            )
