"""BFCL's own checker: loaded without its API clients, accepts all gold, decides on perturbed answers."""

from __future__ import annotations

import copy
import importlib.util
import json
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest

from mrbench.tasks.tool_calling.bfcl import CATEGORY_FILES, UNSATISFIABLE, BfclItem, load_bfcl_items
from mrbench.tasks.tool_calling.data import gold_completion
from mrbench.tasks.tool_calling.rewards import RANGES, score_answer
from mrbench.tasks.tool_calling.score import Scorer

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("bfcl_eval") is None,
    reason='needs the BFCL checker: pip install --no-deps "bfcl-eval==2026.3.23"',
)

CALL_CATEGORIES = [c for c in CATEGORY_FILES if "irrelevance" not in c]
MAXIMA = {name: high for name, (_, high) in RANGES.items()}


def _check(item: BfclItem, calls: list[dict[str, Any]]) -> Any:
    from mrbench.tasks.tool_calling.bfcl_checker import check_calls

    return check_calls(item.bfcl_category, list(item.functions), calls, list(item.ground_truth))


def test_the_checker_loads_without_model_config_or_api_clients() -> None:
    # A fresh interpreter: what loading the checker imports, and that it works.
    code = (
        "import sys, json\n"
        "from mrbench.tasks.tool_calling.bfcl_checker import load_checker\n"
        "m = load_checker()\n"
        "heavy = [n for n in ('bfcl_eval.constants.model_config', 'bfcl_eval.model_handler', 'openai',\n"
        "         'anthropic', 'tree_sitter') if n in sys.modules]\n"
        "print(json.dumps({'heavy': heavy, 'file': m.__file__, 'registered': m.__name__ in sys.modules,\n"
        "                  'mapping': sorted(m.MODEL_CONFIG_MAPPING)}))\n"
    )
    out = json.loads(
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    )
    assert out["heavy"] == [] and out["registered"] is False and out["mapping"] == ["mrbench"]
    assert out["file"].endswith("bfcl_eval/eval_checker/ast_eval/ast_checker.py")


def test_dotted_names_are_compared_as_shown() -> None:
    dotted = next(i for i in load_bfcl_items("simple") if "." in i.gold_calls()[0]["name"])
    calls = [{"name": c["name"], "parameters": c["parameters"]} for c in dotted.gold_calls()]
    assert _check(dotted, calls).valid
    underscored = [{"name": c["name"].replace(".", "_"), "parameters": c["parameters"]} for c in calls]
    assert _check(dotted, underscored).error_type == "simple_function_checker:wrong_func_name"


@pytest.mark.parametrize("category", list(CATEGORY_FILES))
def test_gold_of_every_category_is_valid_through_mrbench_score(category: str) -> None:
    from mrbench.engine.evaluation.scoring import score_task

    out = score_task("tool-calling", dataset=f"bfcl-{category}", gold=True).to_dict()
    assert set(out) >= {"task", "dataset", "n", "summary", "status_counts", "wall_s", "items"}
    assert out["n"] == len(load_bfcl_items(category)) and not out["errors"]
    assert out["status_counts"] == {"valid": out["n"]}
    assert all(item["rewards"]["bfcl_valid"] == 1.0 for item in out["items"])
    expected = {"format": 1.0, "exact_match": 1.0, "bfcl_valid": 1.0}
    if "irrelevance" in category:  # no gold call: the correctness components are 0 by definition
        expected |= {"function_name": 0.0, "parameter": 0.0, "values": 0.0}
    else:
        expected |= MAXIMA
    assert out["summary"] == expected


def test_the_unsatisfiable_items_fail_under_the_checker_whatever_we_give() -> None:
    from mrbench.tasks.tool_calling.bfcl import _read_category, bfcl_data_dir

    # Read them back from the package files (the loader leaves them out).
    data = bfcl_data_dir()
    for item_id, _reason in UNSATISFIABLE.items():
        category = "live_simple" if item_id.startswith("live_simple") else "live_multiple"
        rows = {
            json.loads(line)["id"]: json.loads(line)
            for line in (data / f"BFCL_v4_{category}.json").read_text().splitlines()
        }
        truth = {
            json.loads(line)["id"]: json.loads(line)["ground_truth"]
            for line in (data / "possible_answer" / f"BFCL_v4_{category}.json").read_text().splitlines()
        }
        item = BfclItem(item_id, category, (), tuple(rows[item_id]["function"]), tuple(truth[item_id]))
        gold = item.gold_calls()
        assert not _check(item, [{"name": c["name"], "parameters": c["parameters"]} for c in gold]).valid
        assert item_id not in {i.id for i in _read_category(data, category)}


# --------------------------------------------------------------------------- perturbations


def _schema_types(item: BfclItem) -> dict[str, dict[str, str]]:
    return {
        f["name"]: {k: v.get("type", "") for k, v in f["parameters"]["properties"].items()}
        for f in item.functions
    }


