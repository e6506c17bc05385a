"""API-Bank (levels 1-3 as ToolRL processed them) as tool-calling eval data: the fixture folder in
that format, field mapping, gold scoring through ``mrbench score``, and bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mrbench.core.errors import UserError
from mrbench.engine.evaluation.scoring import score_task
from mrbench.tasks.tool_calling import tool_calling
from mrbench.tasks.tool_calling.toolrl import load_items


@pytest.fixture
def folder(fixtures_dir: Path) -> Path:
    return fixtures_dir / "apibank"


def test_folder_reads_every_level_file(folder: Path) -> None:
    items = load_items("apibank", str(folder))
    assert [(i.id, i.kind) for i in items] == [
        ("level-1-0", "apibank_level-1"),
        ("level-1-1", "apibank_level-1"),
        ("level-2-0", "apibank_level-2"),
    ]
    sample = tool_calling(dataset="apibank", data_path=str(folder), n_eval=1).eval_samples()[0]
    assert [m["role"] for m in sample.prompt] == ["system", "user"]
    assert "Name: ModifyRegistration" in sample.prompt[0]["content"]
    assert json.loads(sample.columns["gold_calls"]) == [
        {
            "name": "ModifyRegistration",
            "parameters": {
                "appointment_id": "34567890",
                "new_appointment_date": "2023-03-26",
                "new_appointment_doctor": "Dr. Lee",
            },
        }
    ]


def test_one_level_file_alone(folder: Path) -> None:
    assert [i.id for i in load_items("apibank", str(folder / "level-2-api_processed.json"))] == ["level-2-0"]


def test_gold_and_input_scoring_through_the_cli(folder: Path, tmp_path: Path, mrbench_cli) -> None:
    param = f"data_path={folder}"
    code, out, err = mrbench_cli(
        "score", "--task", "tool-calling", "--dataset", "apibank", "--gold", "--task-param", param, "--json"
    )
    assert code == 0, err
    report = json.loads(out)
    assert report["n"] == 3 and report["status_counts"] == {"exact": 3}
    missing_arg = '<think></think>\n<tool_call>\n{"name":"QueryMeeting","parameters":{}}\n</tool_call>'
    file = tmp_path / "in.jsonl"
    file.write_text(
        json.dumps({"dataset": "apibank", "id": "level-2-0", "completion": missing_arg})
        + "\n"
        + json.dumps({"dataset": "apibank", "id": "level-9-0", "completion": missing_arg})
        + "\n"
    )
    code, out, err = mrbench_cli(
        "score", "--task", "tool-calling", "--input", str(file), "--task-param", param, "--json"
    )
    assert code == 1, err  # 1: an id could not be scored, the other line still was
    items = json.loads(out)["items"]
    assert items[0]["status"] == "mismatch" and items[0]["rewards"]["values"] < 1.5
    assert items[1]["status"] == "unknown_id"


def test_input_without_data_path_is_an_item_error(tmp_path: Path) -> None:
    file = tmp_path / "in.jsonl"
    file.write_text(json.dumps({"dataset": "apibank", "id": "level-1-0", "completion": "x"}) + "\n")
    report = score_task("tool-calling", input_path=file)
    assert report.items[0]["status"] == "unavailable_dataset" and "'apibank'" in report.items[0]["error"]


@pytest.mark.parametrize(
    ("record", "says"),
    [
        ({"system": "s", "user": "u"}, "item 0: missing field 'answer'"),
        (
            {"system": "s", "user": "u", "answer": [{"name": "f"}]},
            "item 0 answer: missing field 'parameters'",
        ),
        ({"system": "s", "user": "u", "answer": ["f()"]}, "field 'answer' must hold call objects"),
    ],
    ids=["no-answer", "no-parameters", "not-a-call"],
)
def test_malformed_records_name_the_item_and_field(tmp_path: Path, record: dict, says: str) -> None:
    path = tmp_path / "level-1-api_processed.json"
    path.write_text(json.dumps([record]))
    with pytest.raises(UserError, match="'apibank'") as info:
        load_items("apibank", str(path))
    assert says in str(info.value)


def test_folder_without_level_files(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"holds none of level-1-api_processed\.json"):
        load_items("apibank", str(tmp_path))
