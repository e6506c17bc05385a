"""The seven reward components: static parts, one sandbox run per completion, memo, weights."""

from __future__ import annotations

import doctest
import threading

import pytest

from mrbench.kit.sandbox import Limits
from mrbench.tasks.code_generation import rewards
from mrbench.tasks.code_generation.problems import Problem, embedded_problems
from mrbench.tasks.code_generation.rewards import (
    COMPONENTS,
    CodeScorer,
    ast_similarity,
    defines_entry_point,
    efficiency,
    extract_code,
    resolve_weights,
)

ADD_3 = next(p for p in embedded_problems() if p.id == "add_3")
SLOW = Problem(  # a reference whose loop does more work than a direct solution
    id="slow_double",
    dataset="test",
    entry_point="double",
    prompt="",
    tests="def check(candidate):\n    for x in range(5):\n        assert candidate(x) == 2 * x\n",
    reference="def double(x):\n    total = 0\n    for _ in range(x):\n        total += 2\n    return total\n",
)
PROBLEMS = {("embedded", ADD_3.id): ADD_3, ("test", SLOW.id): SLOW}


@pytest.fixture(scope="module")
def scorer():
    s = CodeScorer(lambda dataset, pid: PROBLEMS.get((dataset, pid)), limits=Limits(timeout_s=2), workers=2)
    yield s
    s.close()


def test_doctests():
    assert doctest.testmod(rewards).failed == 0


def test_extract_code_prefers_the_block_with_the_entry_point():
    text = "First:\n```python\nimport os\n```\nThen:\n```py\ndef add_3(x):\n    return x + 3\n```\n"
    assert extract_code(text, "add_3") == ("def add_3(x):\n    return x + 3", True)
    assert extract_code("```text\nhello\n```", "f")[1] is False  # another language is not code
    assert extract_code("no code at all", "f") == ("no code at all", False)
    assert defines_entry_point("add_3 = lambda x: x + 3", "add_3")
    assert not defines_entry_point("def add_33(x): pass", "add_3")


@pytest.mark.parametrize(
    ("completion", "expected", "status"),
    [
        ("```python\ndef add_3(x):\n    return x + 3\n```", [1, 1, 1, 1, 1, 1, 0], "passed"),
        ("```python\ndef add_3(x):\n    return x + 4\n```", [1, 1, 1, 1, 0, 1, 0], "failed"),
        ("```python\ndef add_3(x):\n    return y\n```", [1, 1, 1, 0, 0, None, 0], "error"),
        ("```python\ndef add_3(x):\n    return x +\n```", [1, 0, 0, 0, 0, 0, 0], "syntax_error"),
        ("```python\nreturn 3\n```", [0, 1, 0, 0, 0, None, 0], "syntax_error"),  # parses, won't compile
        ("def add_3(x):\n    return x + 3", [0, 1, 1, 1, 1, 1, 0], "passed"),  # right but unfenced
        ("```python\ndef add_3(x):\n    return x + 3", [0, 1, 1, 1, 1, 1, 0], "passed"),  # truncated fence
        ("```python\ndef plus_3(x):\n    return x + 3\n```", [0, 1, 1, 0, 0, 1, 0], "error"),  # wrong name
        ("I think the answer is 3.", [0, 0, 0, 0, 0, 0, 0], "syntax_error"),
    ],
)
def test_components_on_typical_completions(scorer, completion, expected, status):
    (outcome,) = scorer.score([(ADD_3, completion)])
    assert outcome.status == status, outcome.detail
    got = [outcome.rewards[c] for c in COMPONENTS]
    for name, value, want in zip(COMPONENTS, got, expected, strict=True):
        assert 0.0 <= value <= 1.0, name
        if want is not None:
            assert value == pytest.approx(want), (name, got)


def test_ast_similarity_and_efficiency_formulas():
    ref = "def f(xs):\n    return [x + 1 for x in xs]\n"
    assert ast_similarity(ref, ref) == 1.0
    assert ast_similarity("def g(ys):\n    return [y + 2 for y in ys]\n", ref) == 1.0  # names don't matter
    loop = "def f(xs):\n    out = []\n    for x in xs:\n        out.append(x + 1)\n    return out\n"
    assert 0.2 < ast_similarity(loop, ref) < 0.9
    assert ast_similarity("def f(:", ref) == 0.0 and ast_similarity(ref, "") == 0.0
    assert efficiency(1, 4, True) == 0.75 and efficiency(5, 4, True) == 0.0
    assert efficiency(1, None, True) == 0.0 and efficiency(1, 4, False) == 0.0
    assert efficiency(None, 4, True) == 0.0 and efficiency(1, 0, True) == 0.0


