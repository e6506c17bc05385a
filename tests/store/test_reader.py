"""The client reader (any tracking URI) reads through the retrying client every command uses: a
brief outage of a tracking server costs a report nothing, a long one is a TrackingUnavailable."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import requests
from mlflow.tracking import MlflowClient

from mrbench.store import client as store_client
from mrbench.store.client import RetryingClient, TrackingUnavailable
from mrbench.store.reader import ClientReader, RunRecord, open_reader


class FlakyMlflow:
    """An ``MlflowClient`` whose every method fails once (no connection: a server restarting) before
    it answers; ``download_artifacts`` writes ``artifact`` instead of asking a server."""

    def __init__(self, client: MlflowClient, artifact: Any = None, *, down: bool = False) -> None:
        self.client, self.artifact, self.down = client, artifact, down
        self.failed: list[str] = []

    def __getattr__(self, name: str) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            if self.down or name not in self.failed:
                self.failed.append(name)
                raise requests.ConnectionError("Connection refused")
            if name == "download_artifacts":
                _, path, folder = args
                (Path(folder) / path).write_text(json.dumps(self.artifact))
                return str(Path(folder) / path)
            return getattr(self.client, name)(*args, **kwargs)

        return call


@pytest.fixture
def uri(tmp_path: Path, new_store: Callable[[Path], Path]) -> str:
    return f"sqlite:///{new_store(tmp_path / 'results')}"


def test_the_client_reader_reads_through_the_retrying_client(uri: str) -> None:
    reader = open_reader(uri, "client")
    assert isinstance(reader, ClientReader) and isinstance(reader.client, RetryingClient)
    assert reader.client.tracking_uri == uri


def test_the_client_reader_rides_out_an_outage(uri: str, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(store_client.time, "sleep", lambda s: None)  # the backoff between tries
    plain = MlflowClient(tracking_uri=uri)
    experiment = plain.create_experiment("e", artifact_location=(tmp_path / "artifacts").as_uri())
    run_id = plain.create_run(experiment).info.run_id
    for step in (1, 2):
        plain.log_metric(run_id, "loss", 1.0 / step, step=step)
    reader = ClientReader(uri, retry_s=60)
    flaky = reader.client.mlflow = FlakyMlflow(plain, {"a": 1})

    assert reader.experiment_id("e") == experiment
    assert [r.run_id for r in reader.runs(experiment)] == [run_id]
    steps, values = reader.histories([run_id], {"loss"})[run_id]["loss"]
    assert steps.tolist() == [1, 2] and values.tolist() == [1.0, 0.5]
    remote = RunRecord(run_id, "FINISHED", 0, None, f"mlflow-artifacts:/{experiment}/{run_id}/artifacts")
    assert reader.read_json_artifact(remote, "x.json") == {"a": 1}
    calls = ["get_experiment_by_name", "search_runs", "get_metric_history", "download_artifacts"]
    assert flaky.failed == calls  # each failed once, and was tried again


def test_an_artifact_past_the_retry_bound_is_an_outage_not_a_gap(uri: str) -> None:
    reader = ClientReader(uri, retry_s=0)
    reader.client.mlflow = FlakyMlflow(MlflowClient(tracking_uri=uri), down=True)
    remote = RunRecord("r", "FINISHED", 0, None, "mlflow-artifacts:/0/r/artifacts")
    with pytest.raises(TrackingUnavailable, match="during download_artifacts"):
        reader.read_json_artifact(remote, "x.json")
