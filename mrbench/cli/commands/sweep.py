"""``mrbench sweep``: methods × tasks × models × seeds, resumable, logged to MLflow, then reported."""

from __future__ import annotations

import contextlib
import inspect
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

    from mrbench.core.results_layout import SWEEP_LOG, sweep_logs_dir
    from mrbench.engine.runs import console
    from mrbench.store.local import results_dir
    from mrbench.sweeps.executors.local import slug
    from mrbench.sweeps.orchestrator import run_sweep
    from mrbench.sweeps.spec import build_sweep_spec

    spec = build_sweep_spec(preset=preset, config=config, overrides=overrides or {})
    with contextlib.ExitStack() as captured:
        if not dry_run:
            try:
                captured.enter_context(
                    console.capture_output(sweep_logs_dir(results_dir(), slug(spec.name)) / SWEEP_LOG)
                )
            except OSError:
                pass  # an unusable results folder: run_sweep says what is wrong with it
        out = console.terminal()
        isatty = getattr(out, "isatty", None)
        screen = Console(file=out, soft_wrap=not (isatty and isatty()))  # plain lines are never cut
        if spec.rehearse:  # the sweep rehearsed on this CPU (mrbench.sweeps.rehearsal)
            from mrbench.sweeps.rehearsal import run_rehearsal

            rehearsed = run_rehearsal(
                spec,
                tracking_uri=tracking_uri,
                dry_run=dry_run,
                cell_fn=cell_fn,
                resolve=resolve,
                console=screen,
            )
            return rehearsed.exit_code
        outcome = run_sweep(
            spec, tracking_uri=tracking_uri, dry_run=dry_run, cell_fn=cell_fn, resolve=resolve, console=screen
        )
    return outcome.exit_code


_COMMAND_OPTIONS: tuple[tuple[str, Any, Any, Any], ...] = (
    # (parameter, type, default, option): the options that are not sweep settings; those come from
    # mrbench.sweeps.settings.SETTINGS (see _setting_parameters), between --config and --dry-run.
    (
        "config",
        Path | None,
        None,
        typer.Option("--config", help="Sweep YAML file (keys: docs/sweep-yaml.md)."),
    ),
    ("dry_run", bool, False, typer.Option("--dry-run", help="Print the grid of cells and run nothing.")),
    (
        "tracking_uri",
        str | None,
        None,
        typer.Option("--tracking-uri", help="MLflow store (default sqlite:///results/mlflow.db)."),
    ),
    (
        "verbose",
        bool,
        False,
        typer.Option(
            "--verbose",
            help="Also show what the libraries print, as it comes (plain lines instead of the live "
            "table); it is always kept in each cell's log, results/checkpoints/<run key>/cell.log.",
        ),
    ),
)


def _parameter(name: str, kind: Any, default: Any, option: Any) -> inspect.Parameter:
    return inspect.Parameter(
        name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=Annotated[kind, option]
    )


def _setting_parameters() -> dict[str, tuple[str, inspect.Parameter]]:
    """Per sweep setting with an option: its parameter name → (its key, the Typer parameter)."""
    from mrbench.sweeps.settings import SETTINGS, Switch

    found: dict[str, tuple[str, inspect.Parameter]] = {}
    for setting in SETTINGS:
        option = setting.option
        if option is None:
            continue
        name = option.flag.removeprefix("--").replace("-", "_")
        if isinstance(option, Switch):
            parameter = _parameter(name, bool, False, typer.Option(option.flag, help=option.help))
        else:
            parameter = _parameter(
                name, option.type | None, None, typer.Option(option.flag, help=option.help)
            )
        found[name] = (setting.key, parameter)
    return found


def overrides_from_options(options: dict[str, Any]) -> dict[str, Any]:
    """The sweep settings the command's setting options give (YAML keys; None: not given)."""
    from mrbench.sweeps.settings import BY_KEY, Switch

    overrides: dict[str, Any] = {}
    for name, (key, _parameter) in _setting_parameters().items():
        value, option = options.get(name), BY_KEY[key].option
        if isinstance(option, Switch):
            value = option.sets if value else None
        overrides[key] = value
    return overrides


def command_signature() -> inspect.Signature:
    """The options of ``mrbench sweep``: --config, one per sweep setting, then the others."""
    config, *others = (_parameter(*entry) for entry in _COMMAND_OPTIONS)
    settings = [parameter for _key, parameter in _setting_parameters().values()]
    return inspect.Signature([config, *settings, *others], return_annotation=None)


def sweep_command(
    *,
    config: Path | None = None,
    dry_run: bool = False,
    tracking_uri: str | None = None,
    verbose: bool = False,
    cell_fn: CellFn | None = None,
    resolve: ResolveFn | None = None,
    **options: Any,
) -> None:
    """Run every cell of a sweep (skipping FINISHED ones), then write reports/<name>/report.md.

    Rerun the same command to resume after a crash or Ctrl-C. Several invocations of one sweep
    (here or on other machines logging to one tracking server) share its cells: each cell runs
    once, in whichever claims it first.

    On a terminal a live table shows the cells; otherwise one plain line per cell. What the
    libraries print goes to each cell's log (named when it fails; an MLflow artifact).
    """
    if verbose:
        from mrbench.engine.runs.console import set_verbose

        set_verbose()
    code = sweep(
        config=config,
        overrides=overrides_from_options(options),
        tracking_uri=tracking_uri,
        dry_run=dry_run,
        cell_fn=cell_fn,
        resolve=resolve,
    )
    if code:
        # SystemExit rather than typer.Exit: click returns (does not raise) Exit's code when the
        # app runs with standalone_mode=False, as mrbench.cli.app.main does, which would lose it.
        raise SystemExit(code)


def register(app: typer.Typer, *, cell_fn: CellFn | None = None, resolve: ResolveFn | None = None) -> None:
    """Add ``sweep`` (:func:`sweep_command`, with the options of :func:`command_signature`) to ``app``;
    its cells run ``cell_fn`` over specs from ``resolve`` (default: real training over
    :func:`mrbench.engine.config.resolve_spec`)."""

    def command(**options: Any) -> None:
        sweep_command(**options, cell_fn=cell_fn, resolve=resolve)

    command.__signature__ = command_signature()  # type: ignore[attr-defined]
    command.__doc__ = sweep_command.__doc__
    app.command("sweep")(command)
