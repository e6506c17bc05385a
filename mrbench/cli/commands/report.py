"""``mrbench report SWEEP``: regenerate a sweep's report from MLflow alone."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def register(app: typer.Typer) -> None:
    @app.command("report")
    def report_cmd(
        sweep: Annotated[str, typer.Argument(help="Sweep name (the MLflow experiment).")],
        out: Annotated[
            Path | None, typer.Option("--out", help="Output folder (default reports/<sweep>).")
        ] = None,
        tracking_uri: Annotated[
            str | None,
            typer.Option("--tracking-uri", help="MLflow store (default sqlite:///results/mlflow.db)."),
        ] = None,
    ) -> None:
        """Write report.md and figures for SWEEP (statistics over seeds, curves, Pareto, diagnostics)."""
        from mrbench.reporting.build import build_report

        path = build_report(sweep, tracking_uri=tracking_uri, out=out)
        typer.echo(f"report: {path}")
