"""The lab as part of a sweep: the sweep's ``lab`` scenarios, run once per sweep before its report.

``mrbench sweep`` (every preset lists every lab preset) simulates each scenario with the sweep's
methods (``grpo`` added first when the sweep lacks it: the lab compares with it), ``lab_seeds``
seeds and the scenario's steps, and logs each result exactly as ``mrbench simulate --tracking-uri``
does (:func:`mrbench.lab.tracking.log_lab`: experiment ``lab-<scenario>``), its parent run also
tagged with the sweep's name and a key over everything the result depends on (the scenario with the
sweep's method hyper-parameters, the methods, the seeds, the bootstrap resamples). The lab is
deterministic on fixed seeds, so a scenario whose key already has a FINISHED run for this sweep is
not simulated again: a resumed sweep skips it. The report reads the results back from the store
(:mod:`mrbench.reporting.lab_section`). No report folder and no figures are written here; the
command logged with each result (``mrbench simulate …``) reproduces its numbers with both.

Once the cells are done, :func:`plan_like` adds one job per task of the sweep: the scenario fitted to
that task's cells' rewards (``mrbench simulate --like sweep:<name>``, :mod:`mrbench.lab.fit`), logged
the same way with the tag ``like_task``; the report sets what it predicts beside what the cells
measured (:mod:`mrbench.reporting.predicted`).
"""

from __future__ import annotations

import hashlib
import json
import shlex
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from mrbench.core import layout
from mrbench.lab.metrics import summarise
from mrbench.lab.presets import get_scenario
from mrbench.lab.scenarios import Scenario
from mrbench.lab.simulate import REFERENCE_METHOD, simulate
from mrbench.lab.tracking import log_lab
from mrbench.reporting.stats import DEFAULT_REPS


def check_scenarios(names: Sequence[str]) -> tuple[str, ...]:
    """``names`` as given; an unknown one raises the lab's :class:`~mrbench.core.errors.UnknownNameError`."""
    for name in names:
        get_scenario(name)
    return tuple(names)


def lab_methods(methods: Sequence[str]) -> list[str]:
    """The sweep's methods, with the lab's reference ``grpo`` first when they lack it."""
    return list(methods) if REFERENCE_METHOD in methods else [REFERENCE_METHOD, *methods]


@dataclass(frozen=True)
class LabJob:
    """One scenario of a sweep's lab: the scenario with the sweep's hyper-parameters, and its key."""

    scenario: Scenario
    methods: tuple[str, ...]
    seeds: int
    reps: int
    like: str = ""
    """The ``--like`` source of a fitted scenario ("" for a preset)."""
    task: str = ""
    """The task whose rewards a fitted scenario was fitted to."""

    @property
    def key(self) -> str:
        """A hash of everything the result depends on (the lab is deterministic given these)."""
        settings = {
            "scenario": self.scenario.to_dict(),
            "methods": list(self.methods),
            "seeds": self.seeds,
            "reps": self.reps,
        }
        text = json.dumps(settings, sort_keys=True, default=str)
        return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]

    @property
    def command(self) -> str:
        """The ``mrbench simulate`` command that reproduces this result, with its figures."""
        source = ["--like", self.like] if self.like else ["--scenario", self.scenario.name]
        parts = ["mrbench", "simulate", *source, "--methods", ",".join(self.methods)]
        return shlex.join([*parts, "--seeds", str(self.seeds)])


def plan(
    scenarios: Sequence[str],
    methods: Sequence[str],
    method_params: Mapping[str, Mapping[str, Any]],
    seeds: int,
    reps: int = DEFAULT_REPS,
) -> list[LabJob]:
    """A job per scenario: the preset, with the sweep's ``method_params`` over the scenario's own."""
    names = tuple(lab_methods(methods))
    jobs = []
    for name in check_scenarios(scenarios):
        preset = get_scenario(name)
        params = {
            m: {**preset.method_params.get(m, {}), **method_params.get(m, {})}
            for m in names
            if m in method_params or m in preset.method_params
        }
        jobs.append(LabJob(replace(preset, method_params=params), names, seeds, reps))
    return jobs


