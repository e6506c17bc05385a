"""``mrbench simulate``: the estimator lab — a multi-reward policy-gradient simulator, many seeds at once.

:func:`simulate_cmd` reads top to bottom as its phases: check the options, resolve the scenarios,
run the lab on each, print the statistics (a table per scenario, or JSON: one object, a list of
them for several scenarios). Several scenarios in one command share the process: torch, MLflow and
the store are loaded once. The lab is imported inside the phases, so
that ``mrbench --help`` stays fast.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from mrbench.core import limits

if TYPE_CHECKING:
    from mrbench.lab.runner import LabOutcome
    from mrbench.lab.scenarios import Scenario
    from mrbench.lab.writer import LabWriter


def simulate_cmd(
    scenario: list[str] = typer.Option(
        [],
        "--scenario",
        help="Preset: scale, redundant, collapse, anti, paper-code, paper-tools, paper-security; "
        "several comma-separated or repeated run one after another in this process.",
    ),
    config: Path = typer.Option(
        None, "--config", help="Scenario YAML file (`base: <preset>` to start from one)."
    ),
    like: str = typer.Option(
        None,
        "--like",
        help="Fit the scenario to real rewards: run:<RUN_ID>, sweep:<NAME> (one scenario per task) or a "
        "rewards.npz file; the fitted YAML is printed.",
    ),
    save_config: Path = typer.Option(
        None, "--save-config", help="With --like: write the fitted scenario's YAML here (for --config)."
    ),
    methods: list[str] = typer.Option(
        [], "--methods", help="Methods, comma-separated or repeated (default: every registered method)."
    ),
    seeds: int = typer.Option(
        50, "--seeds", min=1, max=limits.LAB_SEEDS_MAX, help="Seeds 0 … N−1, each its own run (batched)."
    ),
    steps: int = typer.Option(
        None,
        "--steps",
        min=1,
        max=limits.LAB_STEPS_MAX,
        help="Policy-gradient steps (default: the scenario's, 200).",
    ),
    group_size: int = typer.Option(
        None,
        "--group-size",
        min=2,
        max=limits.LAB_SIZE_MAX,
        help="Rollouts per group G (default: the scenario's, 8).",
    ),
    out: Path = typer.Option(
        None,
        "--out",
        help="Report folder (default reports/lab/<scenario>/; with several scenarios DIR/<scenario>/).",
    ),
    tracking_uri: str = typer.Option(
        None, "--tracking-uri", help="MLflow store (default sqlite:///results/mlflow.db)."
    ),
    workers: int = typer.Option(
        1,
        "--workers",
        min=1,
        max=limits.WORKERS_MAX,
        help="Processes to train methods in parallel (one per core).",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the statistics as JSON."),
) -> None:
    """Train a simulated policy with every estimator on a reward scenario; report what each does with
    reward scale, redundancy, collapse and anti-correlation (IQM and bootstrap CIs over seeds)."""
    from mrbench.lab.writer import LabWriter
    from mrbench.store.client import check_store_folder
    from mrbench.store.local import resolve_tracking_uri

    presets = list(dict.fromkeys(_split(scenario)))  # a scenario named twice runs once
    check_options(presets, config, seeds=seeds, workers=workers, like=like, save_config=save_config)
    if out is not None:
        from mrbench.cli.commands.report import check_output_folder

        check_output_folder(out, "--out")
    uri = resolve_tracking_uri(tracking_uri)
    # Every scenario is resolved (and refused) before the first one runs and the store is written.
    if like is not None:
        chosen = fit_like(like, uri, steps=steps, group_size=group_size, save_config=save_config, err=as_json)
    else:
        chosen = [
            resolve_scenario(name, config, steps=steps, group_size=group_size) for name in presets or [None]
        ]
    names = _method_names(methods)
    check_store_folder(uri)
    # One MLflow writer beside the simulations (mrbench.lab.writer), started before torch is
    # imported here; it touches the store only once the method names are known to be good.
    with LabWriter(uri) as writer:
        from mrbench.lab.memory import check_lab
        from mrbench.lab.simulate import load_estimators  # torch

        for one in chosen:  # unknown methods, a lab too big for this machine: before the store is touched
            check_lab(one, seeds=seeds, methods=len(load_estimators(one, names)))
        writer.check()
        payloads = _run_scenarios(
            presets,
            chosen,
            names,
            config=config,
            like=like,
            seeds=seeds,
            steps=steps,
            group_size=group_size,
            out=out,
            workers=workers,
            as_json=as_json,
            writer=writer,
        )
    if as_json:
        typer.echo(json.dumps(payloads[0] if len(payloads) == 1 else payloads))


def _run_scenarios(
    presets: list[str],
    chosen: list[Scenario],
    names: list[str] | None,
    *,
    config: Path | None,
    like: str | None,
    seeds: int,
    steps: int | None,
    group_size: int | None,
    out: Path | None,
    workers: int,
    as_json: bool,
    writer: LabWriter,
) -> list[dict[str, Any]]:
    """Run the lab on each scenario in turn; print its table, or return the JSON payloads."""
    from mrbench.lab.runner import run_lab_with

    payloads = []
    for name, one in zip(presets or [None] * len(chosen), chosen, strict=True):
        # Each scenario's report names the command that reproduces that folder alone.
        folder = out / one.name if out is not None and len(chosen) > 1 else out
        command = _command_line(
            {
                "--scenario": name,
                "--config": config,
                "--like": like,
                "--methods": ",".join(names) if names else None,
                "--seeds": seeds,
                "--steps": steps,
                "--group-size": group_size,
                "--out": folder,
                "--workers": workers if workers > 1 else None,
            }
        )
        outcome = run_lab_with(
            writer, one, methods=names, seeds=seeds, out=folder, command=command, workers=workers
        )
        if as_json:
            payloads.append(json_payload(one, outcome, seeds=seeds))
        else:
            print_table(one, outcome, seeds=seeds, command=command)
    return payloads


def check_options(
    scenarios: list[str],
    config: Path | None,
    *,
    seeds: int,
    workers: int,
    like: str | None = None,
    save_config: Path | None = None,
) -> None:
    """Exactly one of ``--scenario`` (one or more presets), ``--config`` and ``--like``
    (``--save-config`` only with it); at least one seed and one worker."""
    from mrbench.core.errors import UserError
    from mrbench.lab.presets import PRESETS

    if bool(scenarios) + (config is not None) + (like is not None) != 1:
        raise UserError(
            f"give exactly one of --scenario NAME ({', '.join(PRESETS)}), --config FILE or --like SOURCE"
        )
    if save_config is not None and like is None:
        raise UserError("--save-config writes a fitted scenario: use it with --like SOURCE")
    if seeds < 1:
        raise UserError(f"--seeds must be >= 1, got {seeds}")
    if workers < 1:
        raise UserError(f"--workers must be >= 1, got {workers}")


def resolve_scenario(
    scenario: str | None, config: Path | None, *, steps: int | None, group_size: int | None
) -> Scenario:
    """The preset ``scenario`` or the scenario of the YAML file ``config``, with ``--steps`` and
    ``--group-size`` applied where given."""
    from mrbench.lab.config import load_config
    from mrbench.lab.presets import get_scenario
    from mrbench.lab.scenarios import with_settings

    base = get_scenario(scenario) if scenario is not None else load_config(config)
    return with_settings(base, steps=steps, group_size=group_size)


def fit_like(
    source: str,
    tracking_uri: str,
    *,
    steps: int | None,
    group_size: int | None,
    save_config: Path | None,
    err: bool,
) -> list[Scenario]:
    """The scenarios fitted to ``source``'s rewards (:mod:`mrbench.lab.like`, :mod:`mrbench.lab.fit`),
    ``--steps``/``--group-size`` applied; each printed as YAML (to stderr when ``err``: the JSON
    goes to stdout) and written to ``save_config`` (``<stem>-<scenario><suffix>`` for several)."""
    from dataclasses import replace

    from mrbench.core.errors import UserError
    from mrbench.lab.fit import fit_scenario, to_yaml
    from mrbench.lab.like import read_like
    from mrbench.lab.scenarios import with_settings

    fitted = []
    for one in read_like(source, tracking_uri):
        fit = fit_scenario(one.record, name=one.name, what=one.what)
        fitted.append(replace(fit, scenario=with_settings(fit.scenario, steps=steps, group_size=group_size)))
    texts = [to_yaml(fit, source) for fit in fitted]
    if save_config is not None:
        suffix = save_config.suffix or ".yaml"
        paths = (
            [save_config]
            if len(fitted) == 1
            else [save_config.with_name(f"{save_config.stem}-{f.scenario.name}{suffix}") for f in fitted]
        )
        for path, text in zip(paths, texts, strict=True):
            try:
                path.write_text(text, encoding="utf-8")
            except OSError as exc:
                raise UserError(
                    f"--save-config {str(path)!r}: cannot write it: {exc.strerror or exc}"
                ) from None
    for text in texts:
        typer.echo(text, err=err)
    return [fit.scenario for fit in fitted]


def _command_line(options: dict[str, object]) -> str:
    """The canonical command that reproduces this invocation (printed in the summary)."""
    parts = ["mrbench", "simulate"]
    for flag, value in options.items():
        if value is None or value is False:
            continue
        parts += [flag] if value is True else [flag, str(value)]
    return shlex.join(parts)


def _split(values: list[str]) -> list[str]:
    """Repeated option values split at commas, blanks dropped."""
    return [name.strip() for item in values for name in item.split(",") if name.strip()]


def _method_names(methods: list[str]) -> list[str] | None:
    """The ``--methods`` values split at commas; None (every registered method) when there are none."""
    return _split(methods) or None


def json_payload(chosen: Scenario, outcome: LabOutcome, *, seeds: int) -> dict[str, Any]:
    """The ``--json`` object: the scenario's settings, where the results went, and per method
    whether it is batch-coupled and its IQM and probability-of-improvement [point, low, high]."""
    logged = outcome.logged
    return {
        "scenario": chosen.name,
        "seeds": seeds,
        "steps": chosen.steps,
        "group_size": chosen.group_size,
        "summary": str(outcome.summary_path),
        "tracking_uri": logged.tracking_uri,
        "experiment": logged.experiment,
        "parent_run_id": logged.parent_run_id,
        "methods": {
            m: {
                "batch_coupled": outcome.result.runs[m].batch_coupled,
                "iqm": {k: [ci.point, ci.low, ci.high] for k, ci in s.iqm.items()},
                "poi": {k: [ci.point, ci.low, ci.high] for k, ci in s.poi.items()},
            }
            for m, s in outcome.summaries.items()
        },
    }


def print_table(chosen: Scenario, outcome: LabOutcome, *, seeds: int, command: str) -> None:
    """Print the run's settings, one row of IQM statistics per method, and where the results went."""
    logged = outcome.logged
    typer.echo(f"lab {chosen.name}: {seeds} seeds × {chosen.steps} steps, G={chosen.group_size}  ({command})")
    typer.echo(
        f"{'method':<20}{'objective':>10}{'steps→90%':>11}{'sign≠grpo':>11}{'max|A|':>10}{'resolution':>11}"
    )
    for method, summ in outcome.summaries.items():
        iq = summ.iqm
        typer.echo(
            f"{method:<20}{iq['objective'].point:>10.3f}{iq['steps_to_90'].point:>11.0f}"
            f"{iq['sign_disagree'].point:>11.3f}{iq['max_abs_adv'].point:>10.3g}"
            f"{iq['resolution'].point:>11.3f}"
        )
    typer.echo(f"summary: {outcome.summary_path}")
    typer.echo(f"MLflow: experiment {logged.experiment!r}, parent run {logged.parent_run_id}")
    typer.echo(f"store: {logged.tracking_uri}")


def register(app: typer.Typer) -> None:
    """Add ``mrbench simulate`` to ``app``."""
    app.command("simulate")(simulate_cmd)
