"""``mrbench score`` for tool calling: datasets, gold, --input files; any completion graded, never a crash."""

from __future__ import annotations

import importlib.util
import json
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mrbench.core.errors import UserError
from mrbench.engine.evaluation.scoring import score_task
from mrbench.tasks.tool_calling import bfcl, tool_calling
from mrbench.tasks.tool_calling.rewards import COMPONENTS, RANGES

requires_bfcl = pytest.mark.skipif(
    importlib.util.find_spec("bfcl_eval") is None,
    reason='needs the BFCL data: pip install --no-deps "bfcl-eval==2026.3.23"',
)
MINIMA = {name: low for name, (low, _) in RANGES.items()} | {"format": 0.0}


def _call(name: str, parameters: dict) -> str:
    return (
        f"<think></think>\n<tool_call>\n{json.dumps({'name': name, 'parameters': parameters})}\n</tool_call>"
    )


_rng = random.Random(0)
GARBAGE = "".join(chr(_rng.randrange(32, 0x2FFF)) for _ in range(1_000_000))
BAD_COMPLETIONS = {
    "prose": "The prime factors of 450 are 2, 3, 3, 5 and 5.",
    "response_not_call": "<think></think>\n<response>2, 3, 3, 5, 5</response>",
    "empty": "",
    "truncated_json": _call("get_prime_factors", {"number": 450, "formatted": True})[:-25],
    "unclosed_block": "<think></think>\n<tool_call>\n{}",
    "garbage_1mb": GARBAGE,
    "open_tags_1mb": "<tool_call>" * 90_000,
    "think_tags_1mb": "<think>" * 140_000,
    "nested_json_1mb": "<think></think>\n<tool_call>\n" + "[" * 1_000_000 + "\n</tool_call>",
}
"""Completions that are not calls at all: every component at its minimum, bfcl_valid 0."""
WRONG_CALLS = {
    "wrong_type": _call("get_prime_factors", {"number": 450.0, "formatted": True}),
    "missing_required": _call("get_prime_factors", {"number": 450}),
    "extra_parameter": _call("get_prime_factors", {"number": 450, "formatted": True, "x": 1}),
    "unknown_function": _call("prime_factors", {"number": 450, "formatted": True}),
    "string_for_int": _call("get_prime_factors", {"number": "450", "formatted": True}),
}
"""Well-formed calls that are wrong (simple_python_17): format 1, bfcl_valid 0."""


def test_score_datasets_are_embedded_and_every_bfcl_category() -> None:
    datasets = tool_calling().score_datasets()
    assert datasets[0] == "embedded"
    assert datasets[1:] == [*(f"bfcl-{c}" for c in bfcl.CATEGORY_FILES), "toolrl", "apibank"]


def test_embedded_gold_through_the_harness() -> None:
    out = score_task("tool-calling", dataset="embedded", gold=True, task_params={"n_train": 40, "n_eval": 10})
    report = out.to_dict()
    assert report["n"] == 50 and report["status_counts"] == {"exact": 50} and not report["errors"]
    assert report["summary"]["format"] == report["summary"]["exact_match"] == 1.0
    assert {item["id"] for item in report["items"]} == {f"train-{i:05d}" for i in range(40)} | {
        f"eval-{i:05d}" for i in range(10)
    }
    task = tool_calling(n_train=40, n_eval=10)  # the ids are the samples' ids
    assert [s.id for s in task.train_samples() + task.eval_samples()] == [i["id"] for i in report["items"]]


def test_embedded_items_need_no_bfcl_and_grade_any_completion() -> None:
    task = tool_calling(n_train=8, n_eval=8)
    for text in [*BAD_COMPLETIONS.values(), "<think></think>\n<response>hi</response>"]:
        scored = task.score_items([{"dataset": "embedded", "id": "eval-00000", "completion": text}])[0]
        assert scored.error is None and set(scored.rewards) == {*COMPONENTS, "exact_match"}
        assert scored.status in ("malformed", "mismatch")


@requires_bfcl
@pytest.mark.parametrize("name", list(BAD_COMPLETIONS))
def test_non_calls_get_the_minimum_and_are_invalid(name: str) -> None:
    task = tool_calling()
    started = time.perf_counter()
    item = {"dataset": "bfcl-simple", "id": "simple_python_17", "completion": BAD_COMPLETIONS[name]}
    scored = task.score_items([item])[0]
    assert time.perf_counter() - started < 5.0  # linear in the text, even with 1 MB of repeated tags
    assert scored.error is None and scored.status == "ast_decoder:decoder_failed"
    assert scored.rewards == {**MINIMA, "exact_match": 0.0, "bfcl_valid": 0.0}


