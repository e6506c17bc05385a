"""Fixtures of the sweep tests."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from mlflow.tracking import MlflowClient
from sweep_testing import REPO


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One sqlite store for the module (creating a store costs seconds); each test uses its own sweep."""
    results = tmp_path_factory.mktemp("results")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MRBENCH_RESULTS", str(results))
        mp.delenv("MLFLOW_TRACKING_URI", raising=False)
        # Worker processes import the fake cell as "fakes:fake_cell" from tests/.
        mp.setenv(
            "PYTHONPATH", os.pathsep.join(filter(None, [str(REPO / "tests"), os.environ.get("PYTHONPATH")]))
        )
        for var in ("MRBENCH_FAKE_CELL_SECONDS", "MRBENCH_FAKE_CELL_FAIL", "MRBENCH_FAKE_UNAVAILABLE"):
            mp.delenv(var, raising=False)
        uri = f"sqlite:///{results / 'mlflow.db'}"
        # Create the store now: a test process and a sweep subprocess initialising one new sqlite
        # file at the same moment race on MLflow's schema migration.
        MlflowClient(tracking_uri=uri).search_experiments()
        yield uri
