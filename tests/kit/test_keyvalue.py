"""The one key=value parser: every rule, and the flags that use it."""

from __future__ import annotations

import pytest

from mrbench.core.errors import UserError
from mrbench.kit.keyvalue import parse_key_value, parse_key_values


def test_pairs_in_order_with_whitespace_stripped() -> None:
    assert parse_key_values([], flag="--param") == {}
    parsed = parse_key_values(["eps=1e-4", " min_corr_sum = 0.5 ", "n_train=\t16"], flag="--param")
    assert parsed == {"eps": "1e-4", "min_corr_sum": "0.5", "n_train": "16"}
    assert list(parsed) == ["eps", "min_corr_sum", "n_train"]


def test_value_may_hold_equals_signs_and_be_empty() -> None:
    assert parse_key_value("tag=a=b", flag="--train") == ("tag", "a=b")
    assert parse_key_value("expr = x == y", flag="--train") == ("expr", "x == y")
    assert parse_key_value("eval_dataset=", flag="--task-param") == ("eval_dataset", "")
    assert parse_key_value("eval_dataset =  ", flag="--task-param") == ("eval_dataset", "")


@pytest.mark.parametrize(
    ("item", "why"),
    [
        ("eps", r"--param expects key=value, got 'eps'$"),
        ("", r"--param expects key=value, got ''$"),
        ("=1", r"--param expects key=value, got '=1' \(empty key\)"),
        ("  = 1", r"--param expects key=value, got '  = 1' \(empty key\)"),
        ("n train=3", r"got 'n train=3' \(whitespace inside the key 'n train'\)"),
    ],
)
def test_malformed_item_named_with_its_flag(item: str, why: str) -> None:
    with pytest.raises(UserError, match=why):
        parse_key_values(["ok=1", item], flag="--param")


def test_key_given_twice_refused_even_with_the_same_value() -> None:
    with pytest.raises(UserError, match=r"--train 'steps' given twice \('3' and '4'\)"):
        parse_key_values(["steps=3", "steps=4"], flag="--train")
    with pytest.raises(UserError, match="'steps' given twice"):
        parse_key_values(["steps=3", " steps = 3"], flag="--train")


def test_flags_of_run_score_and_advantages_share_the_rules() -> None:
    from mrbench.engine.evaluation.scoring import parse_settings

    assert parse_settings(["n_train=10", "weights = paper", "tag=a=b"], "--task-param") == {
        "n_train": "10",
        "weights": "paper",
        "tag": "a=b",
    }
    with pytest.raises(UserError, match="--task-param 'n' given twice"):
        parse_settings(["n=1", "n=2"], "--task-param")
