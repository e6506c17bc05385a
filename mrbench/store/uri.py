"""Tracking URIs and artifact locations: the one place that parses them.

mrbench's own store is ``sqlite:///<results>/mlflow.db`` with artifacts under ``<results>/artifacts``
(:data:`STORE_DB`, :data:`ARTIFACTS_DIR`); any other MLflow URI (a server, another database) is
used as given. MLflow keeps a run's artifacts under ``<artifact root>/<run_id>/artifacts``.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import unquote, urlparse

# The default store's file and artifact root, spelled in the results folder's layout; re-exported for
# the store's modules. MLflow keeps a run's artifacts under <root>/<run_id>/artifacts.
from mrbench.core.results_layout import ARTIFACTS_DIR as ARTIFACTS_DIR
from mrbench.core.results_layout import STORE_DB as STORE_DB
from mrbench.core.results_layout import run_artifacts_dir

SQLITE_PREFIX = "sqlite:///"


def sqlite_path(uri: str) -> Path | None:
    """The database file of a ``sqlite:///`` URI (as written, not resolved); None for any other URI.

    >>> sqlite_path("sqlite:////data/results/mlflow.db")
    PosixPath('/data/results/mlflow.db')
    >>> sqlite_path("http://mlflow:5000") is None
    True
    """
    return Path(uri.removeprefix(SQLITE_PREFIX)) if uri.startswith(SQLITE_PREFIX) else None


def missing_sqlite_store(uri: str) -> bool:
    """Whether ``uri`` names a sqlite store whose file does not exist yet (nothing was ever written
    there); False for any other URI (a server is asked, not looked for)."""
    db = sqlite_path(uri)
    return db is not None and not db.exists()


def sqlite_uri(db: Path) -> str:
    """The URI of the sqlite store at ``db`` (the inverse of :func:`sqlite_path`)."""
    return f"{SQLITE_PREFIX}{db}"


def store_uri(results: Path) -> str:
    """The URI of mrbench's own store in the results folder ``results``."""
    return sqlite_uri(results / STORE_DB)


def local_path(location: str) -> Path | None:
    """The folder of a local location: a ``file:`` URI or a plain path; None for remote ones
    (``s3://…``, ``mlflow-artifacts:/…``, any other scheme).

    >>> local_path("file:///r/artifacts/ab/artifacts")
    PosixPath('/r/artifacts/ab/artifacts')
    >>> local_path("relative/folder")
    PosixPath('relative/folder')
    >>> local_path("mlflow-artifacts:/1/ab/artifacts") is None
    True
    """
    if location.startswith("file:"):
        return Path(unquote(urlparse(location).path))
    if "://" not in location and ":" not in location.split("/", 1)[0]:
        return Path(location)
    return None


def store_host(uri: str) -> str | None:
    """The host name of a tracking server's ``http://`` or ``https://`` URI; None for any other URI.

    >>> store_host("http://MLFLOW_HOST:5000")
    'MLFLOW_HOST'
    >>> store_host("sqlite:////r/mlflow.db") is None
    True
    """
    parsed = urlparse(uri)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        return None
    return parsed.netloc.rpartition("@")[2].rsplit(":", 1)[0].strip("[]") or None


def is_local_store(uri: str) -> bool:
    """Whether ``uri`` is a store on this machine's disk (sqlite, ``file:`` or a plain path)."""
    return uri.startswith("sqlite:") or local_path(uri) is not None


def run_artifacts_folder(results: Path, run_id: str) -> Path:
    """Where run ``run_id`` of an experiment rooted at ``<results>/artifacts`` keeps its artifacts."""
    return run_artifacts_dir(results, run_id)
