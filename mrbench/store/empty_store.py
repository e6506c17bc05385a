"""A new local store starts as a copy of an empty one that MLflow made once per MLflow version.

Opening a new sqlite store makes MLflow create its tables and run every migration of its schema:
about 1.3 s on a 2-core machine, paid by each fresh results folder (the lab's one-scenario command
takes about 5 s in all). The first time this MLflow version opens a new store here, MLflow makes the
store itself in a temporary folder; the file, minus the "Default" experiment whose artifact location
names that temporary folder, is kept as ``<cache>/mlflow-<version>-empty.db``. Later new stores are
copies of it, and MLflow, on first opening one, finds its schema at the head revision and adds its
Default experiment with the artifact location it computes for this store, as for any new store.

``<cache>`` is ``$MRBENCH_CACHE``, else ``$XDG_CACHE_HOME/mrbench``, else ``~/.cache/mrbench``. A cache
that cannot be written, or any failure here, leaves the store to MLflow, which creates it the slow way.
Used under :func:`mrbench.store.local.store_creation_lock`.
"""

from __future__ import annotations

import logging
import os
import shutil
import sqlite3
import tempfile
from pathlib import Path

from mrbench.core import env
from mrbench.core.results_layout import store_db

log = logging.getLogger(__name__)


def cache_dir() -> Path:
    """``$MRBENCH_CACHE``, else ``$XDG_CACHE_HOME/mrbench``, else ``~/.cache/mrbench`` (not created here)."""
    cache = env.CACHE.get()
    if cache is not None:
        return cache
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "mrbench"


def template_path() -> Path:
    """Where this MLflow version's empty store is kept."""
    import mlflow

    return cache_dir() / f"mlflow-{mlflow.__version__}-empty.db"


def _make_template(path: Path) -> None:
    """Let MLflow create a store in a temporary folder, drop its Default experiment, and move the file
    to ``path`` (atomically: two processes making it at once each write a whole file)."""
    from mlflow.tracking import MlflowClient

    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=path.parent, prefix=".empty-store-") as tmp:
        db = store_db(Path(tmp))
        MlflowClient(tracking_uri=f"sqlite:///{db}").search_experiments(max_results=1)
        con = sqlite3.connect(db)
        try:
            with con:
                con.execute("DELETE FROM experiment_tags WHERE experiment_id = 0")
                con.execute("DELETE FROM experiments WHERE experiment_id = 0")
            con.execute("VACUUM")
        finally:
            con.close()
        os.replace(db, path)


def seed_new_store(db: Path) -> bool:
    """Copy the empty store to ``db`` when ``db`` does not exist yet; True when it did.

    Never raises: on any failure (no cache, a full disk) ``db`` is left absent for MLflow to create.
    """
    if db.exists() or not db.parent.is_dir():
        return False
    partial = db.with_name(f".{db.name}.{os.getpid()}.partial")
    try:
        template = template_path()
        if not template.is_file():
            _make_template(template)
        shutil.copyfile(template, partial)
        os.link(partial, db)  # never replaces a store that appeared meanwhile (FileExistsError)
        return True
    except Exception as exc:  # any failure: the slow way still works
        log.debug("new store %s not copied from an empty store (%s): MLflow creates it", db, exc)
        return False
    finally:
        partial.unlink(missing_ok=True)
