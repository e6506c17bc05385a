"""Fixtures of the store tests: a tracking "server" that never answers, and empty sqlite stores."""

from __future__ import annotations

import shutil
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest


class HangingServer:
    """A port on 127.0.0.1 that accepts connections and never answers (a hung server); counts them."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.uri = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.accepted: list[socket.socket] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:  # closed
                return
            self.accepted.append(conn)  # held open, never read nor answered

    def close(self) -> None:
        self.sock.close()
        for conn in self.accepted:
            conn.close()


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
