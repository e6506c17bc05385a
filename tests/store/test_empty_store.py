"""A new local store is a copy of MLflow's own empty store: made once per MLflow version, equal in
schema and Default experiment to a store MLflow creates itself, and never in the way."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from mrbench.store import empty_store
from mrbench.store.client import check_tracking_reachable


def _schema(db: Path) -> dict[str, list[str]]:
    """Each table's and index's definition as sorted lines (MLflow itself writes a table's
    constraints in varying order from one new store to the next)."""
    con = sqlite3.connect(db)
    try:
        rows = con.execute("SELECT name, sql FROM sqlite_master WHERE sql IS NOT NULL").fetchall()
    finally:
        con.close()
    return {name: sorted(line.strip().rstrip(",") for line in sql.splitlines()) for name, sql in rows}


def _revision(db: Path) -> str:
    con = sqlite3.connect(db)
    try:
        return con.execute("SELECT version_num FROM alembic_version").fetchone()[0]
    finally:
        con.close()


def test_a_new_store_is_copied_from_one_empty_store_and_equals_one_mlflow_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MRBENCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "mlflow-made").mkdir()
    made = tmp_path / "mlflow-made" / "mlflow.db"
    MlflowClient(tracking_uri=f"sqlite:///{made}").search_experiments()

    check_tracking_reachable(f"sqlite:///{tmp_path / 'a' / 'mlflow.db'}")
    template = empty_store.template_path()
    assert template.is_file() and template.parent == tmp_path / "cache"
    made_at = template.stat().st_mtime_ns
    check_tracking_reachable(f"sqlite:///{tmp_path / 'b' / 'mlflow.db'}")
    assert template.stat().st_mtime_ns == made_at  # made once, then copied

    for folder in ("a", "b"):
        db = tmp_path / folder / "mlflow.db"
        assert _schema(db) == _schema(made)
        assert _revision(db) == _revision(made)
        default = MlflowClient(tracking_uri=f"sqlite:///{db}").get_experiment("0")
        # MLflow added the Default experiment itself, with the location it gives any new store
        # (the empty store's own, from a temporary folder, was dropped).
        assert default.name == "Default"
        assert (
            default.artifact_location
            == MlflowClient(tracking_uri=f"sqlite:///{made}").get_experiment("0").artifact_location
        )
    experiment = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'a' / 'mlflow.db'}").create_experiment("x")
    assert experiment == "1"


def test_an_unusable_cache_leaves_the_store_to_mlflow(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the cache folder would be")
    monkeypatch.setenv("MRBENCH_CACHE", str(blocker))
    db = tmp_path / "mlflow.db"
    assert empty_store.seed_new_store(db) is False
    assert not db.exists()
    check_tracking_reachable(f"sqlite:///{db}")  # MLflow creates it the slow way
    assert (
        _revision(db) and MlflowClient(tracking_uri=f"sqlite:///{db}").get_experiment("0").name == "Default"
    )
    assert not list(tmp_path.glob(".*.partial"))


def test_an_existing_store_is_never_replaced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MRBENCH_CACHE", str(tmp_path / "cache"))
    db = tmp_path / "mlflow.db"
    db.write_bytes(b"someone's data")
    assert empty_store.seed_new_store(db) is False
    assert db.read_bytes() == b"someone's data"
