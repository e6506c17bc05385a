"""``mrbench export-lm-eval``: a task's evaluation as an lm-eval task folder, for the ``lm_eval`` CLI."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from mrbench.core import limits


def export_lm_eval_cmd(
    task: Annotated[str, typer.Option("--task", help="A single-turn task: tool-calling or code-generation.")],
    out: Annotated[
        Path, typer.Option("--out", help="Folder to write the task into (lm_eval --include_path).")
    ],
    dataset: Annotated[
        str | None, typer.Option("--dataset", help="Eval data, as `mrbench eval --dataset` names it.")
    ] = None,
    model: Annotated[
        str,
        typer.Option(
            "--model",
            help="The model the prompts are for (a tiny preset gets the compact prompts it was built for); "
            "default: the tasks' chat prompts.",
        ),
    ] = "",
    limit: Annotated[
        int,
        typer.Option("--limit", min=0, max=limits.EVAL_LIMIT_MAX, help="The first N eval samples (0 = all)."),
    ] = 0,
    task_param: Annotated[
        list[str] | None, typer.Option("--task-param", help="Task setting key=value (repeatable).")
    ] = None,
) -> None:
    """Write a task's evaluation (the samples, prompts and scoring `mrbench eval` uses) as an lm-eval
    task folder, and print the `lm_eval` command that runs it on a model."""
    from mrbench.cli.commands.report import check_output_folder
    from mrbench.core.errors import UserError
    from mrbench.engine.evaluation.evaluate import EvalSpec, export_lm_eval
    from mrbench.kit.keyvalue import parse_key_values

    check_output_folder(out, "--out")
    spec = EvalSpec(
        model=model,
        task=task,
        dataset=dataset,
        limit=limit,
        task_params=parse_key_values(task_param or [], flag="--task-param"),
    )
    try:
        path = export_lm_eval(spec, out)
    except OSError as exc:  # a read-only folder, /proc, a full disk
        where = exc.filename or out
        raise UserError(
            f"--out: cannot write the lm-eval task to {str(where)!r}: {exc.strerror or exc}"
        ) from None
    name = path.stem
    typer.echo(f"wrote lm-eval task {name!r} to {out}; run it on a model folder with:")
    typer.echo(
        f"lm_eval --model hf --model_args pretrained=MODEL_FOLDER --include_path {out} --tasks {name} "
        "--apply_chat_template --fewshot_as_multiturn --batch_size 16"
    )


def register(app: typer.Typer) -> None:
    app.command("export-lm-eval")(export_lm_eval_cmd)
