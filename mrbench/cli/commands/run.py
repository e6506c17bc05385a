"""``mrbench run``: one cell (method × task × model × seed), trained and evaluated, logged to MLflow."""

from __future__ import annotations

import contextlib
from pathlib import Path

import typer


def register(app: typer.Typer) -> None:
    @app.command("run")
    def run_cmd(
        method: str = typer.Option(
            "grpo", "--method", help="Advantage estimator (see `mrbench methods`) or package.module:function."
        ),
        task: str = typer.Option(
            "tool-calling", "--task", help="Task (see `mrbench tasks`) or package.module:factory."
        ),
        model: str = typer.Option("tiny", "--model", help="Tiny preset, Hugging Face id or local path."),
        seed: int = typer.Option(0, "--seed", help="Training seed."),
        steps: int = typer.Option(None, "--steps", help="GRPO optimizer steps (default: 30)."),
        param: list[str] = typer.Option([], "--param", help="Method hyper-parameter key=value (repeatable)."),
        task_param: list[str] = typer.Option([], "--task-param", help="Task setting key=value (repeatable)."),
        train: list[str] = typer.Option(
            [], "--train", help="Train setting key=value, e.g. num_generations=4."
        ),
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
            "$MRBENCH_CHECKPOINT_EVERY).",
        ),
        retry_s: float = typer.Option(
            None,
            "--tracking-retry-s",
            help="Retry an unreachable tracking store this long before keeping the log locally "
            "(default 300, or $MRBENCH_TRACKING_RETRY_S).",
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
            help="Train the cell in N processes started by `accelerate launch` (one GPU each; on CPU, "
            "DDP through gloo). train.prompts_per_step is shared between them.",
        ),
        distributed: str = typer.Option(
            "ddp", "--distributed", help="accelerate preset of those processes: ddp | fsdp | zero3 (GPUs)."
        ),
    ) -> None:
        """Warm-start or load the model, evaluate, train with GRPO and the chosen method, evaluate again.

        What the libraries print goes to the cell's log (named if the cell fails; an MLflow artifact
        of the run); the terminal shows a progress bar with an ETA per step, and the results.
        """
        from mrbench.engine.devices import pin_for_cell

        pin_for_cell(per_cell=processes)  # before anything starts CUDA: the GPUs this cell uses, no others
        from mrbench.core.errors import UserError
        from mrbench.engine import console, phases
        from mrbench.engine.checkpoints import folder_size_mb, parse_save
        from mrbench.engine.config import resolve_spec
        from mrbench.engine.distributed import check_processes, launch_cell, per_process
        from mrbench.engine.models import check_model_available
        from mrbench.engine.resume import parse_checkpoint_every
        from mrbench.engine.runner import CellResult, run_cell
        from mrbench.kit.keyvalue import parse_key_values
        from mrbench.store.client import check_tracking_reachable, tracking_retry_s
        from mrbench.store.local import resolve_tracking_uri

        overrides = parse_key_values(train, flag="--train")
        if steps is not None:
            if "steps" in overrides:
                raise UserError(f"--steps {steps} and --train steps={overrides['steps']}: give one of them")
            overrides["steps"] = str(steps)
        spec = resolve_spec(
            method,
            task,
            model,
            seed,
            method_params=parse_key_values(param, flag="--param"),
            task_params=parse_key_values(task_param, flag="--task-param"),
            train=overrides,
        )
        parse_save(save)  # a bad value stops here, before the store is touched
        every = None if checkpoint_every is None else parse_checkpoint_every(checkpoint_every)
        if processes != 1 or distributed != "ddp":
            check_processes(processes, distributed)
            per_process(spec.train.prompts_per_step, processes)
        retry_s = tracking_retry_s(retry_s)
        check_model_available(spec.model)  # a hub id that cannot be loaded fails here, in seconds
        uri = resolve_tracking_uri(tracking_uri)
        if verbose:
            console.set_verbose()
        log_path = console.cell_log_path(spec.run_key())
        with contextlib.ExitStack() as captured:
            try:
                captured.enter_context(console.capture_output(log_path))
            except OSError:
                pass  # an unusable results folder: check_tracking_reachable says what is wrong with it
            check_tracking_reachable(uri)
            out = console.terminal()
            typer.echo(f"cell {spec.label()}  run key {spec.run_key()}  store {uri}", file=out)
            if not quiet:
                # Plain lines with --verbose: the library output is interleaved with them.
                captured.enter_context(phases.shown(out, live=False if console.verbose() else None))
            try:
                cell_args = {
                    "tracking_uri": uri,
                    "experiment": experiment,
                    "progress": not quiet,
                    "save": save,
                }
                if processes > 1:
                    launched = launch_cell(
                        spec,
                        processes=processes,
                        distributed=distributed,
                        tracking_retry_s=retry_s,
                        checkpoint_every=every,
                        **cell_args,
                    )
                    result = CellResult(**launched)
                else:
                    result = run_cell(spec, tracking_retry_s=retry_s, checkpoint_every=every, **cell_args)
            except KeyboardInterrupt:  # Ctrl-C, SIGTERM or SIGHUP (mrbench.core.interrupts)
                captured.close()
                typer.echo(
                    f"\nrun interrupted: its MLflow run (if started) is marked KILLED in {uri}; "
                    f"library output: {log_path}",
                    err=True,
                )
                raise
            except Exception:
                captured.close()
                typer.echo(f"the cell failed; library output and traceback: {log_path}", err=True)
                raise
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
