"""mrbench's own store on disk: the results folder, writability, and re-rooting a moved folder.

Default store: ``sqlite:///<results>/mlflow.db`` with artifacts under ``<results>/artifacts``,
where ``<results>`` is ``$MRBENCH_RESULTS`` or ``./results``. ``--tracking-uri`` or
``MLFLOW_TRACKING_URI`` point at a server (or another store) instead (:func:`resolve_tracking_uri`).

Moving the results folder. MLflow records absolute locations: an experiment's ``artifact_location``
(``file://<results>/artifacts``) and, from it, each run's ``artifact_uri``
(``<artifact_location>/<run_id>/artifacts``). So that a results folder moved or copied elsewhere keeps
its artifacts, those locations are taken as relative to the folder the store is in:

- writing: before mrbench writes to its own store (``sqlite:///<results>/mlflow.db``, ``<results>``
  per ``$MRBENCH_RESULTS``) — :func:`~mrbench.store.client.check_tracking_reachable` and
  :func:`~mrbench.store.client.ensure_experiment` —
  :func:`reroot_moved_store` rewrites, with SQL in one transaction (MLflow has no API for it), the
  locations that still name another results folder's ``artifacts/``, and the ``checkpoint_dir``
  params under it, to this folder; once, with a warning "results folder moved from X: re-rooted N
  experiment(s)". New runs, and artifacts logged later to old runs, then go to the new folder. An
  experiment is re-rooted when its old folder is gone, or when this folder holds its runs'
  artifacts (a copy); never when the old path is this same folder seen through another path.
- reading: the report re-roots on read (:mod:`mrbench.store.reader`) and writes no store, so it
  also works on a moved store nothing has re-rooted yet (one that cannot be written, say);
- a record of what an outage kept (:mod:`mrbench.engine.cell.checkpoints`) is re-rooted when read.

A results folder is used from one path at a time: the same folder used at once from two paths
(a container and its host, say) would be re-rooted back and forth.
"""

from __future__ import annotations

import logging
import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from mrbench.core import layout
from mrbench.core.env import RESULTS
from mrbench.core.errors import UserError
from mrbench.store.uri import ARTIFACTS_DIR, STORE_DB, local_path, sqlite_path, store_uri

log = logging.getLogger(__name__)


def results_dir() -> Path:
    """The local results folder (created if missing); :class:`UserError` if it cannot be."""
    path = RESULTS.get().resolve()
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # a file in the way, a read-only or missing parent
        what = RESULTS.name if RESULTS.is_set() else "the default ./results"
        reason = "it is a file" if path.exists() else (exc.strerror or str(exc))
        raise UserError(f"results folder {path} ({what}) cannot be used: {reason}") from None
    return path


def check_store_writable(uri: str) -> None:
    """:class:`UserError` when a local sqlite store or the results folder cannot be written
    (read-only file system or permissions): checked before a run starts, not after it failed."""
    db = sqlite_path(uri)
    if db is None:
        return
    for path in (db, db.parent, results_dir()):
        if path.exists() and not os.access(path, os.W_OK):
            raise UserError(
                f"the MLflow tracking store {uri!r} cannot be written: {path} is read-only; point "
                f"--tracking-uri or {RESULTS.name} at a writable folder"
            )


def resolve_tracking_uri(uri: str | None = None) -> str:
    """Explicit URI, else ``$MLFLOW_TRACKING_URI``, else the sqlite store under :func:`results_dir`."""
    if uri:
        return uri
    env = os.environ.get("MLFLOW_TRACKING_URI")
    if env:
        return env
    return store_uri(results_dir())


def _own_results_folder(uri: str) -> Path | None:
    """The results folder when ``uri`` is mrbench's own store ``sqlite:///<results>/mlflow.db``, else
    None. ``<results>`` as :func:`results_dir` names it, not created here."""
    db = sqlite_path(uri)
    if db is None:
        return None
    results = RESULTS.get().resolve()
    return results if db.resolve() == results / STORE_DB else None


def _moved_from(db: sqlite3.Connection, experiment_id: int, location: str, results: Path) -> Path | None:
    """The other results folder experiment ``experiment_id``'s ``location`` names, if its artifacts
    belong in ``results`` now (see the module docstring); else None."""
    old = local_path(location)
    if old is None or old.name != ARTIFACTS_DIR or old.parent == results:
        return None
    old_db = old.parent / STORE_DB
    if old_db.exists() and os.path.samefile(old_db, results / STORE_DB):
        return None  # this very folder, through another path
    if not old.is_dir():
        return old.parent  # moved (or renamed) away
    run_ids = db.execute("SELECT run_uuid FROM runs WHERE experiment_id = ?", (experiment_id,))
    return old.parent if any((results / ARTIFACTS_DIR / r).is_dir() for (r,) in run_ids) else None


