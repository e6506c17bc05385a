"""Problem sets: the embedded families, HumanEval from the package, hub loaders (offline behaviour)."""

from __future__ import annotations

import doctest
import re
import time

import pytest

from mrbench.tasks.code_generation import hub, humaneval, problems
from mrbench.tasks.code_generation.problems import Problem, embedded_problems, embedded_split, split_by_family


def test_doctests():
    for module in (problems, humaneval, hub):
        assert doctest.testmod(module).failed == 0, module.__name__


def test_embedded_set_is_big_unique_and_deterministic():
    ps = embedded_problems()
    assert len(ps) >= 150
    assert len({p.id for p in ps}) == len(ps)
    assert [p.tests for p in ps] == [p.tests for p in embedded_problems()]  # same every call
    for p in ps:
        assert p.dataset == "embedded" and p.entry_point == p.id
        assert re.fullmatch(rf"def {p.id}\([a-z, ]*\):\n    return .+\n", p.reference), p.reference
        assert p.tests.startswith("def check(candidate):") and p.tests.count("assert") == 4


def test_embedded_problems_fit_tiny_models():
    for p in embedded_problems():
        assert len(p.prompt) <= 140, p.prompt  # one sentence plus the instruction
        assert len(p.gold_completion()) <= 90  # ~30 tokens: well inside 64
        assert f"`{p.id}(" in p.prompt and "```python" in p.prompt
        assert p.messages() == [{"role": "user", "content": p.prompt}]


def test_no_constant_answer_passes_embedded_tests():
    for p in embedded_problems():
        outputs = {line.rsplit("==", 1)[1].strip() for line in p.tests.splitlines()[1:]}
        assert len(outputs) >= 2, p.id


def test_split_is_stratified_disjoint_and_fixed():
    train, evals = embedded_split()
    assert not {p.id for p in train} & {p.id for p in evals}
    assert len(train) + len(evals) == len(embedded_problems())
    assert 0.15 <= len(evals) / (len(train) + len(evals)) <= 0.3
    families = {p.family for p in embedded_problems()}
    assert families <= {p.family for p in evals}  # every family is represented in eval
    assert families <= {p.family for p in train}
    assert [p.id for p in embedded_split()[1]] == [p.id for p in evals]


def test_split_by_family_with_a_key():
    ps = [Problem(str(i), "x", "f", "", "", "") for i in range(10)]
    train, evals = split_by_family(ps, 0.2, key=lambda p: "all")
    assert len(evals) == 2 and len(train) == 8
    assert split_by_family(ps, 0.2)[1] == []  # each problem its own family of one: nothing held out


def test_humaneval_from_the_package():
    ps = humaneval.humaneval_problems()
    assert len(ps) == 164 and ps[0].id == "HumanEval/0"
    for p in ps:
        assert p.reference.startswith(p.prelude) and f"`{p.entry_point}`" in p.prompt
        assert "def check(candidate)" in p.tests


def test_hub_loaders_fail_fast_and_clearly_offline(monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(hub, "_hub_reachable", lambda timeout_s=3.0: False)
    hub.mbpp_problems.cache_clear()
    started = time.monotonic()
    with pytest.raises(hub.HubUnavailableError, match=r"mbpp.*unreachable.*'embedded' or 'humaneval'"):
        hub.mbpp_problems("test")
    with pytest.raises(hub.HubUnavailableError, match="LeetCodeDataset"):
        hub.leetcode_problems("train")
    assert time.monotonic() - started < 2
    with pytest.raises(ValueError, match="unknown mbpp split 'dev'"):
        hub.mbpp_problems("dev")


def test_hub_rows_become_runnable_problems(monkeypatch):
    rows = {
        hub.MBPP_REPO: [
            {
                "task_id": 11,
                "text": "Write a function to square a number.",
                "code": "def square_it(n):\r\n  return n * n",
                "test_list": ["assert square_it(3) == 9", "assert square_it(-2) == 4"],
                "test_setup_code": "",
            }
        ],
        hub.LEETCODE_REPO: [
            {
                "task_id": "two-sum",
                "query": "Solve two sum.",
                "response": "Idea.\n```python\nclass Solution:\n    def twoSum(self, nums, target):\n"
                "        seen = {}\n        for i, x in enumerate(nums):\n"
                "            if target - x in seen:\n                return [seen[target - x], i]\n"
                "            seen[x] = i\n```",
                "prompt": "from typing import List\n",
                "test": "def check(candidate):\n    assert candidate(nums=[2, 7, 11], target=9) == [0, 1]\n",
                "entry_point": "Solution().twoSum",
            }
        ],
    }
    monkeypatch.setattr(hub, "load_hub_rows", lambda repo, config, split: rows[repo])
    hub.mbpp_problems.cache_clear()
    hub.leetcode_problems.cache_clear()
    try:
        (mbpp,) = hub.mbpp_problems("test")
        (leet,) = hub.leetcode_problems("test")
    finally:
        hub.mbpp_problems.cache_clear()
        hub.leetcode_problems.cache_clear()
    assert mbpp.entry_point == "square_it" and mbpp.names == ("square_it",) and mbpp.check == "pass"
    assert "assert square_it(3) == 9" in mbpp.prompt and "\r" not in mbpp.reference
    assert leet.entry_point == "Solution().twoSum" and leet.reference.startswith("class Solution:")

    from mrbench.kit.sandbox import Limits, Sandbox
    from mrbench.tasks.code_generation.rewards import job_for

    with Sandbox(Limits(timeout_s=3), workers=2) as sandbox:
        results = sandbox.run_many([job_for(p, p.reference) for p in (mbpp, leet)])
    assert [r.status for r in results] == ["passed", "passed"], [r.detail for r in results]