def test_efficiency_rewards_less_work_and_is_the_same_in_every_run(scorer):
    fast = "```python\ndef double(x):\n    return 2 * x\n```"
    (outcome,) = scorer.score([(SLOW, fast)])
    assert outcome.status == "passed"
    # The reference runs 2 + (x + 1) + x lines per call for x = 0..4: 35; the direct one 1 each.
    assert (outcome.work, outcome.reference_work) == (5, 35)
    assert outcome.rewards["efficiency"] == pytest.approx(1 - 5 / 35)
    (gold,) = scorer.score([(SLOW, SLOW.gold_completion())])
    assert gold.rewards["efficiency"] == 0.0  # the reference is as efficient as itself, by definition
    # No cache: a fresh scorer under another sandbox counts the same (a timing would differ).
    again = CodeScorer(lambda d, p: PROBLEMS.get((d, p)), limits=Limits(timeout_s=2), workers=1)
    try:
        (repeat,) = again.score([(SLOW, fast)])
    finally:
        again.close()
    assert repeat.rewards["efficiency"] == outcome.rewards["efficiency"]


def test_a_program_that_replaces_the_trace_function_gets_no_efficiency(scorer):
    evasive = "```python\nimport sys\ndef double(x):\n    sys.settrace(None)\n    return 2 * x\n```"
    (outcome,) = scorer.score([(SLOW, evasive)])
    assert outcome.status == "passed" and outcome.rewards["accuracy"] == 1.0
    assert outcome.work is None and outcome.rewards["efficiency"] == 0.0


def test_seven_reward_functions_share_one_run_per_completion():
    scorer = CodeScorer(lambda d, p: PROBLEMS.get((d, p)), limits=Limits(timeout_s=2), workers=2)
    try:
        completions = [
            [{"role": "assistant", "content": f"```python\ndef add_3(x):\n    return x + {k}\n```"}]
            for k in range(4)
        ]
        completions.append(completions[0])  # a duplicate in the batch runs once too
        columns = {"problem_id": ["add_3"] * 5, "dataset": ["embedded"] * 5, "sample_id": ["s"] * 5}
        functions = [scorer.reward_function(c) for c in COMPONENTS]
        assert [f.__name__ for f in functions] == list(COMPONENTS)
        values = {f.__name__: f([[]] * 5, completions, **columns) for f in functions}
        assert scorer.runs == 4  # unique completions, not 7 × 5
        assert values["accuracy"] == [0.0, 0.0, 0.0, 1.0, 0.0]
        assert all(len(v) == 5 for v in values.values())
    finally:
        scorer.close()


def test_memo_is_thread_safe_and_bounded():
    scorer = CodeScorer(
        lambda d, p: PROBLEMS.get((d, p)), limits=Limits(timeout_s=2), workers=2, cache_size=3
    )
    try:
        texts = [f"```python\ndef add_3(x):\n    return x + {k}\n```" for k in range(6)]
        results: list[list[float]] = []

        def work() -> None:
            results.append([o.rewards["accuracy"] for o in scorer.score([(ADD_3, t) for t in texts])])

        threads = [threading.Thread(target=work) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert all(r == [0, 0, 0, 1, 0, 0] for r in results)
        assert len(scorer._cache) <= 3
        assert scorer.runs >= 6  # evictions may force reruns, but answers never change
    finally:
        scorer.close()


def test_unknown_problems_are_unscorable_and_columns_are_required(scorer):
    f = scorer.reward_function("format")
    assert f(["p"], ["```python\nx = 1\n```"], problem_id=["nope"], dataset=["embedded"]) == [None]
    with pytest.raises(ValueError, match="problem_id"):
        f(["p"], ["x"])
    with pytest.raises(ValueError, match="unknown reward component 'speed'"):
        scorer.reward_function("speed")


def test_sandbox_faults_are_unscorable_not_zero(scorer):
    broken = Problem(
        "broken", "test", "f", "", "def check(candidate):\n    pass\n", "def f():\n    return 1\n"
    )
    (outcome,) = scorer.score([(broken, "```python\ndef f():\n    return 1\n```")])
    assert outcome.status == "sandbox_error"
    assert outcome.rewards["accuracy"] is None and outcome.rewards["runtime"] is None
    assert outcome.rewards["format"] == 1.0


def test_weights_presets_and_custom():
    assert resolve_weights("equal") == dict.fromkeys(COMPONENTS, 1.0)
    paper = resolve_weights("paper")
    assert paper == {
        "format": 0.05,
        "syntax": 0.05,
        "compile": 0.05,
        "runtime": 0.25,
        "accuracy": 0.60,
        "ast_similarity": 0.30,
        "efficiency": 0.20,
    }
    assert resolve_weights("accuracy=3,format=0.5") == {
        **dict.fromkeys(COMPONENTS, 1.0),
        "accuracy": 3.0,
        "format": 0.5,
    }
    with pytest.raises(ValueError, match=r"unknown weights 'paperz'.*equal, paper"):
        resolve_weights("paperz")
    with pytest.raises(ValueError, match="unknown reward component 'speed'"):
        resolve_weights("speed=1")
    with pytest.raises(ValueError, match="must be a number"):
        resolve_weights("accuracy=high")
