"""The records that cross a process boundary to run a cell (mrbench.core.cell_protocol)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pytest

from mrbench.core.cell_protocol import (
    DEFAULT_CELL_FN,
    CellPayload,
    CellTracking,
    RankEnd,
    WorkerOutcome,
    class_path,
)
from mrbench.core.records import RecordError


@dataclass(frozen=True)
class Spec:
    method: str = "grpo"
    task: str = "tool-calling"
    model: str = "tiny"
    seed: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    def run_key(self) -> str:
        return f"{self.method}-{self.seed}"

    def to_dict(self) -> dict[str, Any]:
        return {"method": self.method, "task": self.task, "model": self.model, "seed": self.seed}


def _round_trip(record: Any) -> Any:
    return type(record).from_json(json.loads(json.dumps(record.to_json())), "test record")


def test_a_sweep_payload_round_trips_through_json_and_gives_the_cell_its_arguments() -> None:
    kwargs = {"tracking_uri": "sqlite:///x.db", "experiment": "e", "parent_run_id": "p", "sweep": "s"}
    payload = CellPayload.of(
        Spec(seed=3),
        "pkg.mod:cell",
        {**kwargs, "progress": False},
        threads=4,
        processes_per_cell=2,
        distributed="fsdp",
        result="/tmp/r.json",
        parent_pid=123,
    )
    assert payload.spec_class == f"{__name__}:Spec" == class_path(Spec)
    assert payload.tracking == CellTracking("sqlite:///x.db", "e", "p", "s")
    assert payload.options == {"progress": False}
    assert _round_trip(payload) == payload
    assert payload.cell_kwargs() == {**kwargs, "progress": False}
    # the keys the sweep's tests and tools read stay where they were
    data = payload.to_json()
    assert (data["processes_per_cell"], data["distributed"], data["parent_pid"]) == (2, "fsdp", 123)


def test_a_launch_payload_without_tracking_passes_only_its_own_arguments() -> None:
    payload = CellPayload.of(Spec(), DEFAULT_CELL_FN, {"tag": "t", "launcher": 7})
    assert payload.tracking is None
    assert _round_trip(payload) == payload
    assert payload.cell_kwargs() == {"tag": "t", "launcher": 7}
    # mrbench run: tracking without a parent run or sweep, and options of its own
    run = CellPayload.of(Spec(), DEFAULT_CELL_FN, {"tracking_uri": "u", "experiment": "e", "save": "none"})
    assert _round_trip(run).cell_kwargs() == {
        "tracking_uri": "u",
        "experiment": "e",
        "parent_run_id": None,
        "sweep": None,
        "save": "none",
    }


def test_a_minimal_payload_takes_the_defaults() -> None:
    payload = CellPayload.from_json({"spec": {}, "spec_class": "m:S"}, "payload")
    assert payload == CellPayload({}, "m:S")
    assert (payload.cell_fn, payload.threads, payload.processes_per_cell) == (DEFAULT_CELL_FN, 0, 1)
    assert payload.parent_pid is None and payload.result is None


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"spec_class": None}, r"payload\.json: 'spec_class' is missing"),
        ({"spec": [1, 2]}, r"payload\.json: 'spec' should be Mapping, not \[1, 2\]"),
        ({"threads": "four"}, r"'threads' should be int, not 'four'"),
        ({"threads": True}, r"'threads' should be int, not True"),
        ({"processes_per_cell": 0}, r"'processes_per_cell' should be at least 1, not 0"),
        ({"parent_pid": 1.5}, r"'parent_pid' should be int"),
        ({"tracking_uri": None}, r"'tracking_uri' is missing"),
        ({"options": "x"}, r"'options' should be Mapping"),
    ],
)
def test_a_bad_payload_field_is_named(change: dict[str, Any], says: str) -> None:
    good = CellPayload.of(Spec(), "m:f", {"tracking_uri": "u", "experiment": "e"}).to_json()
    with pytest.raises(RecordError, match=says):
        CellPayload.from_json({**good, **change}, "payload.json")


def test_a_payload_that_is_not_an_object_is_refused() -> None:
    with pytest.raises(RecordError, match=r"payload\.json is not a JSON object"):
        CellPayload.from_json(["spec"], "payload.json")


def test_worker_outcomes_round_trip_and_give_the_exit_code() -> None:
    for outcome, code in [
        (WorkerOutcome("FINISHED", "r1", 2.5), 0),
        (WorkerOutcome("FAILED", None, 1.0, "ValueError: no"), 1),
        (WorkerOutcome("KILLED", None, 0.0, "interrupted"), 130),
    ]:
        assert _round_trip(outcome) == outcome
        assert outcome.exit_code == code
    assert WorkerOutcome.from_json({"status": "FINISHED", "wall_s": 3}, "o").wall_s == 3.0
    assert set(WorkerOutcome("FINISHED").to_json()) == {"status", "run_id", "wall_s", "error"}


@pytest.mark.parametrize(
    ("data", "says"),
    [
        ({}, r"outcome\.json: 'status' is missing"),
        ({"status": "DONE"}, r"'status' should be one of FINISHED, FAILED, KILLED, not 'DONE'"),
        ({"status": "FAILED", "wall_s": "slow"}, r"'wall_s' should be int or float, not 'slow'"),
        ({"status": "FAILED", "error": 3}, r"'error' should be str, not 3"),
    ],
)
def test_a_bad_worker_outcome_is_named(data: dict[str, Any], says: str) -> None:
    with pytest.raises(RecordError, match=says):
        WorkerOutcome.from_json(data, "outcome.json")


def test_rank_ends_round_trip_in_the_shapes_ranks_write() -> None:
    ends = [
        RankEnd(result={"run_id": "r", "world_size": 2}),
        RankEnd(result={}),
        RankEnd(error="rank 1 refuses", user_error=True),
        RankEnd(error="OutOfRoom: full", out_of_room=(28, "No space left on device", "/r/x")),
        RankEnd(interrupted=True),
    ]
    for end in ends:
        assert _round_trip(end) == end
    assert ends[0].to_json() == {"result": {"run_id": "r", "world_size": 2}}
    assert ends[2].to_json() == {"error": "rank 1 refuses", "user_error": True}
    assert ends[4].to_json() == {"interrupted": True}


@pytest.mark.parametrize(
    ("data", "says"),
    [
        ({"result": 3}, r"rank end: 'result' should be Mapping, not 3"),
        ({"error": "x", "user_error": "yes"}, r"'user_error' should be bool, not 'yes'"),
        ({"error": "x", "out_of_room": [28]}, r"'out_of_room' should be \[errno, strerror, filename\]"),
    ],
)
def test_a_bad_rank_end_is_named(data: dict[str, Any], says: str) -> None:
    with pytest.raises(RecordError, match=says):
        RankEnd.from_json(data, "rank end")
