"""``mrbench methods`` and ``mrbench tasks``: what is registered, with hyper-parameters and rewards."""

from __future__ import annotations

import json
from typing import Any

import typer


def list_methods() -> list[dict[str, Any]]:
    """``[{"name", "params": {name: default}, "summary"}]`` for every registered method."""
    import mrbench.methods as methods

    return [{"name": e.name, "params": e.params, "summary": e.summary} for e in methods.METHODS]


def list_tasks() -> list[dict[str, Any]]:
    """``[{"name", "version", "rewards", "weights", "primary_metric", "summary"}]``; tasks that
    cannot be built here are listed with ``"available": false`` and the reason."""
    import mrbench.tasks as tasks

    rows: list[dict[str, Any]] = []
    for entry in tasks.TASKS:
        try:
            task = entry.obj(**entry.params)
        except ImportError as exc:
            rows.append(
                {
                    "name": entry.name,
                    "version": None,
                    "rewards": [],
                    "weights": {},
                    "available": False,
                    "reason": str(exc),
                    "summary": entry.summary,
                }
            )
            continue
        components = task.reward_components()
        rows.append(
            {
                "name": entry.name,
                "version": task.version,
                "rewards": [c.name for c in components],
                "weights": {c.name: c.weight for c in components},
                "primary_metric": task.primary_metric,
                "params": entry.params,
                "available": True,
                "summary": entry.summary,
            }
        )
    return rows


def register(app: typer.Typer) -> None:
    @app.command("methods")
    def methods_cmd(
        as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
    ) -> None:
        """List the advantage estimators with their hyper-parameters."""
        rows = list_methods()
        if as_json:
            typer.echo(json.dumps(rows, indent=2))
            return
        for row in rows:
            params = ", ".join(f"{k}={v!r}" for k, v in row["params"].items()) or "-"
            typer.echo(f"{row['name']:<18} {params:<32} {row['summary']}")

    @app.command("tasks")
    def tasks_cmd(
        as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
    ) -> None:
        """List the tasks with their reward components and default weights."""
        rows = list_tasks()
        if as_json:
            typer.echo(json.dumps(rows, indent=2))
            return
        for row in rows:
            if not row["available"]:
                typer.echo(f"{row['name']:<16} unavailable: {row['reason']}")
                continue
            weights = ", ".join(f"{k}×{v:g}" for k, v in row["weights"].items())
            typer.echo(
                f"{row['name']:<16} v{row['version']:<6} primary={row['primary_metric']:<12} {weights}"
            )
