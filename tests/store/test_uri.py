"""The one parser of tracking URIs and artifact locations (mrbench.store.uri)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mrbench.store.uri import (
    is_local_store,
    local_path,
    missing_sqlite_store,
    run_artifacts_folder,
    sqlite_path,
    sqlite_uri,
    store_uri,
)


def test_sqlite_uri_round_trips(tmp_path: Path) -> None:
    db = tmp_path / "mlflow.db"
    assert sqlite_path(sqlite_uri(db)) == db
    assert store_uri(tmp_path) == f"sqlite:///{db}"
    assert sqlite_path("postgresql://host/db") is None
    assert sqlite_path("http://127.0.0.1:5000") is None


def test_missing_sqlite_store_looks_only_at_sqlite(tmp_path: Path) -> None:
    uri = store_uri(tmp_path)
    assert missing_sqlite_store(uri)
    (tmp_path / "mlflow.db").write_bytes(b"")
    assert not missing_sqlite_store(uri)
    assert not missing_sqlite_store("http://127.0.0.1:1")  # a server is asked, never looked for


@pytest.mark.parametrize(
    ("location", "expected"),
    [
        ("file:///r/artifacts/1/artifacts", Path("/r/artifacts/1/artifacts")),
        ("file:///with%20space/a", Path("/with space/a")),
        ("/plain/path", Path("/plain/path")),
        ("relative/path", Path("relative/path")),
        # Remote artifact roots: MLflow's proxied scheme has one slash, so "://" alone misses it.
        ("mlflow-artifacts:/1/abc/artifacts", None),
        ("s3://bucket/1/abc/artifacts", None),
        ("http://host/artifacts", None),
    ],
)
def test_local_path_one_rule_for_every_reader(location: str, expected: Path | None) -> None:
    assert local_path(location) == expected


def test_local_stores() -> None:
    assert is_local_store("sqlite:///x/mlflow.db")
    assert is_local_store("file:///x/mlruns")
    assert is_local_store("mlruns")
    assert not is_local_store("http://host:5000")
    assert not is_local_store("databricks://profile")


def test_run_artifacts_folder(tmp_path: Path) -> None:
    assert run_artifacts_folder(tmp_path, "abc") == tmp_path / "artifacts" / "abc" / "artifacts"
