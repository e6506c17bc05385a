"""MLflow store resolution and small logging helpers.

Default store: ``sqlite:///<results>/mlflow.db`` with artifacts under ``<results>/artifacts``,
where ``<results>`` is ``$MRBENCH_RESULTS`` or ``./results``. ``--tracking-uri`` or
``MLFLOW_TRACKING_URI`` point at a server (or another store) instead.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from mrbench.core.errors import UserError


def results_dir() -> Path:
    """The local results folder (created if missing)."""
    path = Path(os.environ.get("MRBENCH_RESULTS", "results")).resolve()
    path.mkdir(parents=True, exist_ok=True)
    return path


def resolve_tracking_uri(uri: str | None = None) -> str:
    """Explicit URI, else ``$MLFLOW_TRACKING_URI``, else the sqlite store under :func:`results_dir`."""
    if uri:
        return uri
    env = os.environ.get("MLFLOW_TRACKING_URI")
    if env:
        return env
    return f"sqlite:///{results_dir() / 'mlflow.db'}"


def _is_local_store(uri: str) -> bool:
    return uri.startswith("sqlite:") or uri.startswith("file:") or "://" not in uri


def check_tracking_reachable(uri: str) -> None:
    """Fail early (before any training) if the tracking store cannot be reached."""
    from mlflow.tracking import MlflowClient

    if uri.startswith("sqlite:///"):
        parent = Path(uri.removeprefix("sqlite:///")).parent
        if not parent.exists():
            raise UserError(f"tracking store folder {parent} does not exist (from --tracking-uri {uri!r})")
    if uri.startswith(("http://", "https://")):
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "5")
    try:
        MlflowClient(tracking_uri=uri).search_experiments(max_results=1)
    except Exception as exc:  # MLflow raises many types for an unreachable store
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UserError(f"cannot reach the MLflow tracking store {uri!r}: {first}") from None


def ensure_experiment(name: str, tracking_uri: str) -> str:
    """Id of experiment ``name``, creating it (artifacts under ``results/artifacts`` for local stores)."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=tracking_uri)
    existing = client.get_experiment_by_name(name)
    if existing is not None:
        if existing.lifecycle_stage == "deleted":
            client.restore_experiment(existing.experiment_id)
        return existing.experiment_id
    location = None
    if _is_local_store(tracking_uri):
        location = (results_dir() / "artifacts").as_uri()
    try:
        return client.create_experiment(name, artifact_location=location)
    except Exception:
        # Another worker may have created it between our lookup and create.
        again = client.get_experiment_by_name(name)
        if again is None:
            raise
        return again.experiment_id


def git_sha() -> str:
    """Commit of the working tree the harness runs from ("unknown" outside git); "+dirty" if modified."""
    here = Path(__file__).resolve().parent
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=5, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=here,
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return sha + ("+dirty" if dirty else "")


def log_json_artifact(client: Any, run_id: str, obj: Any, artifact_path: str) -> None:
    """Write ``obj`` as JSON (``.json``) or JSON lines (``.jsonl``, obj a list) at ``artifact_path``."""
    folder, _, filename = artifact_path.rpartition("/")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / filename
        with path.open("w", encoding="utf-8") as fh:
            if filename.endswith(".jsonl"):
                for row in obj:
                    fh.write(json.dumps(row, default=_jsonable) + "\n")
            else:
                json.dump(obj, fh, indent=2, default=_jsonable)
        client.log_artifact(run_id, str(path), artifact_path=folder or None)


def _jsonable(value: Any) -> Any:
    if hasattr(value, "tolist"):
        return value.tolist()
    return str(value)
