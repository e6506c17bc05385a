"""BFCL v4 loader: categories, gold conversion, and consistency with the rewards."""

from __future__ import annotations

import importlib.util
import json

import pytest

from mrbench.core.errors import UserError
from mrbench.tasks.tool_calling import bfcl
from mrbench.tasks.tool_calling.bfcl import convert_ground_truth, load_bfcl_samples
from mrbench.tasks.tool_calling.data import gold_completion
from mrbench.tasks.tool_calling.rewards import score_answer

# BFCL's data is an optional install (its own pins clash with ours); tests that read it skip without it.
requires_bfcl = pytest.mark.skipif(
    importlib.util.find_spec("bfcl_eval") is None,
    reason='needs the BFCL data: pip install --no-deps "bfcl-eval==2026.3.23"',
)


@requires_bfcl
@pytest.mark.parametrize(("category", "first_id"), [("simple", "simple_python_0"), ("multiple", "multiple_0"),
                                                     ("parallel", "parallel_0")])  # fmt: skip
def test_each_category_loads_with_gold_calls(category: str, first_id: str) -> None:
    samples = load_bfcl_samples((category,), limit=5)
    assert len(samples) == 5 and samples[0].id == first_id
    for sample in samples:
        assert [m["role"] for m in sample.prompt] == ["system", "user"]
        gold = json.loads(sample.columns["gold_calls"])
        assert gold and all(call["name"] in sample.prompt[0]["content"] for call in gold)
        assert sample.columns["kind"] == f"bfcl_{category}"
    if category == "parallel":
        assert all(len(json.loads(s.columns["gold_calls"])) >= 2 for s in samples)


@requires_bfcl
def test_full_default_set_and_its_gold_answers_score_the_maximum() -> None:
    samples = load_bfcl_samples()
    assert len(samples) == 800  # simple 400 + multiple 200 + parallel 200
    for sample in samples:
        gold = sample.columns["gold_calls"]
        scores = score_answer(gold_completion(json.loads(gold)), gold)
        assert scores["exact_match"] == 1.0, sample.id


@requires_bfcl
def test_acceptable_values_and_optional_arguments() -> None:
    gold = convert_ground_truth([{"spotify.play": {"artist": ["Taylor Swift"], "duration": [20, 20.0]}},
                                 {"area": {"base": [10], "unit": ["units", ""]}}])  # fmt: skip
    assert gold[1] == {"name": "area", "parameters": {"base": 10}, "accept": {"base": [10]},
                       "optional": {"unit": ["units"]}}  # fmt: skip
    text = gold_completion(
        [{"name": "area", "parameters": {"base": 10, "unit": "units"}},
         {"name": "spotify.play", "parameters": {"artist": "taylor swift", "duration": 20}}]
    )  # fmt: skip
    assert score_answer(text, json.dumps(gold))["exact_match"] == 1.0


def test_unknown_category_names_the_choices() -> None:
    with pytest.raises(ValueError, match=r"simpel.*simple"):
        load_bfcl_samples(("simpel",))


def test_missing_package_is_a_clear_user_error(monkeypatch: pytest.MonkeyPatch) -> None:
    # The package is installed here; hide it to check the message a user without it gets.
    monkeypatch.setattr(bfcl.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(UserError, match="pip install bfcl-eval --no-deps"):
        load_bfcl_samples()
