"""Fixtures of the CLI tests: empty MLflow stores without paying for a schema migration each time."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def _empty_store_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One empty MLflow sqlite store, created once (its schema migration takes seconds)."""
    from mlflow.tracking import MlflowClient

    path = tmp_path_factory.mktemp("store-template") / "mlflow.db"
    MlflowClient(tracking_uri=f"sqlite:///{path}").search_experiments()
    return path


@pytest.fixture
def new_store(_empty_store_file: Path) -> Callable[[Path], str]:
    """``new_store(folder)``: a copy of the empty store as ``folder/mlflow.db``; returns its URI."""

    def make(folder: Path) -> str:
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(_empty_store_file, folder / "mlflow.db")
        return f"sqlite:///{folder / 'mlflow.db'}"

    return make
