"""Bulk reads of one experiment's runs from MLflow, fast enough for reports over ~1,000 runs.

Two readers with the same results:

- :class:`SqliteReader` — for ``sqlite:///`` stores: a handful of read-only SQL queries over
  MLflow's own tables (runs, tags, params, latest_metrics, metrics). Reading 900 runs' learning
  curves one ``get_metric_history`` call at a time takes minutes; one query takes about a second.
- :class:`ClientReader` — any tracking URI (servers included), through the
  :class:`~mrbench.store.client.RetryingClient` every command uses (a brief outage of a tracking
  server costs a report nothing): ``search_runs`` pages for runs and latest metrics,
  ``get_metric_history`` in a thread pool.

:func:`open_reader` picks the SQL reader for sqlite stores (falling back to the client if the
schema is not what it expects) and the client reader otherwise. Both read MLflow only.

A moved results folder: for a sqlite store in folder ``S``, a run whose recorded artifact folder is
elsewhere is read from ``S/artifacts/<run_id>/artifacts`` when that exists (the folder was moved or
copied with its store), so reports work before anything re-rooted the store, and without writing it
(see :mod:`mrbench.store.local`, "Moving the results folder").
"""

from __future__ import annotations

import json
import math
import sqlite3
import tempfile
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mrbench.store.client import StoreFault, TrackingUnavailable, note_store, tracking_client
from mrbench.store.faults import fault_cause, store_fault_message
from mrbench.store.runs import iter_runs
from mrbench.store.uri import local_path, run_artifacts_folder, sqlite_path

History = tuple[np.ndarray, np.ndarray]
"""``(steps [S] int, values [S] float)`` of one metric, ordered by step (last write per step wins)."""


@dataclass
class RunRecord:
    """One MLflow run: status, times (ms since epoch), tags, params and latest metric values."""

    run_id: str
    status: str
    start_time: int
    end_time: int | None
    artifact_uri: str
    tags: dict[str, str] = field(default_factory=dict)
    params: dict[str, str] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)


def _history(rows: Iterable[tuple[int, float, int]]) -> History:
    """``(step, value, timestamp)`` rows → one value per step, the latest write winning."""
    best: dict[int, tuple[int, float]] = {}
    for step, value, ts in rows:
        old = best.get(step)
        if old is None or ts >= old[0]:
            best[step] = (ts, value)
    steps = np.array(sorted(best), dtype=np.int64)
    values = np.array([best[s][1] for s in steps.tolist()], dtype=float)
    return steps, values


class _Reader:
    tracking_uri: str

    @property
    def store_folder(self) -> Path | None:
        """The folder of a sqlite store (its artifacts under ``artifacts/``); None for other stores."""
        db = sqlite_path(self.tracking_uri)
        return None if db is None else db.resolve().parent

    def _artifact_uri(self, run_id: str, recorded: str) -> str:
        """``recorded``, or the run's artifact folder in this store's own folder when the recorded
        one is elsewhere and the own one exists (a moved or copied results folder)."""
        folder, local = self.store_folder, local_path(recorded)
        if folder is None or local is None:
            return recorded
        own = run_artifacts_folder(folder, run_id)
        return own.as_uri() if local != own and own.is_dir() else recorded

    def read_json_artifact(self, run: RunRecord, path: str) -> Any | None:
        """A run's JSON artifact, or None if it does not exist or cannot be parsed (a store that
        stays unreachable past the retry bound is a :class:`TrackingUnavailable`, not a gap)."""
        local = local_path(run.artifact_uri)
        try:
            if local is not None:
                target = local / path
                if not target.exists():
                    return None
                return json.loads(target.read_text(encoding="utf-8"))
            with tempfile.TemporaryDirectory(prefix="mrbench-artifact-") as folder:
                downloaded = self._download(run.run_id, path, folder)
                return json.loads(Path(downloaded).read_text(encoding="utf-8"))
        except TrackingUnavailable:
            raise
        except Exception:  # missing or unreadable artifact: the report says what it lacks
            return None

    def _download(self, run_id: str, path: str, folder: str) -> str:
        """Download the run's artifact ``path`` into ``folder``; return the local file."""
        import mlflow.artifacts

        return mlflow.artifacts.download_artifacts(
            run_id=run_id, artifact_path=path, tracking_uri=self.tracking_uri, dst_path=folder
        )

    def read_json_artifacts(self, runs: list[RunRecord], path: str) -> dict[str, Any]:
        """``run_id → parsed JSON`` for the runs that have ``path``."""
        workers = 1 if all(local_path(r.artifact_uri) is not None for r in runs) else 8
        with ThreadPoolExecutor(max_workers=workers) as pool:
            values = list(pool.map(lambda r: self.read_json_artifact(r, path), runs))
        return {r.run_id: v for r, v in zip(runs, values, strict=True) if v is not None}


