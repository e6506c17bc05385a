"""``mrbench eval``: evaluate a model or a cell's checkpoint on a task, logged to MLflow.

:func:`eval_cmd` reads top to bottom as its phases: build the evaluation's spec from the options,
run and log it, print the report (a table or JSON). The engine is imported inside the phases, so
that ``mrbench --help`` stays fast.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from mrbench.core import layout, limits

if TYPE_CHECKING:
    from mrbench.engine.evaluation.evaluate import EvalReport, EvalSpec


def eval_cmd(
    model: Annotated[
        str,
        typer.Option(
            "--model",
            help="A preset (tiny, tiny-s, tiny-m, tiny-l, smollm2-135m), Hugging Face id, local model "
            "folder, or run:<run id> (the checkpoint a cell saved, in the same --tracking-uri store).",
        ),
    ],
    task: Annotated[
        str, typer.Option("--task", help="Task (see `mrbench tasks`) or package.module:factory.")
    ],
    dataset: Annotated[
        str | None,
        typer.Option(
            "--dataset",
            help="Eval data: tool-calling embedded | bfcl | bfcl-<category> | toolrl | apibank; "
            "code-generation embedded | humaneval | mbpp | leetcode | livecodebench; agent-security "
            "embedded | agentdojo | injecagent | asb (toolrl, apibank, livecodebench, injecagent, asb "
            "need --task-param data_path=PATH: docs/benchmarks.md).",
        ),
    ] = None,
    limit: Annotated[
        int,
        typer.Option(
            "--limit", min=0, max=limits.EVAL_LIMIT_MAX, help="Evaluate the first N eval samples (0 = all)."
        ),
    ] = 0,
    samples: Annotated[
        int | None,
        typer.Option(
            "--samples",
            min=1,
            max=limits.GENERATIONS_MAX,
            help="Completions sampled per problem at temperature 1 (code-generation): unbiased pass@1 "
            "and pass@k. Default 1.",
        ),
    ] = None,
    seed: Annotated[
        int | None,
        typer.Option(
            "--seed",
            min=0,
            max=limits.SEED_MAX,
            help="The task's seed setting and the random seed (default: the task's, 0).",
        ),
    ] = None,
    task_param: Annotated[
        list[str] | None, typer.Option("--task-param", help="Task setting key=value (repeatable).")
    ] = None,
    precision: Annotated[
        str | None,
        typer.Option(
            "--precision",
            help="The precision train setting to evaluate under, as a cell does: auto | bf16 | fp32 "
            "(default: a run:<run id>'s own, else auto).",
        ),
    ] = None,
    tracking_uri: Annotated[
        str | None,
        typer.Option("--tracking-uri", help="MLflow store (default sqlite:///results/mlflow.db)."),
    ] = None,
    experiment: Annotated[
        str, typer.Option("--experiment", help="MLflow experiment of the evaluation run.")
    ] = layout.EVAL_EXPERIMENT,
    json_output: Annotated[
        bool,
        typer.Option("--json", help="Print {model, task, dataset, n, metrics, run_id, wall_s} as JSON."),
    ] = False,
    verbose: Annotated[
        bool,
        typer.Option(
            "--verbose",
            help="Also show what the libraries print (transformers, lm-eval) as it comes; it is always "
            "kept in the evaluation's log, results/logs/eval-<time>-<pid>.log, named in the output.",
        ),
    ] = False,
) -> None:
    """Evaluate a model on a task (greedy; lm-eval, or the episode runner for agent security), as a
    cell evaluates, and log the metrics and per-sample records as one MLflow run.

    An unknown run id, a folder without weights, an unknown dataset or a bad setting exit 2
    naming the value.
    """
    from mrbench.core.names import check_name
    from mrbench.engine.evaluation.evaluate import EvalSpec
    from mrbench.kit.keyvalue import parse_key_values
    from mrbench.store.local import resolve_tracking_uri

    check_name(experiment, "--experiment")
    spec = EvalSpec(
        model=model,
        task=task,
        dataset=dataset,
        limit=limit,
        samples=samples,
        seed=seed,
        task_params=parse_key_values(task_param or [], flag="--task-param"),
        precision=precision,
    )
    uri = resolve_tracking_uri(tracking_uri)
    report, log_path = run_logged(
        spec, tracking_uri=uri, experiment=experiment, verbose=verbose, json_output=json_output
    )
    if json_output:
        typer.echo(json.dumps(report.to_json(), ensure_ascii=False))
        if log_path is not None:  # stdout is the JSON alone
            typer.echo(f"library output: {log_path}", err=True)
    else:
        print_report(report, tracking_uri=uri, experiment=experiment, log_path=log_path)


def run_logged(
    spec: EvalSpec,
    *,
    tracking_uri: str,
    experiment: str,
    verbose: bool = False,
    json_output: bool = False,
) -> tuple[EvalReport, Path | None]:
    """Evaluate ``spec`` and log it as one run of ``experiment``, with what the libraries print kept
    in the evaluation's log (:func:`mrbench.engine.runs.console.command_output`; also shown live with
    ``verbose``, on stderr with ``json_output``: stdout is the JSON alone); returns the report and
    the log (None if the results folder cannot hold it).

    An interrupted evaluation says on stderr that its run is marked KILLED, a failed one names its
    log; both re-raise (a :class:`UserError` is the one line the CLI prints)."""
    from mrbench.core.errors import UserError
    from mrbench.engine.evaluation.evaluate import run_eval
    from mrbench.engine.runs import console

    if verbose:
        console.set_verbose()
    log_path = None
    try:
        with console.command_output(
            "eval", artifact=layout.EVAL_LOG_ARTIFACT, live_on_stderr=json_output
        ) as log_path:
            return run_eval(spec, tracking_uri=tracking_uri, experiment=experiment), log_path
    except KeyboardInterrupt:  # Ctrl-C, SIGTERM or SIGHUP (mrbench.core.interrupts)
        typer.echo(
            f"\neval interrupted: its MLflow run (if started) is marked KILLED in {tracking_uri}"
            + (f"; library output: {log_path}" if log_path else ""),
            err=True,
        )
        raise
    except UserError:
        raise
    except Exception:
        if log_path is not None:
            typer.echo(f"the evaluation failed; library output: {log_path}", err=True)
        raise


def print_report(
    report: EvalReport, *, tracking_uri: str, experiment: str, log_path: Path | None = None
) -> None:
    """Print what was evaluated and where it was logged, then one row per metric (the primary
    marked), then where the libraries' output is (``log_path``, if any)."""
    of = f" (checkpoint of run {report.eval_of})" if report.eval_of else ""
    typer.echo(
        f"{report.model}{of} on {report.task}/{report.dataset or '-'}: {report.n} samples in "
        f"{report.wall_s:.0f}s; run {report.run_id} (experiment {experiment!r}, store {tracking_uri})"
    )
    typer.echo(f"{'metric':<28}{'value':>10}")
    for name in sorted(report.metrics):
        mark = "  ← primary" if name == report.primary_metric else ""
        typer.echo(f"{name:<28}{report.metrics[name]:>10.3f}{mark}")
    if log_path is not None:
        typer.echo(f"library output: {log_path}")


def register(app: typer.Typer) -> None:
    """Add ``mrbench eval`` to ``app``."""
    app.command("eval")(eval_cmd)
