"""LiveCodeBench (``code_generation_lite``) as code-generation eval data: the fixture in its own
format (functional and stdin problems; private tests as JSON and as base64+zlib+pickle), scoring
completions in the sandbox, ``mrbench score`` / ``mrbench eval`` on it, and bad input — including
a pickle that is not a plain string, which is refused, never unpickled."""

from __future__ import annotations

import base64
import json
import pickle
import zlib
from pathlib import Path

import pytest

from mrbench.core.errors import UserError
from mrbench.engine.evaluation.scoring import score_task
from mrbench.tasks.code_generation import code_generation
from mrbench.tasks.code_generation.livecodebench import decode_tests, livecodebench_problems


@pytest.fixture
def lcb(fixtures_dir: Path) -> Path:
    return fixtures_dir / "livecodebench" / "test6.jsonl"


def _fenced(code: str) -> str:
    return f"```python\n{code}\n```"


def test_problems_map_both_kinds_of_test(lcb: Path) -> None:
    problems = {p.id: p for p in livecodebench_problems(str(lcb))}
    assert list(problems) == ["3000", "abc300_a", "3001"]
    functional, stdin = problems["3000"], problems["abc300_a"]
    assert (functional.entry_point, functional.program) == ("Solution().maxPairSum", False)
    assert "class Solution:" in functional.prompt and "maximum sum of two" in functional.prompt
    assert '"[-4, -2, -9]"' in functional.tests  # the private tests are there too
    assert stdin.program and "stdin" in stdin.prompt
    assert "2000000000" in stdin.tests  # decoded from base64 + zlib + pickle
    samples = code_generation(eval_dataset="livecodebench", data_path=str(lcb)).eval_samples()
    assert {s.columns["problem_id"] for s in samples} == set(problems)


def test_completions_are_run_against_the_tests(lcb: Path, tmp_path: Path) -> None:
    answers = [
        (
            "3000",
            "class Solution:\n    def maxPairSum(self, nums):\n"
            "        a = sorted(nums)\n        return a[-1] + a[-2]",
        ),
        ("3001", "class Solution:\n    def countEven(self, nums, k):\n        return len(nums)"),
        ("abc300_a", "a, b = map(int, input().split())\nprint(a + b)"),
        ("abc300_a", "import sys\nprint(sum(map(int, sys.stdin.buffer.read().split())) + 1)"),
        ("abc300_a", "a, b = map(int, input().split()\nprint(a + b)"),
    ]
    file = tmp_path / "in.jsonl"
    file.write_text(
        "".join(
            json.dumps({"dataset": "livecodebench", "id": i, "completion": _fenced(c)}) + "\n"
            for i, c in answers
        )
    )
    report = score_task("code-generation", input_path=file, task_params={"data_path": str(lcb)})
    statuses = [item["status"] for item in report.items]
    assert statuses == ["passed", "failed", "passed", "failed", "syntax_error"]
    assert [item["rewards"]["format"] for item in report.items] == [1.0] * 5
    assert all(item["rewards"]["ast_similarity"] == 0.0 for item in report.items)  # no reference shipped


def test_score_and_eval_through_the_cli(
    lcb: Path, tmp_path: Path, mrbench_cli, eval_two, micro_model_dir: Path
) -> None:
    param = f"data_path={lcb}"
    code, _, err = mrbench_cli(
        "score", "--task", "code-generation", "--dataset", "livecodebench", "--gold", "--task-param", param
    )
    assert code == 2 and "ships no reference solutions" in err and "--input" in err
    report = eval_two(micro_model_dir, "code-generation", "livecodebench", param)
    assert (report["dataset"], report["n"]) == ("livecodebench", 2) and "pass_at_1" in report["metrics"]


def _blob(value: object) -> str:
    return base64.b64encode(zlib.compress(pickle.dumps(value))).decode()


class _Evil:
    def __reduce__(self):
        return (print, ("unpickled!",))


def test_private_tests_decode_safely() -> None:
    tests = [{"input": "1\n", "output": "2\n", "testtype": "stdin"}]
    assert decode_tests(json.dumps(tests), "w", "k") == tests
    assert decode_tests(_blob(json.dumps(tests)), "w", "k") == tests
    assert (
        decode_tests(base64.b64encode(zlib.compress(json.dumps(tests).encode())).decode(), "w", "k") == tests
    )
    with pytest.raises(UserError, match="refusing to unpickle"):
        decode_tests(_blob(_Evil()), "f.jsonl line 3", "private_test_cases")
    with pytest.raises(UserError, match="neither JSON nor base64"):
        decode_tests("%%% not base64 %%%", "w", "private_test_cases")


def _record(**change: object) -> dict:
    record = {
        "question_id": "q1",
        "question_content": "Print 1.",
        "starter_code": "",
        "public_test_cases": json.dumps([{"input": "", "output": "1", "testtype": "stdin"}]),
        "private_test_cases": "[]",
        "metadata": "{}",
    }
    return {k: v for k, v in (record | change).items() if v is not None}


@pytest.mark.parametrize(
    ("lines", "says"),
    [
        (["{bad"], "bad.jsonl line 1: not valid JSON"),
        (
            [json.dumps(_record()), json.dumps(_record(question_id="q2", question_content=None))],
            "bad.jsonl line 2: missing field 'question_content'",
        ),
        ([json.dumps(_record(private_test_cases=_blob(("not", "a string"))))], "refusing to unpickle"),
        (
            [
                json.dumps(
                    _record(
                        public_test_cases=json.dumps(
                            [{"input": "[1]", "output": "1", "testtype": "functional"}]
                        )
                    )
                )
            ],
            "need metadata 'func_name'",
        ),
        ([json.dumps(_record()), json.dumps(_record())], "question ids occur twice"),
    ],
    ids=["bad-json", "missing-field", "pickled-tuple", "no-func-name", "duplicate-id"],
)
def test_malformed_files_name_the_line_and_field(tmp_path: Path, lines: list[str], says: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(UserError, match="'livecodebench'") as info:
        livecodebench_problems(str(path))
    assert says in str(info.value)


def test_unavailable_data(tmp_path: Path, mrbench_cli) -> None:
    code, _, err = mrbench_cli(
        "eval", "--model", "tiny", "--task", "code-generation", "--dataset", "livecodebench"
    )
    assert code == 2 and "'livecodebench'" in err and "data_path" in err
    with pytest.raises(UserError, match="does not exist"):
        livecodebench_problems(str(tmp_path / "nope.jsonl"))
    with pytest.raises(ValueError, match="no training split"):
        code_generation(dataset="livecodebench", data_path=str(tmp_path))


def test_oversized_private_tests_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    from mrbench.tasks.code_generation import livecodebench

    monkeypatch.setattr(livecodebench, "MAX_TEST_BYTES", 50)
    with pytest.raises(UserError, match="decompresses to over 50 bytes"):
        decode_tests(_blob(json.dumps([{"input": "x" * 100, "output": "y"}])), "w", "private_test_cases")
