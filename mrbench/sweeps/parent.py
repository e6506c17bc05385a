"""The sweep's parent run: one per invocation, over the child runs of the cells it executes.

Tags (names in :mod:`mrbench.core.layout`): role=sweep, the sweep name, the exact command line,
the git sha, host, pid and heartbeat (to tell whether it is alive, :mod:`mrbench.store.claims`),
the preset, the unavailable tasks, ``version.<package>`` of every package that decides what a cell
computes, and one ``claim.<run key>`` per cell it runs (:mod:`mrbench.sweeps.claims`).
Params: the sweep config, flattened. Artifact: the sweep file (config, command, versions, the
grid's cells, unavailable tasks).
"""

from __future__ import annotations

from typing import Any

from mrbench.core import layout
from mrbench.core.records import SweepRecord
from mrbench.store.claims import holder_tags
from mrbench.store.runs import end_runs, running_runs
from mrbench.sweeps.cell import Cell
from mrbench.sweeps.spec import SweepSpec

VERSION_PACKAGES = (
    "torch",
    "trl",
    "transformers",
    "accelerate",
    "tokenizers",
    "datasets",
    "mlflow",
    "lm-eval",
    "numpy",
)
"""Packages whose version can change what a cell computes (tokenizers trains the tiny models'
tokenizer); ``constraints.txt`` pins the ones the committed reports were made with."""


def package_versions() -> dict[str, str]:
    """Versions of Python (line events, which the code-efficiency reward counts, differ between
    Python versions) and of the packages that decide what a cell computes, and under ``cpu`` this
    machine's CPU kind (:func:`~mrbench.core.provenance.cpu_kind`: a CPU cell's float rounding)."""
    import platform
    from importlib import metadata

    from mrbench.core.provenance import cpu_kind

    versions = {"python": platform.python_version(), layout.VERSION_CPU: cpu_kind()}
    for name in VERSION_PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def _flat_params(spec: SweepSpec) -> dict[str, str]:
    """The sweep config as MLflow params: nested keys joined with dots, lists comma-joined."""
    flat: dict[str, str] = {}
    for key, value in spec.to_dict().items():
        if isinstance(value, dict):
            for sub, inner in value.items():
                if isinstance(inner, dict):
                    for leaf, v in inner.items():
                        flat[f"{key}.{sub}.{leaf}"] = str(v)
                else:
                    flat[f"{key}.{sub}"] = (
                        ",".join(map(str, inner)) if isinstance(inner, list) else str(inner)
                    )
        else:
            flat[key] = ",".join(map(str, value)) if isinstance(value, list) else str(value)
    return {k: v[:6000] for k, v in flat.items()}  # MLflow's limit on a param value


def start_parent_run(
    client: Any,
    experiment_id: str,
    spec: SweepSpec,
    *,
    command: str,
    cells: list[Cell],
    unavailable: dict[str, str],
) -> str:
    """Create this invocation's parent run (tags, config params, sweep artifact); return its id."""
    from mlflow.entities import Param

    from mrbench.core.provenance import git_sha

    versions = package_versions()
    values = {
        layout.ROLE: layout.ROLE_SWEEP,
        layout.SWEEP: spec.name,
        layout.COMMAND: command,
        layout.GIT_SHA: git_sha(),
        layout.PRESET: spec.preset or "",
        layout.UNAVAILABLE_TASKS: layout.join_list(list(unavailable)),
        layout.SCHEMA: str(layout.SCHEMA_VERSION),
        **{layout.VERSION + name: version for name, version in versions.items()},
    }
    tags = {layout.tag(name): value for name, value in values.items()} | holder_tags()  # whose it is
    run_id = client.create_run(experiment_id, tags=tags, run_name=f"sweep {spec.name}").info.run_id
    client.log_batch(run_id, params=[Param(k, v) for k, v in _flat_params(spec).items()])
    record = SweepRecord(
        name=spec.name,
        command=command,
        config=spec.to_dict(),
        versions=versions,
        cells=tuple(c.entry() for c in cells),
        unavailable=dict(unavailable),
    )
    client.log_dict(run_id, record.to_json(), layout.SWEEP_ARTIFACT)
    return run_id


def finish_parent_run(client: Any, run_id: str, status: str) -> None:
    """End the parent run with ``status`` (FINISHED, FAILED or KILLED)."""
    client.set_terminated(run_id, status)


def kill_running_children(client: Any, experiment_id: str, parent_run_id: str) -> int:
    """Mark this invocation's still-RUNNING child runs KILLED, as it ends (a worker that died without
    ending its run, or one it stopped); return how many. Whether their processes live does not
    matter: the invocation that owns them says they are over."""
    return len(end_runs(client, running_runs(client, experiment_id, parent_run_id=parent_run_id), "KILLED"))
