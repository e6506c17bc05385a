"""BFCL v4 loader: categories, gold conversion, and consistency with the rewards."""

from __future__ import annotations

import importlib.util
import json

import pytest

from mrbench.core.errors import UserError
from mrbench.tasks.tool_calling import bfcl
from mrbench.tasks.tool_calling.bfcl import (
    CATEGORY_FILES,
    UNSATISFIABLE,
    convert_ground_truth,
    load_bfcl_items,
    load_bfcl_samples,
)
from mrbench.tasks.tool_calling.data import gold_completion
from mrbench.tasks.tool_calling.rewards import score_answer

# BFCL's data is an optional install (its own pins clash with ours); tests that read it skip without it.
requires_bfcl = pytest.mark.skipif(
    importlib.util.find_spec("bfcl_eval") is None,
    reason='needs the BFCL data: pip install --no-deps "bfcl-eval==2026.3.23"',
)

SIZES = {"simple": 400, "multiple": 200, "parallel": 200, "parallel_multiple": 200, "irrelevance": 240,
         "live_simple": 256, "live_multiple": 1051, "live_parallel": 16, "live_parallel_multiple": 24,
         "live_irrelevance": 884}  # fmt: skip
"""Items per category in bfcl-eval 2026.3.23, less UNSATISFIABLE (2 live_simple, 2 live_multiple)."""


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
        check = json.loads(sample.columns["bfcl_check"])
        assert check["category"] == CATEGORY_FILES[category] and check["functions"] and check["ground_truth"]
    if category == "parallel":
        assert all(len(json.loads(s.columns["gold_calls"])) >= 2 for s in samples)


@requires_bfcl
def test_every_category_loads_in_full_without_the_unsatisfiable_items() -> None:
    for category, size in SIZES.items():
        items = load_bfcl_items(category)
        assert len(items) == size, category
        assert not {item.id for item in items} & set(UNSATISFIABLE)
        if "irrelevance" in category:
            assert all(item.ground_truth == () and item.gold_calls() == [] for item in items)
            assert all("<response>" in item.gold_completion() for item in items[:3])
        else:
            assert all(item.ground_truth for item in items)
    assert load_bfcl_items("simple") is load_bfcl_items("simple")  # read once


@requires_bfcl
def test_full_default_set_and_its_gold_answers_score_the_maximum() -> None:
    samples = load_bfcl_samples()
    assert len(samples) == 800  # simple 400 + multiple 200 + parallel 200
    for sample in samples:
        gold = sample.columns["gold_calls"]
        scores = score_answer(gold_completion(json.loads(gold)), gold)
        assert scores["exact_match"] == 1.0, sample.id


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


def test_a_required_argument_is_never_optional() -> None:
    # simple_python_17: the possible answer marks `formatted` optional (""), the schema requires it,
    # and BFCL's checker rejects a call without it; the gold call must therefore carry it.
    functions = [{"name": "get_prime_factors", "parameters": {"required": ["number", "formatted"]}}]
    gold = convert_ground_truth(
        [{"get_prime_factors": {"number": [450], "formatted": [True, ""]}}], functions
    )
    assert gold == [{"name": "get_prime_factors", "parameters": {"number": 450, "formatted": True},
                     "accept": {"number": [450], "formatted": [True]}, "optional": {}}]  # fmt: skip
    without = gold_completion([{"name": "get_prime_factors", "parameters": {"number": 450}}])
    assert score_answer(without, json.dumps(gold))["exact_match"] == 0.0
    # A required argument whose only acceptable value is "" (live_multiple_507-149-4) takes "".
    only_empty = convert_ground_truth(
        [{"f": {"origin": [""]}}], [{"name": "f", "parameters": {"required": ["origin"]}}]
    )
    assert only_empty[0]["parameters"] == {"origin": ""}


@requires_bfcl
def test_the_five_items_with_a_required_argument_marked_optional_now_carry_it() -> None:
    fixed = []
    for category in ("simple", "multiple", "parallel", "parallel_multiple"):
        for item in load_bfcl_items(category):
            required = {f["name"]: set(f["parameters"].get("required", [])) for f in item.functions}
            for truth in item.ground_truth:
                for name, args in truth.items():
                    if any("" in opts and arg in required[name] for arg, opts in args.items()):
                        fixed.append(item.id)
                        call = next(c for c in item.gold_calls() if c["name"] == name)
                        assert required[name] <= set(call["parameters"]), item.id
    assert len(set(fixed)) == 5 and "simple_python_17" in fixed


def test_unknown_category_names_the_choices() -> None:
    with pytest.raises(ValueError, match=r"simpel.*simple"):
        load_bfcl_samples(("simpel",))


def test_missing_package_is_a_clear_user_error(monkeypatch: pytest.MonkeyPatch) -> None:
    # Hide the package (installed or not) to check the message a user without it gets.
    real = bfcl.importlib.util.find_spec
    monkeypatch.setattr(
        bfcl.importlib.util, "find_spec", lambda name, *a: None if name == "bfcl_eval" else real(name, *a)
    )
    with pytest.raises(UserError, match=r'pip install --no-deps "bfcl-eval==2026\.3\.23"'):
        load_bfcl_samples()