def _swap_prefix(
    db: sqlite3.Connection, table: str, column: str, old: str, new: str, experiment_id: int, param: str = ""
) -> int:
    """In the rows of experiment ``experiment_id`` (of its runs' params named ``param`` for ``params``),
    replace the prefix ``old`` of ``table.column`` by ``new``; return how many rows changed."""
    where = "experiment_id = ?"
    if param:
        where = f"key = '{param}' AND run_uuid IN (SELECT run_uuid FROM runs WHERE {where})"
    sql = (
        f"UPDATE {table} SET {column} = ? || substr({column}, ?) WHERE substr({column}, 1, ?) = ? AND {where}"
    )
    return db.execute(sql, (new, len(old) + 1, len(old), old, experiment_id)).rowcount


def reroot_moved_store(results: Path) -> int:
    """Point the experiments of ``<results>/mlflow.db`` whose artifacts moved here with the folder at
    ``<results>/artifacts``; return how many were re-rooted (0 when none was, or the store cannot be
    written: the warning says so, and the report still reads the moved artifacts).

    One transaction rewrites ``experiments.artifact_location``, the ``runs.artifact_uri`` under it and
    the runs' ``checkpoint_dir`` params under the old folder. Cheap when there is nothing to do (one
    query); done again by a later call only if the folder moves again.
    """
    results = results.resolve()
    if not (results / STORE_DB).is_file():
        return 0
    new_root = (results / ARTIFACTS_DIR).as_uri()
    db = sqlite3.connect(results / STORE_DB, timeout=60)  # a sweep writing meanwhile: wait for it
    try:
        exists = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'experiments'"
        if db.execute(exists).fetchone() is None:
            return 0  # MLflow has not created its tables yet
        experiments = db.execute("SELECT experiment_id, artifact_location FROM experiments").fetchall()
        moves = [(e, loc, old) for e, loc in experiments if (old := _moved_from(db, e, loc, results))]
        n_experiments = n_runs = 0
        with db:  # all or nothing
            for exp, location, old in moves:
                n_experiments += _swap_prefix(db, "experiments", "artifact_location", location, new_root, exp)
                n_runs += _swap_prefix(db, "runs", "artifact_uri", f"{location}/", f"{new_root}/", exp)
                _swap_prefix(
                    db, "params", "value", f"{old}/", f"{results}/", exp, layout.PARAM_CHECKPOINT_DIR
                )
    except sqlite3.Error as exc:
        log.warning(
            "results folder %s: its store names artifacts in another folder and cannot be re-rooted (%s); "
            "new runs would write there: make %s writable",
            results,
            exc,
            results / STORE_DB,
        )
        return 0
    finally:
        db.close()
    if n_experiments:  # 0 when another process re-rooted it first
        olds = ", ".join(sorted({str(old) for _, _, old in moves}))
        log.warning(
            "results folder moved from %s: re-rooted %d experiment(s) (%d runs) to %s",
            olds,
            n_experiments,
            n_runs,
            results,
        )
    return n_experiments


def reroot_own_store(uri: str) -> None:
    """:func:`reroot_moved_store` when ``uri`` is mrbench's own store (other stores are left alone)."""
    results = _own_results_folder(uri)
    if results is not None:
        reroot_moved_store(results)


@contextmanager
def store_creation_lock(uri: str) -> Iterator[None]:
    """Hold ``<db>.lock`` while a local sqlite store is opened for the first time; a store that does
    not exist yet starts as a copy of an empty one (:mod:`mrbench.store.empty_store`).

    Opening a new sqlite store creates its tables and runs MLflow's migrations; two processes
    doing that at once (two sweeps or runs started together on a fresh results folder) fail with
    errors such as "No such constraint: 'uq_experiments_name'". The lock costs a file open; a
    server creates its tables itself, once, so other URIs take none.
    """
    db = sqlite_path(uri)
    if db is None:
        yield
        return
    from filelock import FileLock

    from mrbench.store.empty_store import seed_new_store

    with FileLock(str(db) + ".lock", timeout=600):
        seed_new_store(db)
        yield