def plan_like(
    sweep: str,
    tracking_uri: str,
    methods: Sequence[str],
    method_params: Mapping[str, Mapping[str, Any]],
    seeds: int,
    say: Callable[[str], Any] = print,
    reps: int = DEFAULT_REPS,
) -> list[LabJob]:
    """A job per task of ``sweep`` whose finished cells kept their rewards: the scenario fitted to
    them (:func:`mrbench.lab.fit.fit_scenario`) with the sweep's methods and hyper-parameters. A
    task that cannot be fitted is said (``say``) and left out; so is a sweep without such cells."""
    from mrbench.core.errors import UserError
    from mrbench.lab.fit import fit_scenario
    from mrbench.lab.like import read_like

    source = f"sweep:{sweep}"
    try:
        records = read_like(source, tracking_uri)
    except UserError as exc:
        say(f"[yellow]no lab on the cells' rewards[/yellow]: {exc}")
        return []
    names = tuple(lab_methods(methods))
    params = {m: dict(method_params[m]) for m in names if m in method_params}
    jobs = []
    for one in records:
        try:
            fitted = fit_scenario(one.record, name=one.name, what=one.what).scenario
        except UserError as exc:
            say(f"[yellow]no lab on the rewards of {one.task}[/yellow]: {exc}")
            continue
        jobs.append(LabJob(replace(fitted, method_params=params), names, seeds, reps, source, one.task))
    return jobs


def describe(jobs: Sequence[LabJob]) -> str:
    """One line for ``--dry-run`` and the sweep's log: what the lab runs."""
    if not jobs:
        return "lab: off (no scenarios)"
    first = jobs[0]
    return (
        f"lab: {len(jobs)} scenario(s) ({', '.join(j.scenario.name for j in jobs)}) × "
        f"{len(first.methods)} methods ({', '.join(first.methods)}) × {first.seeds} seeds, "
        "simulated before the report (experiments lab-<scenario>)"
    )


def finished_run(client: Any, job: LabJob, sweep: str) -> str | None:
    """The id of a FINISHED lab run of ``sweep`` with ``job``'s key, if the store has one."""
    experiment = client.get_experiment_by_name(layout.lab_experiment(job.scenario.name))
    if experiment is None:
        return None
    query = (
        f"tags.`{layout.tag(layout.SWEEP)}` = '{sweep}' and tags.`{layout.tag(layout.LAB_KEY)}` = "
        f"'{job.key}' and attributes.status = 'FINISHED'"
    )
    found = client.search_runs([experiment.experiment_id], filter_string=query, max_results=1)
    return found[0].info.run_id if found else None


@dataclass(frozen=True)
class LabDone:
    """What became of one job: ``ran`` (simulated now) or ``stored`` (found from an earlier run)."""

    scenario: str
    run_id: str
    ran: bool
    wall_s: float


def run_jobs(
    jobs: Sequence[LabJob],
    *,
    sweep: str,
    tracking_uri: str,
    say: Callable[[str], Any] = print,
    stop: threading.Event | None = None,
) -> list[LabDone]:
    """Simulate and log every job that the store lacks for ``sweep``; ``say`` reports each. Once
    ``stop`` is set, no further job starts (the sweep was interrupted)."""
    from mrbench.store.client import tracking_client

    client = tracking_client(tracking_uri)
    done = []
    for job in jobs:
        if stop is not None and stop.is_set():
            break
        name = job.scenario.name
        stored = finished_run(client, job, sweep)
        if stored is not None:
            say(f"lab {name}: already in the store (run {stored}), skipped")
            done.append(LabDone(name, stored, False, 0.0))
            continue
        start = time.perf_counter()
        result = simulate(job.scenario, job.methods, range(job.seeds))
        summaries = summarise(
            {m: run.scores for m, run in result.runs.items()}, reference=REFERENCE_METHOD, reps=job.reps
        )
        tags = {layout.tag(layout.SWEEP): sweep, layout.tag(layout.LAB_KEY): job.key}
        if job.task:
            tags[layout.tag(layout.LIKE_TASK)] = job.task
        logged = log_lab(result, summaries, tracking_uri=tracking_uri, command=job.command, tags=tags)
        wall = time.perf_counter() - start
        say(f"lab {name}: {len(job.methods)} methods × {job.seeds} seeds in {wall:.1f} s")
        done.append(LabDone(name, logged.parent_run_id, True, wall))
    return done
