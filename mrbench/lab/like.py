"""The rewards ``mrbench simulate --like SOURCE`` fits a scenario to, read from where SOURCE says.

``run:<RUN_ID>``: one cell's ``rewards.npz``; ``sweep:<NAME>``: the latest FINISHED run of every cell
of the sweep (experiment NAME), one record per task, the cells' batches one after another; anything
else: a rewards file (``.npz``, :class:`~mrbench.core.rewards_record.RewardsRecord`). The store is only
read: a missing sqlite store is refused, not created. Every problem is a one-line
:class:`~mrbench.core.errors.UserError` naming the source.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mrbench.core import layout
from mrbench.core.errors import UserError
from mrbench.core.rewards_record import RewardsRecord

NO_REWARDS = (
    "made before mrbench kept a cell's rewards (rewards.npz): train the cell again with this mrbench "
    "(in a new experiment or results folder: a finished cell is not trained again) to get them"
)


@dataclass(frozen=True)
class LikeSource:
    """One record to fit: the scenario's ``name``, ``what`` (how messages name the rewards), the
    ``record`` and, from a sweep, its ``task``."""

    name: str
    what: str
    record: RewardsRecord
    task: str = ""


def read_like(source: str, tracking_uri: str) -> list[LikeSource]:
    """The records ``source`` names (one, or one per task for a sweep)."""
    kind, _, rest = source.partition(":")
    if kind == "run" and rest:
        return [_read_run(rest, tracking_uri)]
    if kind == "sweep" and rest:
        return _read_sweep(rest, tracking_uri)
    path = Path(source)
    if not path.is_file():
        raise UserError(
            f"--like {source!r}: no such rewards file; give run:<RUN_ID>, sweep:<NAME> or the path of a "
            "rewards.npz"
        )
    record = RewardsRecord.load(path, f"rewards file {str(path)!r}")
    return [LikeSource(f"like-{_slug(path.stem)}", f"rewards file {str(path)!r}", record)]


def _slug(text: str) -> str:
    return layout.name_slug(text)


def _check_store(tracking_uri: str, source: str) -> None:
    from mrbench.store.uri import missing_sqlite_store

    if missing_sqlite_store(tracking_uri):
        raise UserError(f"--like {source}: there is no MLflow store at {tracking_uri} (give --tracking-uri)")


def _read_run(run_id: str, tracking_uri: str) -> LikeSource:
    from mlflow.exceptions import MlflowException

    from mrbench.store.client import tracking_client

    _check_store(tracking_uri, f"run:{run_id}")
    client = tracking_client(tracking_uri)
    try:
        run = client.get_run(run_id)
    except MlflowException:
        raise UserError(f"--like run:{run_id}: no run {run_id!r} in the store {tracking_uri}") from None
    task = layout.read_tag(run.data.tags, layout.TASK) or "run"
    what = f"run {run_id}"
    record = _run_record(client, run_id, what)
    if record is None:
        raise UserError(f"--like run:{run_id}: {what} has no rewards.npz: it was {NO_REWARDS}")
    return LikeSource(f"like-{_slug(task)}-{run_id[:8]}", what, record)


def _run_record(client: object, run_id: str, what: str) -> RewardsRecord | None:
    """The run's ``rewards.npz`` (None when it has none), read in place from a local store."""
    from mrbench.store.uri import local_path

    names = {a.path for a in client.list_artifacts(run_id)}  # type: ignore[attr-defined]
    if layout.REWARDS_ARTIFACT not in names:
        return None
    folder = local_path(client.get_run(run_id).info.artifact_uri)  # type: ignore[attr-defined]
    if folder is not None and (folder / layout.REWARDS_ARTIFACT).is_file():
        return RewardsRecord.load(folder / layout.REWARDS_ARTIFACT, f"{layout.REWARDS_ARTIFACT} of {what}")
    with tempfile.TemporaryDirectory(prefix="mrbench-like-") as tmp:
        local = client.download_artifacts(run_id, layout.REWARDS_ARTIFACT, tmp)  # type: ignore[attr-defined]
        return RewardsRecord.load(local, f"{layout.REWARDS_ARTIFACT} of {what}")


def _read_sweep(name: str, tracking_uri: str) -> list[LikeSource]:
    from mrbench.store.client import tracking_client
    from mrbench.store.reader import open_reader

    _check_store(tracking_uri, f"sweep:{name}")
    reader = open_reader(tracking_uri)
    try:
        experiment = reader.experiment_id(name)
        if experiment is None:
            raise UserError(f"--like sweep:{name}: no sweep {name!r} in the store {tracking_uri}")
        runs = reader.runs(experiment)
    finally:
        reader.close()
    latest: dict[str, object] = {}
    for run in sorted(runs, key=lambda r: r.start_time):
        key = layout.read_tag(run.tags, layout.RUN_KEY)
        if key and run.status == "FINISHED":
            latest[key] = run
    if not latest:
        raise UserError(f"--like sweep:{name}: the sweep has no finished cell in {tracking_uri}")
    client = tracking_client(tracking_uri)
    by_task: dict[str, list[RewardsRecord]] = {}
    without: dict[str, int] = {}
    for run in latest.values():
        task = layout.read_tag(run.tags, layout.TASK)  # type: ignore[attr-defined]
        record = _run_record(client, run.run_id, f"run {run.run_id}")  # type: ignore[attr-defined]
        if record is None:
            without[task] = without.get(task, 0) + 1
        else:
            by_task.setdefault(task, []).append(record)
    if not by_task:
        raise UserError(
            f"--like sweep:{name}: none of its {len(latest)} finished cells has rewards.npz: "
            f"they were {NO_REWARDS}"
        )
    return [
        LikeSource(
            layout.like_scenario(name, task),
            f"sweep {name!r} task {task!r} ({len(recs)} cells)",
            _concat(recs, task),
            task,
        )
        for task, recs in sorted(by_task.items())
    ]


def _concat(records: list[RewardsRecord], task: str) -> RewardsRecord:
    """The cells' batches one after another (groups padded with NaN to the widest batch)."""
    first = records[0]
    for other in records[1:]:
        if other.components != first.components or other.rewards.shape[2] != first.rewards.shape[2]:
            raise UserError(
                f"task {task!r}: its cells' rewards differ in components or group size "
                f"({list(first.components)} G={first.rewards.shape[2]} vs {list(other.components)} "
                f"G={other.rewards.shape[2]}): fit one run at a time (--like run:<RUN_ID>)"
            )
    p = max(r.rewards.shape[1] for r in records)

    def pad(array: np.ndarray, fill: float) -> np.ndarray:
        width = [(0, 0), (0, p - array.shape[1])] + [(0, 0)] * (array.ndim - 2)
        return np.pad(array, width, constant_values=fill)

    # Interleave the cells' steps (step 0 of every cell, then step 1, …): the fit reads the first
    # steps of every cell, not every step of the first cells.
    steps = max(r.rewards.shape[0] for r in records)
    rewards, prompts, groups = [], [], []
    offset = 0
    for t in range(steps):
        for r in records:
            if t < r.rewards.shape[0]:
                rewards.append(pad(r.rewards[t : t + 1], np.nan))
                prompts.append(pad(r.prompt_ids[t : t + 1], -1))
                real = pad(r.group_ids[t : t + 1], -1) >= 0
                groups.append(np.where(real, offset + np.arange(p), -1))
                offset += p
    return RewardsRecord(
        components=first.components,
        weights=first.weights,
        rewards=np.concatenate(rewards),
        prompt_ids=np.concatenate(prompts),
        group_ids=np.concatenate(groups),
    )
