"""``mrbench run``: one cell (method × task × model × seed), trained and evaluated, logged to MLflow.

:func:`run_cmd` reads top to bottom as its phases: pin the devices, resolve the cell's spec, check
the other options, run the cell with the libraries' output captured in its log, print the result.
The engine is imported inside the phases, so that ``mrbench --help`` stays fast.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from mrbench.core import env, limits

if TYPE_CHECKING:
    from mrbench.engine.cell.cell_result import CellResult
    from mrbench.engine.config import RunSpec


@dataclass(frozen=True)
class CellLaunch:
    """How to run a resolved cell: the checked values of the options that do not define it."""

    tracking_uri: str
    experiment: str
    save: str
    checkpoint_every: int | None
    tracking_retry_s: float
    processes: int
    distributed: str
    quiet: bool


def run_cmd(
    method: str = typer.Option(
        "grpo", "--method", help="Advantage estimator (see `mrbench methods`) or package.module:function."
    ),
    task: str = typer.Option(
        "tool-calling", "--task", help="Task (see `mrbench tasks`) or package.module:factory."
    ),
    model: str = typer.Option("tiny", "--model", help="Tiny preset, Hugging Face id or local path."),
    seed: int = typer.Option(0, "--seed", min=0, max=limits.SEED_MAX, help="Training seed."),
    steps: int = typer.Option(
        None, "--steps", min=1, max=limits.STEPS_MAX, help="GRPO optimizer steps (default: 30)."
    ),
    param: list[str] = typer.Option([], "--param", help="Method hyper-parameter key=value (repeatable)."),
    task_param: list[str] = typer.Option([], "--task-param", help="Task setting key=value (repeatable)."),
    train: list[str] = typer.Option([], "--train", help="Train setting key=value, e.g. num_generations=4."),
    tracking_uri: str = typer.Option(
        None, "--tracking-uri", help="MLflow store (default sqlite:///results/mlflow.db)."
    ),
    experiment: str = typer.Option("mrbench-runs", "--experiment", help="MLflow experiment name."),
    save: str = typer.Option(
        "final",
        "--save",
        help="Keep the trained policy + tokenizer under results/checkpoints/<run key>/: none | final | "
        "every:N (also every N steps). ~2 bytes per parameter each (a 7B model: ~15 GB).",
    ),
    checkpoint_every: str = typer.Option(
        None,
        "--checkpoint-every",
        help="Training checkpoint (policy, optimizer, RNG state) every N steps, from which the same "
        "command resumes a killed cell: N, 0 for none, or auto (default: a tenth of the steps; "
        f"${env.CHECKPOINT_EVERY.name}).",
    ),
    retry_s: float = typer.Option(
        None,
        "--tracking-retry-s",
        min=0,
        max=limits.RETRY_S_MAX,
        help="Retry an unreachable tracking store this long before keeping the log locally "
        f"(default {env.TRACKING_RETRY_S.default:g}, or ${env.TRACKING_RETRY_S.name}).",
    ),
    quiet: bool = typer.Option(False, "--quiet", help="No progress display (the results only)."),
    verbose: bool = typer.Option(
        False,
        "--verbose",
        help="Also show what the libraries print (TRL, transformers, lm-eval) as it comes; it is "
        "always kept in the cell's log, results/checkpoints/<run key>/cell.log.",
    ),
    processes: int = typer.Option(
        1,
        "--processes-per-cell",
        min=1,
        max=limits.PROCESSES_MAX,
        help="Train the cell in N processes started by `accelerate launch` (one GPU each; on CPU, "
        "DDP through gloo). train.prompts_per_step is shared between them.",
    ),
    distributed: str = typer.Option(
        "ddp",
        "--distributed",
        help="accelerate preset of those processes: ddp | fsdp | zero3 (zero3 needs GPUs).",
    ),
) -> None:
    """Warm-start or load the model, evaluate, train with GRPO and the chosen method, evaluate again.

    What the libraries print goes to the cell's log (named if the cell fails; an MLflow artifact
    of the run); the terminal shows a progress bar with an ETA per step, and the results.
    """
    from mrbench.engine.processes.devices import pin_for_cell

    pin_for_cell(per_cell=processes)  # before anything starts CUDA: the GPUs this cell uses, no others
    spec = resolve_cell(
        method, task, model, seed, steps=steps, param=param, task_param=task_param, train=train
    )
    launch = check_launch(
        spec,
        tracking_uri=tracking_uri,
        experiment=experiment,
        save=save,
        checkpoint_every=checkpoint_every,
        retry_s=retry_s,
        processes=processes,
        distributed=distributed,
        quiet=quiet,
    )
    result = run_logged(spec, launch, verbose=verbose)
    print_result(result, experiment)


def resolve_cell(
    method: str,
    task: str,
    model: str,
    seed: int,
    *,
    steps: int | None,
    param: list[str],
    task_param: list[str],
    train: list[str],
) -> RunSpec:
    """Parse the key=value options and resolve the cell's spec; ``--steps`` is ``--train steps=…``
    (giving both is a usage error). Unknown names and bad values raise :class:`UserError`."""
    from mrbench.core.errors import UserError
    from mrbench.engine.config import resolve_spec
    from mrbench.kit.keyvalue import parse_key_values

    overrides = parse_key_values(train, flag="--train")
    if steps is not None:
        if "steps" in overrides:
            raise UserError(f"--steps {steps} and --train steps={overrides['steps']}: give one of them")
        overrides["steps"] = str(steps)
    return resolve_spec(
        method,
        task,
        model,
        seed,
        method_params=parse_key_values(param, flag="--param"),
        task_params=parse_key_values(task_param, flag="--task-param"),
        train=overrides,
    )


def check_launch(
    spec: RunSpec,
    *,
    tracking_uri: str | None,
    experiment: str,
    save: str,
    checkpoint_every: str | None,
    retry_s: float | None,
    processes: int,
    distributed: str,
    quiet: bool,
) -> CellLaunch:
    """Check the options that say how to run ``spec`` (the experiment's name, saving, checkpoints,
    processes, the retry time, that the model can be loaded) and resolve the store, before the
    store is touched."""
    from mrbench.core.names import check_name
    from mrbench.engine.cell.checkpoints import parse_save
    from mrbench.engine.cell.resume import parse_checkpoint_every
    from mrbench.engine.models.catalog import check_model
    from mrbench.engine.processes.distributed import check_processes, per_process
    from mrbench.store.client import tracking_retry_s
    from mrbench.store.local import resolve_tracking_uri

    check_name(experiment, "--experiment")
    parse_save(save)  # a bad value stops here, before the store is touched
    every = None if checkpoint_every is None else parse_checkpoint_every(checkpoint_every)
    if processes != 1 or distributed != "ddp":
        check_processes(processes, distributed)
        per_process(spec.train.prompts_per_step, processes)
    retry = tracking_retry_s(retry_s)
    check_model(spec.model)  # a folder without a model, a hub id that cannot be loaded: here, in seconds
    return CellLaunch(
        tracking_uri=resolve_tracking_uri(tracking_uri),
        experiment=experiment,
        save=save,
        checkpoint_every=every,
        tracking_retry_s=retry,
        processes=processes,
        distributed=distributed,
        quiet=quiet,
    )


def run_logged(spec: RunSpec, launch: CellLaunch, *, verbose: bool) -> CellResult:
    """Run the cell with the libraries' output captured in its log (shown live with ``verbose``)
    and, unless quiet, the progress display on the terminal; a cell that fails or is interrupted
    names its log on stderr and re-raises."""
    from mrbench.engine.cell.cell_claim import check_free
    from mrbench.engine.runs import console, phases
    from mrbench.store.client import check_tracking_reachable

    uri = launch.tracking_uri
    if verbose:
        console.set_verbose()
    log_path = console.cell_log_path(spec.run_key())
    check_free(log_path.parent, spec.label())  # capturing would empty a running holder's log
    with contextlib.ExitStack() as captured:
        try:
            captured.enter_context(console.capture_output(log_path))
        except OSError:
            pass  # an unusable results folder: check_tracking_reachable says what is wrong with it
        check_tracking_reachable(uri)
        out = console.terminal()
        typer.echo(f"cell {spec.label()}  run key {spec.run_key()}  store {uri}", file=out)
        if not launch.quiet:
            # Plain lines with --verbose: the library output is interleaved with them.
            captured.enter_context(phases.shown(out, live=False if console.verbose() else None))
        try:
            return run_cell_or_launch(spec, launch)
        except KeyboardInterrupt:  # Ctrl-C, SIGTERM or SIGHUP (mrbench.core.interrupts)
            captured.close()
            typer.echo(
                f"\nrun interrupted: its MLflow run (if started) is marked KILLED in {uri}; "
                f"library output: {log_path}",
                err=True,
            )
            raise
        except Exception as exc:
            from mrbench.store.faults import OutOfRoom

            captured.close()
            if isinstance(exc, OutOfRoom):  # its run is KILLED, and resumes: not a failed cell
                typer.echo(
                    "the cell stopped: its MLflow run is marked KILLED and resumes from its last "
                    f"training checkpoint when this command runs again; library output: {log_path}",
                    err=True,
                )
            else:
                typer.echo(f"the cell failed; library output and traceback: {log_path}", err=True)
            raise


def run_cell_or_launch(spec: RunSpec, launch: CellLaunch) -> CellResult:
    """Train and evaluate the cell in this process, or in ``launch.processes`` processes started
    by ``accelerate launch``."""
    from mrbench.engine.cell.cell_result import CellResult
    from mrbench.engine.cell.runner import run_cell
    from mrbench.engine.processes.distributed import launch_cell

    cell_args = {
        "tracking_uri": launch.tracking_uri,
        "experiment": launch.experiment,
        "progress": not launch.quiet,
        "save": launch.save,
        "tracking_retry_s": launch.tracking_retry_s,
        "checkpoint_every": launch.checkpoint_every,
    }
    if launch.processes > 1:
        launched = launch_cell(spec, processes=launch.processes, distributed=launch.distributed, **cell_args)
        return CellResult.from_mapping(launched, f"the result of the {launch.processes}-process cell")
    return run_cell(spec, **cell_args)


def print_result(result: CellResult, experiment: str) -> None:
    """Print the finished run, its checkpoint and the metrics before and after training."""
    from mrbench.engine.cell.checkpoints import folder_size_mb

    typer.echo(f"\nrun {result.run_id} FINISHED in {result.wall_s:.0f}s (experiment {experiment!r})")
    if result.recovered:
        typer.echo("(logged what an earlier attempt of this cell kept locally; not trained again)")
    if result.checkpoint_dir:
        size_mb = folder_size_mb(Path(result.checkpoint_dir))
        typer.echo(f"checkpoint: {result.checkpoint_dir} ({size_mb:,.1f} MB)")
    typer.echo(f"{'metric':<22}{'before':>10}{'after':>10}")
    for name in sorted(result.metrics_after):
        before = result.metrics_before.get(name, float("nan"))
        mark = "  ← primary" if name == result.primary_metric else ""
        typer.echo(f"{name:<22}{before:>10.3f}{result.metrics_after[name]:>10.3f}{mark}")


def register(app: typer.Typer) -> None:
    """Add ``mrbench run`` to ``app``."""
    app.command("run")(run_cmd)
