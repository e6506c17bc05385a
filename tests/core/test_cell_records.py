"""The JSON records a cell keeps in the results folder (mrbench.core.cell_records)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from mrbench.core import layout
from mrbench.core.cell_records import (
    MARKER_VERSION,
    RECORD_VERSION,
    EvalCacheEntry,
    LogArtifact,
    LogBatch,
    PendingRecord,
    ResumeMarker,
)
from mrbench.core.records import RecordError
from mrbench.core.results_layout import RESUME_MARKER, CellPaths, eval_cache_file, step_dir_name


def _round_trip(record: Any) -> Any:
    return type(record).from_json(json.loads(json.dumps(record.to_json())), "test record")


def _store(results: Path) -> str:
    return f"sqlite:///{results}/store.db"


# --- the pending record -------------------------------------------------------------------------

RECORD = PendingRecord(
    run_id="r1",
    tracking_uri="sqlite:///x.db",
    result={"run_id": "r1", "status": "FINISHED", "checkpoint_dir": "/a/checkpoints/k/final"},
    pending=(LogBatch(metrics=(("m", 0.5, 1000, 2),)), LogArtifact("d.json")),
    results_dir="/a",
)


def test_pending_record_round_trips_in_the_shape_the_runner_always_wrote() -> None:
    assert _round_trip(RECORD) == RECORD
    assert list(RECORD.to_json()) == ["run_id", "tracking_uri", "result", "pending", "results_dir", "version"]
    assert RECORD.to_json()["version"] == RECORD_VERSION
    # A record of the current code, as it is on disk, reads back identically.
    written = {
        "run_id": "r1",
        "tracking_uri": "sqlite:///x.db",
        "result": {"run_id": "r1", "recovered": False},
        "pending": [{"op": "log", "tags": {"a": "b"}}],
        "results_dir": "/a",
        "version": 1,
    }
    assert PendingRecord.from_json(written, "record.json").to_json() == written
    # Only a run id: what a record without a store or a result writes.
    assert PendingRecord("r").to_json() == {"run_id": "r", "pending": [], "version": 1}


def test_pending_record_file(tmp_path: Path) -> None:
    path = CellPaths.of(tmp_path, "k").record_path
    assert PendingRecord.read(path) is None
    assert RECORD.write(path) == path and PendingRecord.read(path) == RECORD
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # nothing left beside it

    path.write_text("{not json")
    with pytest.raises(
        RecordError,
        match=rf"cannot read {re.escape(str(path))}: .*; delete {re.escape(str(path.parent))} to run again",
    ):
        PendingRecord.read(path)
    path.write_text(json.dumps({"version": 99, "run_id": "r"}))
    with pytest.raises(
        RecordError, match=r"has record version 99, this mrbench writes 1; log it with the mrbench"
    ):
        PendingRecord.read(path)
    path.write_text(json.dumps({"version": 1, "run_id": 3}))
    with pytest.raises(RecordError, match=rf"{re.escape(str(path))}: 'run_id' should be str, not 3; delete "):
        PendingRecord.read(path)
    path.write_text(json.dumps([1]))
    with pytest.raises(RecordError, match=r"not a JSON object.*; delete"):
        PendingRecord.read(path)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"version": 1}, r"'run_id' is missing"),
        ({"version": 2, "run_id": "r"}, r"has record version 2"),
        ({"version": 1, "run_id": "r", "pending": {}}, r"'pending' should be list"),
        ({"version": 1, "run_id": "r", "pending": [3]}, r"pending entry 0 is not a JSON object"),
        ({"version": 1, "run_id": "r", "result": []}, r"'result' should be Mapping"),
        ({"version": 1, "run_id": "r", "tracking_uri": 1}, r"'tracking_uri' should be str"),
        ({"version": 1, "run_id": "r", "results_dir": 1}, r"'results_dir' should be str"),
    ],
)
def test_pending_record_bad_fields_are_named(data: dict[str, Any], message: str) -> None:
    with pytest.raises(RecordError, match=message):
        PendingRecord.from_json(data, "the record")


def test_a_pending_record_read_in_a_moved_results_folder_is_rerooted() -> None:
    old, new = Path("/old/results"), Path("/new/place")
    final = str(old / "checkpoints" / "k" / "final")
    record = PendingRecord(
        "r",
        _store(old),
        {"checkpoint_dir": final, "status": "FINISHED"},
        (
            LogBatch(params={layout.PARAM_CHECKPOINT_DIR: final, "other": "x"}),
            LogBatch(params={layout.PARAM_CHECKPOINT_DIR: "/elsewhere/final"}),
            LogArtifact("d.json"),
        ),
        str(old),
    )
    moved = record.rerooted(new, _store)
    moved_final = str(new / "checkpoints" / "k" / "final")
    assert moved.tracking_uri == _store(new) and moved.results_dir == str(new)
    assert moved.result == {"checkpoint_dir": moved_final, "status": "FINISHED"}
    assert moved.pending == (
        LogBatch(params={layout.PARAM_CHECKPOINT_DIR: moved_final, "other": "x"}),
        LogBatch(params={layout.PARAM_CHECKPOINT_DIR: "/elsewhere/final"}),  # not under it
        LogArtifact("d.json"),
    )
    assert record.result is not None and record.result["checkpoint_dir"] == final  # not changed in place
    assert record.rerooted(old, _store) is record  # not moved
    elsewhere = PendingRecord("r", "sqlite:///other.db", None, (), str(old)).rerooted(new, _store)
    assert elsewhere.tracking_uri == "sqlite:///other.db"  # another store stays where it is


# --- the resume marker -----------------------------------------------------------------------

MARKER = ResumeMarker(
    run_key="key1",
    run_id="r1",
    tracking_uri="sqlite:///x.db",
    experiment_id="1",
    step=4,
    processes=2,
    files={"scheduler.pt": 10, "rng_state_0.pth": 3, "rng_state_1.pth": 3},
    diagnostics={"__class__": "Acc", "state": {"n": 2}},
    batches_scored=8,
)


def test_resume_marker_round_trips_in_the_shape_the_callback_always_wrote() -> None:
    assert _round_trip(MARKER) == MARKER and MARKER.folder_name == step_dir_name(4)
    assert MARKER.to_json() == {
        "version": MARKER_VERSION,
        "run_key": "key1",
        "run_id": "r1",
        "tracking_uri": "sqlite:///x.db",
        "experiment_id": "1",
        "step": 4,
        "processes": 2,
        "files": {"scheduler.pt": 10, "rng_state_0.pth": 3, "rng_state_1.pth": 3},
        "trainer": {"diagnostics": {"__class__": "Acc", "state": {"n": 2}}, "batches_scored": 8},
    }
    no_processes = {k: v for k, v in MARKER.to_json().items() if k != "processes"}
    assert ResumeMarker.from_json(no_processes, "m").processes == 1


def test_resume_marker_file(tmp_path: Path) -> None:
    checkpoint = tmp_path / step_dir_name(4)
    checkpoint.mkdir()
    assert MARKER.write(checkpoint) == checkpoint / RESUME_MARKER
    assert ResumeMarker.read(checkpoint) == MARKER
    assert [p.name for p in checkpoint.iterdir()] == [RESUME_MARKER]  # no partial file left
    (checkpoint / RESUME_MARKER).write_text("{cut")
    with pytest.raises(RecordError, match=rf"^{RESUME_MARKER} is unreadable$"):
        ResumeMarker.read(checkpoint)
    with pytest.raises(RecordError, match=rf"^{RESUME_MARKER} is unreadable$"):
        ResumeMarker.read(tmp_path / "none")


def _marker(**changes: Any) -> dict[str, Any]:
    return {k: v for k, v in {**MARKER.to_json(), **changes}.items() if v is not ...}


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (_marker(version=2), r"^m has version 2, this mrbench reads 1$"),
        (_marker(version=...), r"^m has version None, this mrbench reads 1$"),
        (_marker(files=...), r"'files' is missing"),
        (_marker(files={"a": "big"}), r"'files' gives 'a' the size 'big'"),
        (_marker(run_key=...), r"'run_key' is missing"),
        (_marker(step="4"), r"'step' should be int, not '4'"),
        (_marker(processes=True), r"'processes' should be int"),
        (_marker(trainer=...), r"'trainer' is missing"),
        (_marker(trainer={"batches_scored": 1}), r"'trainer' has no 'diagnostics'"),
        (_marker(trainer={"diagnostics": None}), r"m: 'trainer': 'batches_scored' is missing"),
        ([1], r"m is not a JSON object"),
    ],
)
def test_resume_marker_bad_fields_are_named(data: Any, message: str) -> None:
    with pytest.raises(RecordError, match=message):
        ResumeMarker.from_json(data, "m")


# --- an eval-cache entry ---------------------------------------------------------------------


def test_eval_cache_entry_round_trip_and_file(tmp_path: Path) -> None:
    entry = EvalCacheEntry({"exact_match": 0.25, "n": 3}, [{"id": "a", "completion": "x"}], "run-1")
    assert _round_trip(entry) == entry
    assert entry.to_json() == {"metrics": entry.metrics, "samples": entry.samples, "run_id": "run-1"}
    path = eval_cache_file(tmp_path, "k")
    assert EvalCacheEntry.read(path) is None
    assert entry.write(path) == path and EvalCacheEntry.read(path) == entry
    assert [p.name for p in path.parent.iterdir()] == [path.name]
    for damaged in ("{cut", "[]", json.dumps({**entry.to_json(), "run_id": ""})):
        path.write_text(damaged)
        assert EvalCacheEntry.read(path) is None  # damaged: absent, evaluate again


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"samples": [], "run_id": "r"}, r"'metrics' is missing"),
        ({"metrics": {"m": "x"}, "samples": [], "run_id": "r"}, r"metric 'm' is 'x', not a number"),
        ({"metrics": {}, "samples": {}, "run_id": "r"}, r"'samples' should be list"),
        ({"metrics": {}, "samples": [1], "run_id": "r"}, r"sample 0 is not a JSON object"),
        ({"metrics": {}, "samples": []}, r"'run_id' is missing"),
        ({"metrics": {}, "samples": [], "run_id": ""}, r"'run_id' is empty"),
    ],
)
def test_eval_cache_entry_bad_fields_are_named(data: dict[str, Any], message: str) -> None:
    with pytest.raises(RecordError, match=rf"^entry\.json: {message}"):
        EvalCacheEntry.from_json(data, "entry.json")


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"op": "send"}, "'op' should be 'log' or 'artifact', not 'send'"),
        ({"path": "d.json"}, "'op' is missing"),
        ({"op": "artifact"}, "'path' is missing"),
        ({"op": "log", "metrics": [["m", "high", 1, 2]]}, r"metric 0 should be \[key, value, timestamp_ms"),
        ({"op": "log", "metrics": [["m", 0.5, 1]]}, "metric 0 should be"),
        ({"op": "log", "params": {"lr": 0.1}}, "'params' should map names to strings"),
        ({"op": "log", "tags": ["a"]}, "'tags' should be Mapping"),
        ("log", "is not a JSON object"),
    ],
)
def test_a_malformed_pending_entry_is_named(entry: object, message: str) -> None:
    data = {"run_id": "r", "pending": [{"op": "log"}, entry], "version": RECORD_VERSION}
    with pytest.raises(RecordError, match=f"the record: pending entry 1.*{message}"):
        PendingRecord.from_json(data, "the record")


def test_pending_entries_keep_their_json_shape() -> None:
    batch = LogBatch(metrics=(("m", 0.5, 1000, 2),), params={"a": "1"}, tags={"t": "x"})
    expected = {"op": "log", "metrics": [["m", 0.5, 1000, 2]], "params": {"a": "1"}, "tags": {"t": "x"}}
    assert batch.to_json() == expected
    assert LogBatch(tags={"t": "x"}).to_json() == {"op": "log", "tags": {"t": "x"}}  # empty parts left out
    assert LogArtifact("d/e.json").to_json() == {"op": "artifact", "path": "d/e.json"}
    record = PendingRecord("r", pending=(batch, LogArtifact("d/e.json")))
    assert PendingRecord.from_json(record.to_json(), "x") == record
