"""``mrbench score``: run a task's reward functions on completions, or on a dataset's references."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def register(app: typer.Typer) -> None:
    @app.command("score")
    def score_cmd(
        task: Annotated[
            str,
            typer.Option(
                "--task", help="Task (see `mrbench tasks`) or package.module:factory, e.g. code-generation."
            ),
        ],
        input_file: Annotated[
            Path | None,
            typer.Option("--input", help='JSONL, one {"dataset", "id", "completion"} object per line.'),
        ] = None,
        dataset: Annotated[
            str | None,
            typer.Option("--dataset", help="Dataset whose reference answers to score (with --gold)."),
        ] = None,
        gold: Annotated[bool, typer.Option("--gold", help="Score the dataset's reference answers.")] = False,
        json_output: Annotated[
            bool, typer.Option("--json", help="Print one JSON object instead of a summary.")
        ] = False,
        task_param: Annotated[
            list[str] | None, typer.Option("--task-param", help="Task setting key=value (repeatable).")
        ] = None,
    ) -> None:
        """Score completions with a task's reward components: per-component means, statuses, per-item rewards.

        Exits 1 when some input lines or ids could not be scored (every other line is still
        scored and reported), 2 for unusable arguments.
        """
        import json

        from mrbench.engine.evaluation.scoring import format_report, parse_settings, score_task

        report = score_task(
            task,
            input_path=input_file,
            dataset=dataset,
            gold=gold,
            task_params=parse_settings(task_param or [], "--task-param"),
        )
        if json_output:
            typer.echo(json.dumps(report.to_dict(), ensure_ascii=False))
        else:
            typer.echo(format_report(report))
        if report.errors:
            # SystemExit, not typer.Exit: click returns (does not raise) Exit's code when the
            # CLI runs with standalone_mode=False, as mrbench.cli.app.main does.
            raise SystemExit(1)
