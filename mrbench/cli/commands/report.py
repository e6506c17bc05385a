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
        from mrbench.core.errors import UserError
        from mrbench.core.names import MAX_DERIVED_LENGTH, check_name
        from mrbench.reporting.build import build_report, report_folder
        from mrbench.store.client import check_tracking_reachable
        from mrbench.store.local import resolve_tracking_uri
        from mrbench.store.uri import sqlite_path

        # SWEEP names an experiment anyone with access to the store could create (or a rehearsal's).
        check_name(sweep, "SWEEP", longest=MAX_DERIVED_LENGTH)
        folder = out if out is not None else report_folder(sweep)
        check_output_folder(folder, "--out" if out is not None else "the report folder")
        uri = resolve_tracking_uri(tracking_uri)
        if sqlite_path(uri) is None:  # a missing sqlite store is reported by build_report
            check_tracking_reachable(uri)  # an unknown scheme or a server that does not answer
        try:
            path = build_report(sweep, tracking_uri=uri, out=out)
        except OSError as exc:  # e.g. a read-only folder
            where = exc.filename or folder
            raise UserError(f"cannot write the report to {str(where)!r}: {exc.strerror or exc}") from None
        typer.echo(f"report: {path}")


def check_output_folder(folder: Path, what: str) -> None:
    """:class:`UserError` naming the path when ``folder`` or one of its parents is a file."""
    from mrbench.core.errors import UserError

    for path in (folder, *folder.parents):
        if path.exists() and not path.is_dir():
            raise UserError(f"{what} {str(folder)!r} cannot be a folder: {str(path)!r} is a file")