class SqliteReader(_Reader):
    """Read-only SQL over an MLflow sqlite tracking store."""

    def __init__(self, tracking_uri: str) -> None:
        self.tracking_uri = tracking_uri
        path = sqlite_path(tracking_uri)
        if path is None or not path.exists():
            raise FileNotFoundError(path)
        self._db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)

    def close(self) -> None:
        self._db.close()

    def experiment_id(self, name: str) -> str | None:
        """Id of the active experiment ``name`` (default workspace first), or None."""
        row = self._db.execute(
            "SELECT experiment_id FROM experiments WHERE name = ? AND lifecycle_stage = 'active' "
            "ORDER BY (workspace = 'default') DESC LIMIT 1",
            (name,),
        ).fetchone()
        return None if row is None else str(row[0])

    def runs(self, experiment_id: str) -> list[RunRecord]:
        """Every active run of the experiment with tags, params and latest metrics."""
        q = (
            "SELECT {cols} FROM {table} x JOIN runs r ON r.run_uuid = x.run_uuid "
            "WHERE r.experiment_id = ? AND r.lifecycle_stage = 'active'"
        )
        exp = (int(experiment_id),)
        records = {
            run_id: RunRecord(run_id, status, start or 0, end, self._artifact_uri(run_id, uri or ""))
            for run_id, status, start, end, uri in self._db.execute(
                "SELECT run_uuid, status, start_time, end_time, artifact_uri FROM runs "
                "WHERE experiment_id = ? AND lifecycle_stage = 'active'",
                exp,
            )
        }
        for run_id, key, value in self._db.execute(
            q.format(cols="x.run_uuid, x.key, x.value", table="tags"), exp
        ):
            records[run_id].tags[key] = value
        for run_id, key, value in self._db.execute(
            q.format(cols="x.run_uuid, x.key, x.value", table="params"), exp
        ):
            records[run_id].params[key] = value
        for run_id, key, value, is_nan in self._db.execute(
            q.format(cols="x.run_uuid, x.key, x.value, x.is_nan", table="latest_metrics"), exp
        ):
            records[run_id].metrics[key] = math.nan if is_nan else float(value)
        return list(records.values())

    def histories(self, run_ids: list[str], keys: set[str]) -> dict[str, dict[str, History]]:
        """``run_id → key → History`` for the given metric keys."""
        raw: dict[str, dict[str, list[tuple[int, float, int]]]] = {}
        key_list = sorted(keys)
        # Chunks keep each statement under SQLite's bound-parameter limit.
        for start in range(0, len(run_ids), 400):
            chunk = run_ids[start : start + 400]
            sql = (
                "SELECT run_uuid, key, step, value, is_nan, timestamp FROM metrics "
                f"WHERE run_uuid IN ({','.join('?' * len(chunk))}) "
                f"AND key IN ({','.join('?' * len(key_list))})"
            )
            for run_id, key, step, value, is_nan, ts in self._db.execute(sql, (*chunk, *key_list)):
                raw.setdefault(run_id, {}).setdefault(key, []).append(
                    (int(step), math.nan if is_nan else float(value), int(ts))
                )
        return {rid: {k: _history(rows) for k, rows in by_key.items()} for rid, by_key in raw.items()}


class ClientReader(_Reader):
    """Reads through :func:`~mrbench.store.client.tracking_client` (every call rides out an outage
    of ``retry_s`` seconds, default :func:`~mrbench.store.client.tracking_retry_s`); works for every
    tracking URI."""

    def __init__(self, tracking_uri: str, retry_s: float | None = None) -> None:
        self.tracking_uri = tracking_uri
        self.client = tracking_client(tracking_uri, retry_s)

    def close(self) -> None:
        """Nothing to release: an ``MlflowClient`` keeps no open connection of its own."""

    def _download(self, run_id: str, path: str, folder: str) -> str:
        return self.client.download_artifacts(run_id, path, folder)

    def experiment_id(self, name: str) -> str | None:
        exp = self.client.get_experiment_by_name(name)
        return None if exp is None or exp.lifecycle_stage != "active" else exp.experiment_id

    def runs(self, experiment_id: str) -> list[RunRecord]:
        return [
            RunRecord(
                run.info.run_id,
                run.info.status,
                run.info.start_time or 0,
                run.info.end_time,
                self._artifact_uri(run.info.run_id, run.info.artifact_uri or ""),
                dict(run.data.tags),
                dict(run.data.params),
                {k: float(v) for k, v in run.data.metrics.items()},
            )
            for run in iter_runs(self.client, experiment_id)
        ]

    def histories(self, run_ids: list[str], keys: set[str]) -> dict[str, dict[str, History]]:
        pairs = [(rid, key) for rid in run_ids for key in sorted(keys)]

        def fetch(pair: tuple[str, str]) -> list[Any]:
            return self.client.get_metric_history(*pair)

        with ThreadPoolExecutor(max_workers=8) as pool:
            results = list(pool.map(fetch, pairs))
        out: dict[str, dict[str, History]] = {}
        for (rid, key), metrics in zip(pairs, results, strict=True):
            if metrics:
                out.setdefault(rid, {})[key] = _history(
                    (m.step, float(m.value), m.timestamp) for m in metrics
                )
        return out


Reader = SqliteReader | ClientReader


def open_reader(tracking_uri: str, kind: str = "auto") -> Reader:
    """The fastest reader for ``tracking_uri``: ``"sql"`` for sqlite stores, else ``"client"``.

    A sqlite store that is damaged (or cannot be read for a disk fault) is a
    :class:`~mrbench.store.client.StoreFault` naming the file; one whose tables are not what the SQL
    reader expects (another MLflow version) is read through the client.
    """
    if kind not in ("auto", "sql", "client"):
        raise ValueError(f"reader kind must be auto, sql or client, got {kind!r}")
    note_store(tracking_uri)
    db = sqlite_path(tracking_uri)
    if kind != "client" and db is not None:
        try:
            reader = SqliteReader(tracking_uri)
            reader._db.execute("SELECT workspace FROM experiments LIMIT 1").fetchall()
            reader._db.execute(
                "SELECT run_uuid, key, value, is_nan, step FROM latest_metrics LIMIT 1"
            ).fetchall()
            return reader
        except (sqlite3.Error, FileNotFoundError) as exc:
            cause = fault_cause(exc, db)
            if cause is not None:
                raise StoreFault(store_fault_message(tracking_uri, cause)) from None
            if kind == "sql":
                raise
    return ClientReader(tracking_uri)