def _int_as_float(item: BfclItem, calls: list[dict[str, Any]]) -> bool:
    types = _schema_types(item)
    for call in calls:
        for key, value in call["parameters"].items():
            if types[call["name"]].get(key) == "integer" and type(value) is int:
                call["parameters"][key] = float(value)  # same number, wrong type
                return True
    return False


def _drop_required(item: BfclItem, calls: list[dict[str, Any]]) -> bool:
    required = {f["name"]: f["parameters"].get("required", []) for f in item.functions}
    for call in calls:
        for key in required[call["name"]]:
            if key in call["parameters"]:
                del call["parameters"][key]
                return True
    return False


def _extra_parameter(item: BfclItem, calls: list[dict[str, Any]]) -> bool:
    calls[0]["parameters"]["mrbench_extra"] = 1
    return True


def _wrong_function(item: BfclItem, calls: list[dict[str, Any]]) -> bool:
    calls[0]["name"] = "mrbench_unknown_function"
    return True


PERTURBATIONS: dict[str, Callable[[BfclItem, list[dict[str, Any]]], bool]] = {
    "int_as_float": _int_as_float,
    "drop_required": _drop_required,
    "extra_parameter": _extra_parameter,
    "wrong_function": _wrong_function,
}
INT_AS_FLOAT_OPEN = {"simple": 211, "multiple": 109, "parallel": 125, "parallel_multiple": 124}
"""Items with an integer argument (the issue's count): each one a float there turns invalid."""


@pytest.mark.parametrize("category", CALL_CATEGORIES)
def test_checker_and_our_scores_agree_on_perturbed_answers(category: str) -> None:
    scorer = Scorer(8, 8, 0)
    index = scorer.index(f"bfcl-{category}")
    applied = dict.fromkeys(PERTURBATIONS, 0)
    for item_id, entry in index.items():
        item = entry.bfcl
        assert item is not None
        for name, perturb in PERTURBATIONS.items():
            calls = [
                {"name": c["name"], "parameters": c["parameters"]} for c in copy.deepcopy(item.gold_calls())
            ]
            if not perturb(item, calls):
                continue
            applied[name] += 1
            completion = gold_completion(calls)
            scored = scorer.score_items(
                [{"dataset": f"bfcl-{category}", "id": item_id, "completion": completion}]
            )[0]
            assert scored.rewards["bfcl_valid"] == 0.0 and scored.status != "valid", (name, item_id)
            assert scored.rewards["exact_match"] == 0.0, (name, item_id)  # the checker decides
            ours = score_answer(completion, entry.gold_calls)
            assert ours is not None
            if name == "int_as_float":
                # The paper's components compare numbers by value: they see no difference.
                assert {k: ours[k] for k in MAXIMA} == MAXIMA and ours["exact_match"] == 1.0, item_id
                wrong_type = (
                    "parallel_function_checker_no_order:cannot_find_match"
                    if "parallel" in category
                    else "type_error:simple"
                )
                assert scored.status == wrong_type, item_id
            else:  # our own comparison already rejects these, as the checker does
                assert ours["exact_match"] == 0.0, (name, item_id)
    assert applied["extra_parameter"] == applied["wrong_function"] == len(index)
    assert applied["drop_required"] > 0
    if category in INT_AS_FLOAT_OPEN:
        assert applied["int_as_float"] == INT_AS_FLOAT_OPEN[category]


@pytest.mark.parametrize("category", ["irrelevance", "live_irrelevance"])
def test_irrelevance_takes_no_call_only(category: str) -> None:
    scorer = Scorer(8, 8, 0)
    item = load_bfcl_items(category)[0]
    fn = item.functions[0]
    call = gold_completion([{"name": fn["name"], "parameters": {}}])
    answers = {
        "<think>no tool fits</think>\n<response>I cannot do that with these tools.</response>": (
            "valid",
            1.0,
            1.0,
        ),
        call: ("irrelevance_error:decoder_success", 0.0, 0.0),
        "I cannot do that.": ("ast_decoder:decoder_failed", 0.0, 0.0),  # not in the task's format
    }
    for completion, (status, valid, fmt) in answers.items():
        scored = scorer.score_items(
            [{"dataset": f"bfcl-{category}", "id": item.id, "completion": completion}]
        )[0]
        assert (scored.status, scored.rewards["bfcl_valid"], scored.rewards["format"]) == (status, valid, fmt)
        assert (
            scored.rewards["function_name"] == scored.rewards["parameter"] == scored.rewards["values"] == 0.0
        )


def test_an_exception_inside_the_checker_is_an_invalid_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    from mrbench.tasks.tool_calling import bfcl_checker

    checker = bfcl_checker.load_checker()

    def broken(*args: Any) -> dict[str, Any]:
        raise KeyError("surprise")

    monkeypatch.setattr(checker, "ast_checker", broken)
    item = load_bfcl_items("simple")[0]
    verdict = _check(item, [{"name": c["name"], "parameters": c["parameters"]} for c in item.gold_calls()])
    assert (verdict.valid, verdict.error_type) == (False, "checker_error") and "surprise" in verdict.error
