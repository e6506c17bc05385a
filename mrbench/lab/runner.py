"""One lab invocation end to end: simulate, summarise over seeds, write the report, log to MLflow."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from mrbench.lab.metrics import MethodSummary, summarise
from mrbench.lab.scenarios import Scenario
from mrbench.lab.simulate import REFERENCE_METHOD, LabResult, load_estimators, process_pool, simulate
from mrbench.lab.summary import write_summary
from mrbench.lab.tracking import Logged
from mrbench.lab.writer import LabWriter
from mrbench.reporting.stats import DEFAULT_REPS

DEFAULT_OUT = Path("reports") / "lab"


def default_out(scenario: Scenario) -> Path:
    """``reports/lab/<scenario>/``."""
    return DEFAULT_OUT / scenario.name


@dataclass(frozen=True)
class LabOutcome:
    """What :func:`run_lab` produced."""

    result: LabResult
    summaries: dict[str, MethodSummary]
    summary_path: Path
    logged: Logged


def run_lab(
    scenario: Scenario,
    *,
    methods: Sequence[str] | None,
    seeds: int,
    out: Path | None,
    tracking_uri: str | None,
    command: str,
    reps: int = DEFAULT_REPS,
    workers: int = 1,
) -> LabOutcome:
    """Simulate ``scenario`` with ``seeds`` seeds (0 … seeds − 1), write ``summary.md`` and figures
    into ``out`` (default :func:`default_out`) and log the run to the MLflow store ``tracking_uri``
    (default :func:`mrbench.store.local.resolve_tracking_uri`) through a
    :class:`~mrbench.lab.writer.LabWriter` of its own, which checks the store while the simulation
    runs. Method names and the store's folder are checked before anything runs; a store that cannot
    be used stops the command before the report is written. (``mrbench simulate`` shares one writer
    between its scenarios: :func:`run_lab_with`.)"""
    from mrbench.store.client import check_store_folder
    from mrbench.store.local import resolve_tracking_uri

    load_estimators(scenario, methods)
    uri = resolve_tracking_uri(tracking_uri)
    check_store_folder(uri)
    with LabWriter(uri) as writer:
        writer.check()
        return run_lab_with(
            writer,
            scenario,
            methods=methods,
            seeds=seeds,
            out=out,
            command=command,
            reps=reps,
            workers=workers,
        )


def run_lab_with(
    writer: LabWriter,
    scenario: Scenario,
    *,
    methods: Sequence[str] | None,
    seeds: int,
    out: Path | None,
    command: str,
    reps: int = DEFAULT_REPS,
    workers: int = 1,
) -> LabOutcome:
    """:func:`run_lab` logging through ``writer`` (its store), whose store check may still be under
    way; the method names are the caller's to have checked (:func:`load_estimators`)."""
    if workers > 1:
        with process_pool(workers) as pool:
            result = simulate(scenario, methods, range(seeds), executor=pool)
    else:
        result = simulate(scenario, methods, range(seeds))
    summaries = summarise(
        {m: run.scores for m, run in result.runs.items()},
        reference=REFERENCE_METHOD if REFERENCE_METHOD in result.runs else None,
        reps=reps,
    )
    writer.open(result, summaries, command)  # the runs are logged while the figures are drawn
    folder = Path(out) if out is not None else default_out(scenario)
    path = write_summary(result, summaries, folder, command=command, reps=reps)
    logged = writer.close(result, folder)
    return LabOutcome(result, summaries, path, logged)