@requires_bfcl
@pytest.mark.parametrize("name", list(WRONG_CALLS))
def test_wrong_calls_are_graded_and_invalid(name: str) -> None:
    task = tool_calling()
    scored = task.score_items(
        [{"dataset": "bfcl-simple", "id": "simple_python_17", "completion": WRONG_CALLS[name]}]
    )
    rewards = scored[0].rewards
    assert scored[0].error is None and rewards["format"] == 1.0
    assert rewards["bfcl_valid"] == rewards["exact_match"] == 0.0
    assert scored[0].status != "valid"
    if name == "unknown_function":
        assert {k: rewards[k] for k in ("function_name", "parameter", "values")} == {
            "function_name": -0.5, "parameter": -1.0, "values": -1.5
        }  # fmt: skip


@requires_bfcl
def test_an_input_file_of_mixed_lines(tmp_path: Path) -> None:
    gold = tool_calling().gold_items("bfcl-parallel_multiple")[:3]
    lines = [json.dumps(item) for item in gold]
    lines += [
        json.dumps(
            {"dataset": "bfcl-simple", "id": "simple_python_17", "completion": BAD_COMPLETIONS["garbage_1mb"]}
        ),
        json.dumps(
            {"dataset": "bfcl-simple", "id": "simple_python_17", "completion": WRONG_CALLS["wrong_type"]}
        ),
        json.dumps({"dataset": "bfcl-simple", "id": "simple_python_9999", "completion": "x"}),
        json.dumps({"dataset": "bfcl-live_simple", "id": "live_simple_106-63-0", "completion": "x"}),
        json.dumps({"dataset": "bfcl-java", "id": "java_0", "completion": "x"}),
        "{not json",
    ]
    path = tmp_path / "in.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    report = score_task("tool-calling", input_path=path).to_dict()
    assert report["dataset"] == "mixed" and report["n"] == 5
    assert report["status_counts"] == {
        "valid": 3, "ast_decoder:decoder_failed": 1, "type_error:simple": 1, "unknown_id": 2,
        "unknown_dataset": 1, "malformed_input": 1,
    }  # fmt: skip
    assert report["summary"]["bfcl_valid"] == 0.6 and report["summary"]["exact_match"] == 0.6
    errors = {e["line"]: e["error"] for e in report["errors"]}
    assert "no answer can pass BFCL's checker" in errors[7] and "bfcl-java" in errors[8]
    assert "not valid JSON" in errors[9]


def test_without_the_package_bfcl_items_say_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    real = bfcl.importlib.util.find_spec
    monkeypatch.setattr(
        bfcl.importlib.util, "find_spec", lambda name, *a: None if name == "bfcl_eval" else real(name, *a)
    )
    task = tool_calling(n_train=8, n_eval=8)
    scored = task.score_items(
        [
            {"dataset": "bfcl-simple", "id": "simple_python_0", "completion": "x"},
            {"dataset": "embedded", "id": "eval-00001", "completion": "x"},
        ]
    )
    assert (
        scored[0].status == "unavailable_dataset"
        and 'pip install --no-deps "bfcl-eval==2026.3.23"' in scored[0].error
    )
    assert scored[1].status == "malformed" and scored[1].error is None
    with pytest.raises(UserError, match=r"bfcl-eval==2026\.3\.23"):
        score_task("tool-calling", dataset="bfcl-simple", gold=True)


def test_the_command_line(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "mrbench", "score", "--task", "tool-calling"]
    params = ["--task-param", "n_train=4", "--task-param", "n_eval=4"]
    done = subprocess.run(
        [*command, "--dataset", "embedded", "--gold", "--json", *params], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert {"task", "dataset", "n", "summary", "status_counts", "wall_s", "items"} <= set(out) and out[
        "n"
    ] == 8
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"dataset": "embedded", "id": "eval-00099", "completion": "x"}) + "\n")
    done = subprocess.run([*command, "--input", str(bad), *params], capture_output=True, text=True)
    assert done.returncode == 1 and "unknown id 'eval-00099'" in done.stdout
