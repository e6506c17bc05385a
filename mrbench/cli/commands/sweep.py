"""``mrbench sweep``: methods × tasks × models × seeds, resumable, logged to MLflow, then reported."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from mrbench.sweeps.cell import CellFn, ResolveFn


def sweep(
    *,
    preset: str | None = None,
    config: Path | None = None,
    overrides: dict[str, Any] | None = None,
    tracking_uri: str | None = None,
    dry_run: bool = False,
    cell_fn: CellFn | None = None,
    resolve: ResolveFn | None = None,
) -> int:
    """The body of ``mrbench sweep``: build the sweep from the preset, the YAML file and the
    command-line ``overrides``, run it, return its exit code (0, 1 if a cell failed, 130 after Ctrl-C).

    ``cell_fn`` and ``resolve`` default to training real cells
    (see :func:`mrbench.sweeps.orchestrator.run_sweep`). What the libraries print in this process
    outside a cell goes to ``<results>/logs/<sweep>/sweep.log``; each cell's to its own log.
    """
    from rich.console import Console

    from mrbench.engine import console
    from mrbench.store.local import results_dir
    from mrbench.sweeps.executors.local import slug
    from mrbench.sweeps.orchestrator import run_sweep
    from mrbench.sweeps.spec import build_sweep_spec

    spec = build_sweep_spec(preset=preset, config=config, overrides=overrides or {})
    with contextlib.ExitStack() as captured:
        if not dry_run:
            try:
                captured.enter_context(
                    console.capture_output(results_dir() / "logs" / slug(spec.name) / "sweep.log")
                )
            except OSError:
                pass  # an unusable results folder: run_sweep says what is wrong with it
        out = console.terminal()
        isatty = getattr(out, "isatty", None)
        screen = Console(file=out, soft_wrap=not (isatty and isatty()))  # plain lines are never cut
        outcome = run_sweep(
            spec, tracking_uri=tracking_uri, dry_run=dry_run, cell_fn=cell_fn, resolve=resolve, console=screen
        )
    return outcome.exit_code


def register(app: typer.Typer, *, cell_fn: CellFn | None = None, resolve: ResolveFn | None = None) -> None:
    """Add ``sweep`` to ``app``; its cells run ``cell_fn`` over specs from ``resolve`` (default: real
    training over :func:`mrbench.engine.config.resolve_spec`)."""

    @app.command("sweep")
    def sweep_cmd(
        preset: Annotated[
            str | None,
            typer.Option("--preset", help="smoke (default), cpu (tiny ladder × 3 seeds) or paper (GPUs)."),
        ] = None,
        config: Annotated[
            Path | None, typer.Option("--config", help="Sweep YAML file (keys: see mrbench/sweeps/spec.py).")
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
            str | None,
            typer.Option(
                "--name",
                help="Sweep name = MLflow experiment and report folder (default: the config's name, "
                "else its file name, else the preset's).",
            ),
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
        processes_per_cell: Annotated[
            int | None,
            typer.Option(
                "--processes-per-cell",
                help="Train each cell in N processes (accelerate launch; train.prompts_per_step is shared).",
            ),
        ] = None,
        distributed: Annotated[
            str | None,
            typer.Option("--distributed", help="accelerate preset of those processes: ddp | fsdp | zero3."),
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
        no_lab: Annotated[
            bool,
            typer.Option("--no-lab", help="Do not run the estimator lab before the report (lab: [])."),
        ] = False,
        verbose: Annotated[
            bool,
            typer.Option(
                "--verbose",
                help="Also show what the libraries print, as it comes (plain lines instead of the live "
                "table); it is always kept in each cell's log, results/checkpoints/<run key>/cell.log.",
            ),
        ] = False,
    ) -> None:
        """Run every cell of a sweep (skipping FINISHED ones), then write reports/<name>/report.md.

        Rerun the same command to resume after a crash or Ctrl-C. Several invocations of one sweep
        (here or on other machines logging to one tracking server) share its cells: each cell runs
        once, in whichever claims it first.

        On a terminal a live table shows the cells; otherwise one plain line per cell. What the
        libraries print goes to each cell's log (named when it fails; an MLflow artifact).
        """
        if verbose:
            from mrbench.engine.console import set_verbose

            set_verbose()
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
            "processes_per_cell": processes_per_cell,
            "distributed": distributed,
            "report": False if no_report else None,
            "lab": [] if no_lab else None,
        }
        code = sweep(
            preset=preset,
            config=config,
            overrides=overrides,
            tracking_uri=tracking_uri,
            dry_run=dry_run,
            cell_fn=cell_fn,
            resolve=resolve,
        )
        if code:
            # SystemExit rather than typer.Exit: click returns (does not raise) Exit's code when the
            # app runs with standalone_mode=False, as mrbench.cli.app.main does, which would lose it.
            raise SystemExit(code)
