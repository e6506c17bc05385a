"""Checkpoints of a cell: the save modes, where the policy goes and what its run records, and the
local record of what a run could not log, sent later to the same run."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from mrbench.core import layout
from mrbench.core.cell_records import LogBatch, PendingRecord
from mrbench.core.errors import UserError
from mrbench.core.records import RecordError
from mrbench.engine.cell.checkpoints import (
    CellFolder,
    SaveMode,
    folder_size_mb,
    parse_save,
    save_policy,
)
from mrbench.engine.cell.runner import run_cell
from mrbench.engine.config import RunSpec, resolve_spec
from mrbench.engine.models.catalog import load_model, load_tokenizer
from mrbench.engine.runs.tracking import RunLog
from mrbench.store.client import RetryingClient, TrackingUnavailable, ensure_experiment

TASK_PARAMS = {"n_train": "16", "n_eval": "4"}
TRAIN = {"steps": "2", "num_generations": "2", "prompts_per_step": "2", "eval_limit": "4"}


@pytest.fixture
def results(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "results"
    monkeypatch.setenv("MRBENCH_RESULTS", str(path))
    return path


def _store(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path}/mlflow.db"


def test_parse_save() -> None:
    assert parse_save("final") == SaveMode(final=True) and parse_save("none") == SaveMode(final=False)
    assert parse_save("every:5") == SaveMode(final=True, every=5) and str(parse_save("every:5")) == "every:5"
    for bad in ("all", "every:0", "every:", "every:x", "final:2"):
        with pytest.raises(UserError, match=r"none \| final \| every:N"):
            parse_save(bad)


def test_record_round_trip_and_cleanup(results: Path) -> None:
    folder = CellFolder.for_run_key("abc123")
    assert folder.root == results / "checkpoints" / "abc123" and folder.read_pending() is None
    path = folder.write_pending(PendingRecord("r", pending=(LogBatch(tags={"a": "b"}),)))
    assert path == folder.pending / "record.json"
    assert json.loads(path.read_text()) == {
        "run_id": "r",
        "pending": [{"op": "log", "tags": {"a": "b"}}],
        "version": 1,
        "results_dir": str(results),
    }
    assert folder.read_pending() == PendingRecord(
        "r", pending=(LogBatch(tags={"a": "b"}),), results_dir=str(results)
    )
    path.write_text(json.dumps({"version": 99}))
    with pytest.raises(UserError, match="record version 99"):
        folder.read_pending()
    folder.clear_pending()
    assert not folder.root.exists()  # nothing else was in it


class _SavingTrainer:
    """Stands in for ``Trainer.save_model``: writes one file, or fails half-way."""

    def __init__(self, text: str, fail: bool = False) -> None:
        self.text, self.fail = text, fail

    def save_model(self, output_dir: str) -> None:
        Path(output_dir).mkdir(parents=True)
        (Path(output_dir) / "weights").write_text(self.text)
        if self.fail:
            raise OSError("disk full")


def test_save_policy_replaces_the_folder_whole(tmp_path: Path) -> None:
    final = tmp_path / "cell" / "final"
    assert save_policy(_SavingTrainer("one"), final) == final
    assert (final / "weights").read_text() == "one"
    with pytest.raises(OSError, match="disk full"):
        save_policy(_SavingTrainer("two", fail=True), final)
    assert (final / "weights").read_text() == "one"  # a failed save leaves the earlier checkpoint
    save_policy(_SavingTrainer("three"), final)
    assert (final / "weights").read_text() == "three"
    assert sorted(p.name for p in final.parent.iterdir()) == ["final"]  # nothing half-written left
    assert folder_size_mb(final) == pytest.approx(5 / 1e6)


def test_run_log_keeps_what_an_unreachable_store_missed_and_sends_it_later(tmp_path: Path, results: Path):
    uri = _store(tmp_path)
    run_id = MlflowClient(uri).create_run(ensure_experiment("log", uri)).info.run_id
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        down = RetryingClient(f"http://127.0.0.1:{sock.getsockname()[1]}", 0.3)  # nothing listens
    spool = tmp_path / "spool"
    run_log = RunLog(down, run_id, spool)
    run_log.params({"method": "gdpo"})
    assert run_log.offline  # past the bound: kept, and training goes on
    run_log.metrics({"train/loss": 0.5}, 1)
    run_log.metrics({"train/loss": 0.25, "reward": 1.0}, 2)
    run_log.json_artifact([{"a": 1}, {"a": 2}], layout.EVAL_SAMPLES_AFTER)
    assert [entry.to_json()["op"] for entry in run_log.pending] == ["log", "log", "log", "artifact"]
    with pytest.raises(TrackingUnavailable, match="unreachable"):
        run_log.flush()
    assert len(run_log.pending) == 4  # nothing lost

    # What a record carries to another process: the entries through their JSON and back.
    record = PendingRecord(run_id, pending=tuple(run_log.pending))
    carried = PendingRecord.from_json(json.loads(json.dumps(record.to_json())), "record.json")
    assert carried == record
    RunLog(RetryingClient(uri), run_id, spool, carried.pending).flush()
    client = MlflowClient(uri)
    run = client.get_run(run_id)
    assert run.data.params == {"method": "gdpo"} and run.data.metrics == {"train/loss": 0.25, "reward": 1.0}
    assert [(m.step, m.value) for m in client.get_metric_history(run_id, "train/loss")] == [
        (1, 0.5),
        (2, 0.25),
    ]
    local = Path(client.download_artifacts(run_id, layout.EVAL_SAMPLES_AFTER, str(tmp_path / "dl")))
    assert local.read_text().splitlines() == ['{"a": 1}', '{"a": 2}']


def _spec(model_dir: Path, seed: int = 0) -> RunSpec:
    return resolve_spec("gdpo", "tool-calling", str(model_dir), seed, task_params=TASK_PARAMS, train=TRAIN)


def test_run_cell_keeps_the_final_policy_where_its_run_says(micro_model_dir, tmp_path, results):
    uri = _store(tmp_path)
    spec = _spec(micro_model_dir)
    result = run_cell(spec, tracking_uri=uri, experiment="ckpt", progress=False)
    final = results / "checkpoints" / spec.run_key() / "final"
    assert result.checkpoint_dir == str(final) and not result.recovered
    # No pending record, no training checkpoint (cell.log: the library output, engine/console.py).
    assert sorted(p.name for p in final.parent.iterdir() if p.name != "cell.log") == ["final"]
    model, tokenizer = load_model(str(final)), load_tokenizer(str(final))
    assert model.config.hidden_size == 32 and tokenizer("add 1 2")["input_ids"]

    client = MlflowClient(uri)
    run = client.get_run(result.run_id)
    assert run.info.status == "FINISHED"
    assert run.data.params[layout.PARAM_SAVE] == "final"
    assert run.data.params[layout.PARAM_CHECKPOINT_DIR] == str(final)
    assert run.data.metrics[layout.CHECKPOINT_SIZE_MB] == pytest.approx(folder_size_mb(final))
    # The policy is not copied into the run's artifacts (it can be gigabytes).
    artifacts = {a.path for a in client.list_artifacts(result.run_id)}
    assert not any("safetensors" in path or path.startswith("final") for path in artifacts)


def test_run_cell_every_n_steps_and_none(micro_model_dir, tmp_path, results):
    uri = _store(tmp_path)
    every = _spec(micro_model_dir, seed=1)
    result = run_cell(every, tracking_uri=uri, experiment="ckpt", progress=False, save="every:1")
    root = results / "checkpoints" / every.run_key()
    names = sorted(p.name for p in root.iterdir() if p.name != "cell.log")
    assert names == ["README.md", "checkpoint-1", "checkpoint-2", "final"]  # README.md: TRL's model card
    assert (root / "checkpoint-2" / "model.safetensors").exists()
    assert not list(root.glob("checkpoint-*/optimizer.pt"))  # the model only
    assert MlflowClient(uri).get_run(result.run_id).data.params[layout.PARAM_SAVE] == "every:1"

    nothing = _spec(micro_model_dir, seed=2)
    result = run_cell(nothing, tracking_uri=uri, experiment="ckpt", progress=False, save="none")
    left = results / "checkpoints" / nothing.run_key()
    assert result.checkpoint_dir == "" and [p.name for p in left.glob("*")] in ([], ["cell.log"])
    run = MlflowClient(uri).get_run(result.run_id)
    assert run.info.status == "FINISHED" and run.data.params[layout.PARAM_SAVE] == "none"
    assert layout.PARAM_CHECKPOINT_DIR not in run.data.params


def test_a_record_is_logged_to_its_run_without_training(tmp_path, results):
    """What an attempt left after an outage: the rerun only sends it (a model that does not exist
    proves that nothing is loaded or trained)."""
    uri = _store(tmp_path)
    spec = RunSpec(method="gdpo", task="tool-calling", model="/no/such/model", seed=0)
    run_id = MlflowClient(uri).create_run(ensure_experiment("rec", uri)).info.run_id
    folder = CellFolder.for_run_key(spec.run_key())
    pending = [LogBatch(metrics=((layout.eval_metric("exact_match"), 0.5, 1000, 2),))]
    result = {"run_id": run_id, "run_key": spec.run_key(), "status": "FINISHED", "wall_s": 3.0}
    folder.write_pending(PendingRecord(run_id, "sqlite:///elsewhere.db", result))

    with pytest.raises(UserError, match=r"elsewhere\.db"):
        run_cell(spec, tracking_uri=uri, experiment="rec")
    folder.write_pending(PendingRecord(run_id, uri, result, tuple(pending)))
    done = run_cell(spec, tracking_uri=uri, experiment="rec")

    assert done.recovered and done.run_id == run_id and done.wall_s == 3.0
    run = MlflowClient(uri).get_run(run_id)
    assert run.info.status == "FINISHED" and run.data.metrics == {layout.eval_metric("exact_match"): 0.5}
    assert folder.read_pending() is None and not folder.root.exists()


def test_a_record_whose_result_is_not_a_cell_result_names_the_file_and_the_field(tmp_path, results):
    uri = _store(tmp_path)
    spec = RunSpec(method="gdpo", task="tool-calling", model="/no/such/model", seed=0)
    run_id = MlflowClient(uri).create_run(ensure_experiment("rec", uri)).info.run_id
    folder = CellFolder.for_run_key(spec.run_key())
    result = {"run_id": run_id, "runkey": spec.run_key(), "status": "FINISHED"}
    folder.write_pending(PendingRecord(run_id, uri, result))

    with pytest.raises(RecordError) as caught:
        run_cell(spec, tracking_uri=uri, experiment="rec")
    assert str(caught.value) == (
        f"{folder.record_path}: 'result': unknown field(s) 'runkey'; delete {folder.pending} to run again"
    )
    assert MlflowClient(uri).get_run(run_id).info.status == "RUNNING"
