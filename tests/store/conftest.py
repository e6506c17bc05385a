"""Fixtures of the store tests: a tracking "server" that never answers, and empty sqlite stores."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hanging import HangingServer


@pytest.fixture
def hanging_server() -> Iterator[HangingServer]:
    server = HangingServer()
    yield server
    server.close()


@pytest.fixture(scope="session")
def _empty_store_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One empty MLflow sqlite store, created once (its schema migration takes seconds)."""
    from mlflow.tracking import MlflowClient

    path = tmp_path_factory.mktemp("store-template") / "mlflow.db"
    MlflowClient(tracking_uri=f"sqlite:///{path}").search_experiments()
    return path


@pytest.fixture
def new_store(_empty_store_file: Path) -> Callable[[Path], Path]:
    """``new_store(folder)``: a copy of the empty store as ``folder/mlflow.db``; returns its path."""

    def make(folder: Path) -> Path:
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(_empty_store_file, folder / "mlflow.db")
        return folder / "mlflow.db"

    return make
