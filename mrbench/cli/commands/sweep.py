"""``mrbench sweep``: methods × tasks × models × seeds, resumable, logged to MLflow, then reported."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def register(app: typer.Typer) -> None:
    @app.command("sweep")
    def sweep_cmd(
        preset: Annotated[
            str | None,
            typer.Option("--preset", help="smoke (default), cpu (tiny ladder × 3 seeds) or paper (GPUs)."),
        ] = None,
        config: Annotated[
            Path | None, typer.Option("--config", help="Sweep YAML file (keys: see harness/sweep_spec.py).")
        ] = None,
        methods: Annotated[str | None, typer.Option("--methods", help="Comma-separated methods.")] = None,
        tasks: Annotated[str | None, typer.Option("--tasks", help="Comma-separated tasks.")] = None,
        models: Annotated[
            str | None, typer.Option("--models", help="Comma-separated models (all tasks).")
        ] = None,
        seeds: Annotated[
            str | None, typer.Option("--seeds", help="Comma-separated seeds, e.g. 0,1,2.")
        ] = None,
        n_seeds: Annotated[
            int | None, typer.Option("--n-seeds", help="Seeds 0..N-1 (instead of --seeds).")
        ] = None,
        steps: Annotated[int | None, typer.Option("--steps", help="Training steps for every cell.")] = None,
        name: Annotated[
            str | None, typer.Option("--name", help="Sweep name = MLflow experiment and report folder.")
        ] = None,
        workers: Annotated[
            int | None,
            typer.Option("--workers", help="Cells at a time, each in its own process (default 1)."),
        ] = None,
        executor: Annotated[str | None, typer.Option("--executor", help="local (default) or ray.")] = None,
        ray_address: Annotated[
            str | None, typer.Option("--ray-address", help="Ray cluster address for --executor ray.")
        ] = None,
        gpus_per_cell: Annotated[
            float | None, typer.Option("--gpus-per-cell", help="GPUs per cell (Ray executor).")
        ] = None,
        dry_run: Annotated[
            bool, typer.Option("--dry-run", help="Print the grid of cells and run nothing.")
        ] = False,
        tracking_uri: Annotated[
            str | None,
            typer.Option("--tracking-uri", help="MLflow store (default sqlite:///results/mlflow.db)."),
        ] = None,
        no_report: Annotated[
            bool, typer.Option("--no-report", help="Do not write the report at the end.")
        ] = False,
        cell_fn: Annotated[str | None, typer.Option("--cell-fn", hidden=True)] = None,
        resolve_fn: Annotated[str | None, typer.Option("--resolve-fn", hidden=True)] = None,
    ) -> None:
        """Run every cell of a sweep (skipping FINISHED ones), then write reports/<name>/report.md.

        Rerun the same command to resume after a crash or Ctrl-C.
        """
        from mrbench.sweeps.orchestrator import load_callable, run_sweep
        from mrbench.sweeps.spec import build_sweep_spec

        overrides = {
            "name": name,
            "methods": methods,
            "tasks": tasks,
            "models": models,
            "seeds": seeds,
            "n_seeds": n_seeds,
            "steps": steps,
            "workers": workers,
            "executor": executor,
            "ray_address": ray_address,
            "gpus_per_cell": gpus_per_cell,
            "report": False if no_report else None,
        }
        spec = build_sweep_spec(preset=preset, config=config, overrides=overrides)
        outcome = run_sweep(
            spec,
            tracking_uri=tracking_uri,
            dry_run=dry_run,
            # Hidden options for tests: a fake cell / resolver in place of training (fakes).
            cell_fn=load_callable(cell_fn) if cell_fn else None,
            resolve=load_callable(resolve_fn) if resolve_fn else None,
        )
        if outcome.exit_code:
            # SystemExit rather than typer.Exit: click returns (does not raise) Exit's code when the
            # app runs with standalone_mode=False, as mrbench.cli.app.main does, which would lose it.
            raise SystemExit(outcome.exit_code)
