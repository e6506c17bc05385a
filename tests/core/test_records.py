"""The JSON records (mrbench.core.records): what the writers store reads back equal, records written
before a field existed still read, and anything else is refused naming the artifact."""

from __future__ import annotations

import json
import math

import pytest

from mrbench.core.records import (
    CellEntry,
    Diagnostics,
    LabMethod,
    LabRecord,
    RecordError,
    ShadowMeans,
    SweepRecord,
)


def _round_trip(record):  # through JSON text, as MLflow stores an artifact
    return type(record).from_json(json.loads(json.dumps(record.to_json())))


def test_sweep_record_round_trips_and_reads_its_config() -> None:
    record = SweepRecord(
        name="smoke",
        command="mrbench sweep",
        config={"methods": ["grpo", "gdpo"], "tasks": ["t"], "models": {"s": ["tiny", "m"]}, "lab": ["x"]},
        versions={"trl": "1.16.0"},
        cells=(CellEntry("k1", "grpo", "t", "tiny", 0),),
        unavailable={"u": "not built"},
    )
    back = _round_trip(record)
    assert back == record
    assert back.methods == ["grpo", "gdpo"] and back.tasks == ["t"] and back.lab_scenarios == ["x"]
    assert back.model_order == ["tiny", "m"]
    assert back.cells[0].label == "grpo|t|tiny|s0"


def test_an_early_sweep_record_reads_with_empty_fields() -> None:
    early = SweepRecord.from_json({"name": "old", "config": {"methods": ["grpo"], "models": ["tiny"]}})
    assert early.cells == () and early.versions == {} and early.unavailable == {}
    assert early.lab_scenarios == [] and early.model_order == ["tiny"]


@pytest.mark.parametrize(
    "data, match",
    [
        ([1, 2], "not a JSON object"),
        ({"cells": {"a": 1}}, "'cells' is not a list"),
        ({"cells": [{"method": "grpo"}]}, "cell 0 is not a cell entry"),
        ({"config": "x"}, "'config' is not a JSON object"),
    ],
)
def test_a_damaged_sweep_record_is_refused_naming_the_artifact(data: object, match: str) -> None:
    with pytest.raises(RecordError, match=match) as caught:
        SweepRecord.from_json(data, "sweep.json of sweep run r1")
    assert "sweep.json of sweep run r1" in str(caught.value)


def test_diagnostics_round_trip_and_runs_from_before_shadow_estimators() -> None:
    record = Diagnostics(
        ["a", "b"], [[1.0, None], [None, 1.0]], [0.7, None], 3, 0.5, {"gdpo": ShadowMeans(1.0, None, 0.75, 3)}
    )
    back = _round_trip(record)
    assert back == record
    stats = back.shadow["gdpo"].stats()
    assert stats[0] == 1.0 and math.isnan(stats[1]) and stats[2] == 0.75
    old = Diagnostics.from_json({"components": ["a"], "corr_matrix": None, "share": None, "steps": 0})
    assert old.shadow is None and old.resolution is None  # the report falls back to the curves
    assert Diagnostics.from_json({"components": [], "shadow": {}}).shadow == {}  # ran with no shadow
    with pytest.raises(RecordError, match=r"diagnostics\.json"):
        Diagnostics.from_json({"share": ["x"]})


def test_lab_record_round_trips_with_undefined_scores() -> None:
    record = LabRecord(
        {"name": "scale", "steps": 200, "description": " Scale. "},
        [0, 1],
        "final/small",
        {"grpo": LabMethod({"eps": 1e-6}, False, {"objective": [0.5, None]}, {"objective": [0.5, 0.4, 0.6]})},
    )
    back = _round_trip(record)
    assert back == record and back.steps == 200 and back.description == "Scale."
    values = back.methods["grpo"].seed_scores("objective")
    assert values[0] == 0.5 and math.isnan(values[1]) and back.methods["grpo"].seed_scores("other") == []
    with pytest.raises(RecordError, match="'seeds' is not a list of integers"):
        LabRecord.from_json({"seeds": ["a"]})
