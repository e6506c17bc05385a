"""Helpers of the sweep tests: small specs, running sweeps with fake cells, reading the store back,
and the real ``mrbench sweep`` command line driven by :mod:`fake_sweep_cli`."""

from __future__ import annotations

import io
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from fakes import fake_cell, fake_resolve_spec
from mlflow.tracking import MlflowClient
from rich.console import Console

from mrbench.core import layout
from mrbench.sweeps.orchestrator import SweepOutcome, run_sweep
from mrbench.sweeps.spec import SweepSpec

REPO = Path(__file__).resolve().parents[2]
FAKE_SWEEP_CLI = Path(__file__).with_name("fake_sweep_cli.py")
ROLE, SWEEP, HOST, PID = (layout.tag(n) for n in (layout.ROLE, layout.SWEEP, layout.HOST, layout.PID))
RUN_KEY = layout.tag(layout.RUN_KEY)


def small(name: str, **changes: Any) -> SweepSpec:
    base = dict(
        name=name,
        methods=("grpo", "gdpo"),
        tasks=("tool-calling",),
        models=("tiny",),
        seeds=(0, 1),
        steps=3,
        report=False,
    )
    return SweepSpec(**{**base, **changes})


def quiet() -> Console:
    return Console(file=io.StringIO(), width=200)


def sweep(spec: SweepSpec, uri: str, cell_fn: Any = fake_cell, **kwargs: Any) -> SweepOutcome:
    return run_sweep(
        spec, tracking_uri=uri, resolve=fake_resolve_spec, cell_fn=cell_fn, console=quiet(), **kwargs
    )


def child_statuses(uri: str, name: str) -> dict[str, list[str]]:
    """run key → statuses of its runs (oldest first)."""
    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name(name)
    out: dict[str, list[str]] = defaultdict(list)
    runs = client.search_runs(
        [experiment.experiment_id], max_results=5000, order_by=["attributes.start_time ASC"]
    )
    for run in runs:
        key = run.data.tags.get(RUN_KEY)
        if key:
            out[key].append(run.info.status)
    return dict(out)


def parent_runs(uri: str, name: str) -> list[Any]:
    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name(name)
    runs = client.search_runs(
        [experiment.experiment_id], max_results=100, order_by=["attributes.start_time ASC"]
    )
    return [r for r in runs if r.data.tags.get(ROLE) == layout.ROLE_SWEEP]


def assert_exactly_once_finished(uri: str, name: str, keys: list[str]) -> None:
    statuses = child_statuses(uri, name)
    assert set(statuses) == set(keys)
    for key in keys:
        assert statuses[key].count("FINISHED") == 1, (key, statuses[key])
        assert "RUNNING" not in statuses[key], (key, statuses[key])


def cli_sweep(uri: str, name: str, *extra: str) -> list[str]:
    """The real ``mrbench sweep`` command line, run by :mod:`fake_sweep_cli` with fake cells."""
    return [
        sys.executable,
        str(FAKE_SWEEP_CLI),
        "sweep",
        "--name",
        name,
        "--tracking-uri",
        uri,
        "--methods",
        "grpo,gdpo,corrgrpo",
        "--tasks",
        "tool-calling",
        "--models",
        "tiny",
        "--seeds",
        "0",
        "--steps",
        "3",
        "--no-report",
        *extra,
    ]


def wait_for(uri: str, name: str, predicate: Any, timeout_s: float = 60.0) -> dict[str, list[str]]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        client = MlflowClient(tracking_uri=uri)
        if client.get_experiment_by_name(name) is not None:
            statuses = child_statuses(uri, name)
            if predicate(statuses):
                return statuses
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for the sweep {name!r}")
