"""Parsing rewards and weights for ``mrbench advantages`` (``--param``: tests/kit/test_keyvalue.py)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from mrbench.cli.reward_input import load_rewards_file, parse_rewards_text, parse_weights, to_groups
from mrbench.core.errors import UserError


def test_parse_text_with_missing_markers() -> None:
    rows = parse_rewards_text("1, 0.5 ,2; 0,nan,NONE ; -1e-3,,inf;")
    assert rows.shape == (3, 3) and rows.dtype == torch.float64
    assert rows[0].tolist() == [1.0, 0.5, 2.0]
    assert rows[1, 0] == 0.0 and math.isnan(rows[1, 1]) and math.isnan(rows[1, 2])
    assert rows[2, 0] == -1e-3 and math.isnan(rows[2, 1]) and rows[2, 2] == math.inf


def test_parse_text_newlines_and_single_component() -> None:
    assert parse_rewards_text("1\n2\n\n3").tolist() == [[1.0], [2.0], [3.0]]


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("1,2;3", "row 2 has 1 value but row 1 has 2 values"),
        ("1,2;3,abc", "'abc' at row 2, column 2"),
        ("1,2;true,1", "'true' at row 2, column 1"),
        ("", "no reward rows"),
        (" ; ", "no reward rows"),
    ],
)
def test_parse_text_errors_name_value_and_row(text: str, needle: str) -> None:
    with pytest.raises(UserError, match=needle):
        parse_rewards_text(text)


def test_csv_with_header_and_blank_lines(tmp_path: Path) -> None:
    path = tmp_path / "r.csv"
    path.write_text("format,accuracy\n1,0\n\n0.5,nan\n", encoding="utf-8")
    rows = load_rewards_file(path)
    assert rows.shape == (2, 2) and rows[0].tolist() == [1.0, 0.0] and math.isnan(rows[1, 1])


def test_csv_without_header(tmp_path: Path) -> None:
    path = tmp_path / "r.txt"
    path.write_text("1,2\n3,4\n", encoding="utf-8")
    assert load_rewards_file(path).tolist() == [[1.0, 2.0], [3.0, 4.0]]


def test_csv_errors_name_row_and_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.csv"
    path.write_text("a,b\n1,2\n1,x\n", encoding="utf-8")
    with pytest.raises(UserError, match=r"'x' at row 2 \(line 3\), column 2"):
        load_rewards_file(path)
    path.write_text("1,2\n\n1,2,3\n", encoding="utf-8")
    with pytest.raises(UserError, match=r"row 2 \(line 3\) has 3 values but row 1 \(line 1\) has 2"):
        load_rewards_file(path)


@pytest.mark.parametrize("payload", [[[1, None], [2.5, "nan"]], {"rewards": [[1, None], [2.5, "nan"]]}])
def test_json_forms(tmp_path: Path, payload: object) -> None:
    path = tmp_path / "r.json"
    path.write_text(json.dumps(payload), encoding="utf-8")
    rows = load_rewards_file(path)
    assert rows[:, 0].tolist() == [1.0, 2.5] and torch.isnan(rows[:, 1]).all()


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ("{not json", "not valid JSON"),
        ('{"values": [[1]]}', "needs a 'rewards' key"),
        ("[1, 2]", "expected a list of rows"),
        ('[[1, 2], [3, "x"]]', "'x' at row 2, column 2"),
        ("[[1, 2], [3]]", "row 2 has 1 value but"),
    ],
)
def test_json_errors(tmp_path: Path, content: str, needle: str) -> None:
    path = tmp_path / "r.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(UserError, match=needle):
        load_rewards_file(path)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="does not exist"):
        load_rewards_file(tmp_path / "nope.csv")


def test_to_groups() -> None:
    rows = torch.arange(12.0).reshape(6, 2)
    assert to_groups(rows, None).shape == (1, 6, 2)
    groups = to_groups(rows, 3)
    assert groups.shape == (2, 3, 2) and groups[1, 0].tolist() == [6.0, 7.0]
    with pytest.raises(UserError, match="6 reward rows are not divisible by group size 4"):
        to_groups(rows, 4)
    with pytest.raises(UserError, match="positive integer, got 0"):
        to_groups(rows, 0)


def test_parse_weights() -> None:
    assert parse_weights(None, 3).tolist() == [1.0, 1.0, 1.0]
    assert parse_weights("1, 0.5,-2", 3).tolist() == [1.0, 0.5, -2.0]
    with pytest.raises(UserError, match=r"got 2 weights \('1,2'\) for 3 reward components"):
        parse_weights("1,2", 3)
    with pytest.raises(UserError, match="bad weight 'x'"):
        parse_weights("1,x", 2)
    with pytest.raises(UserError, match="bad weight 'nan'"):
        parse_weights("1,nan", 2)


def test_parsed_rows_run_through_a_method() -> None:
    from mrbench.methods import compute_advantages

    rows = parse_rewards_text("1,0;0,1;nan,nan;1,1")
    adv = compute_advantages("grpo", to_groups(rows, 2), parse_weights("1,2", 2))
    assert adv.shape == (2, 2) and torch.isfinite(adv).all() and adv[1, 0] == 0.0
