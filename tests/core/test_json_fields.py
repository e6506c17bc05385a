"""The shared field readers of the JSON records: one error type, one wording per check."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pytest

from mrbench.core import json_fields, records
from mrbench.core.errors import UserError
from mrbench.core.json_fields import (
    RecordError,
    is_kind,
    mapping,
    mapping_field,
    optional,
    required,
    str_dict,
)
from mrbench.core.model_marker import ModelMarker
from mrbench.core.results_layout import MODEL_MARKER


def test_record_error_is_one_class_importable_from_records() -> None:
    assert records.RecordError is json_fields.RecordError is RecordError
    assert issubclass(RecordError, UserError)


@pytest.mark.parametrize(
    "read, says",
    [
        (
            lambda: mapping([1], "x.json"),
            r"^x\.json is not a JSON object \(damaged, or not written by mrbench\)$",
        ),
        (
            lambda: mapping_field({"config": "c"}, "config", "x.json"),
            r"^x\.json: 'config' is not a JSON object",
        ),
        (lambda: required({}, "run_id", str, "x.json"), r"^x\.json: 'run_id' is missing$"),
        (lambda: required({"run_id": None}, "run_id", str, "x.json"), r"^x\.json: 'run_id' is missing$"),
        (
            lambda: required({"run_id": 3}, "run_id", str, "x.json"),
            r"^x\.json: 'run_id' should be str, not 3$",
        ),
        (lambda: optional({"n": True}, "n", int, "x.json", 0), r"^x\.json: 'n' should be int, not True$"),
        (
            lambda: optional({"n": "a"}, "n", (int, float), "x.json", 0),
            r"'n' should be int or float, not 'a'$",
        ),
    ],
)
def test_a_field_that_cannot_be_read_names_the_record_and_the_field(read, says: str) -> None:
    with pytest.raises(RecordError, match=says):
        read()


def test_absent_null_and_empty_fields_read_as_their_defaults() -> None:
    assert optional({}, "n", int, "x", 7) == 7 and optional({"n": None}, "n", int, "x", 7) == 7
    assert optional({"b": False}, "b", bool, "x", True) is False
    assert required({"m": {"a": 1}}, "m", Mapping, "x") == {"a": 1}
    assert mapping_field({"m": None}, "m", "x") == {} and mapping_field({"m": []}, "m", "x") == {}
    assert str_dict({"v": {"torch": 2, 3: None}}, "v", "x") == {"torch": "2", "3": "None"}


def test_true_and_false_are_bools_only() -> None:
    assert is_kind(1, int) and not is_kind(True, int) and not is_kind(False, (int, float))
    assert is_kind(True, bool) and is_kind(False, (bool, int)) and not is_kind(1.5, int)


def test_a_model_marker_that_is_not_an_object_is_no_marker(tmp_path: Path) -> None:
    (tmp_path / MODEL_MARKER).write_text("[1, 2]")
    assert ModelMarker.read(tmp_path) is None
    ModelMarker({"prompt": "compact"}, {"preset": "tiny"}).write(tmp_path)
    assert ModelMarker.read(tmp_path) == ModelMarker({"prompt": "compact"}, {"preset": "tiny"})
