"""Evaluation: the unbiased pass@k estimator, sampled and per-item metrics, sampling, and evaluate()."""

from __future__ import annotations

import doctest
import itertools
import math
from math import comb

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mrbench.tasks.code_generation import code_generation, evaluation
from mrbench.tasks.code_generation.evaluation import (
    EVAL_METRICS,
    SAMPLED_METRICS,
    metrics_of,
    pass_at_k,
    pass_at_k_by_problem,
    sampled_metrics,
    sampled_pass_at_k,
)
from mrbench.tasks.code_generation.problems import fence
from mrbench.tasks.code_generation.sampling import sample_completions
from mrbench.tasks.code_generation.task import score_sample


def test_doctests():
    assert doctest.testmod(evaluation).failed == 0


@given(st.integers(1, 30).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n), st.integers(1, n))))
def test_pass_at_k_equals_the_combinatorial_definition(nck):
    n, c, k = nck
    assert pass_at_k(n, c, k) == pytest.approx(1 - comb(n - c, k) / comb(n, k), abs=1e-12)


def test_pass_at_k_is_the_chance_that_k_drawn_samples_contain_a_pass():
    samples = [True, False, False, True, False]
    for k in (1, 2, 3):
        draws = list(itertools.combinations(samples, k))
        assert pass_at_k(5, 2, k) == pytest.approx(sum(any(d) for d in draws) / len(draws))


def test_pass_at_k_rejects_impossible_counts():
    for n, c, k in ((3, 4, 1), (3, 1, 0), (3, -1, 1)):
        with pytest.raises(ValueError):
            pass_at_k(n, c, k)
    assert pass_at_k_by_problem({}, ks=(1,)) == {}


def test_sampled_pass_at_k_exact_values_on_hand_made_outcomes():
    passed = {
        "a": [True, True, False, False],  # pass@1 2/4, pass@2 1 - C(2,2)/C(4,2) = 5/6, pass@4 1
        "b": [True, False, False, False],  # 1/4, 1 - C(3,2)/C(4,2) = 1/2, 1
        "c": [False, False, False, False],  # 0, 0, 0
    }
    got = sampled_pass_at_k(passed, ks=(1, 2, 4))
    assert got == pytest.approx(
        {"sampled_pass_at_1": 0.25, "sampled_pass_at_2": (5 / 6 + 1 / 2) / 3, "sampled_pass_at_4": 2 / 3}
    )
    # Unscorable samples (None) are left out; a problem with fewer than k scorable ones too.
    got = sampled_pass_at_k({"a": [True, None, False], "b": [None, None, True]}, ks=(1, 2))
    assert got == pytest.approx({"sampled_pass_at_1": (1 / 2 + 1) / 2, "sampled_pass_at_2": 1.0})
    assert math.isnan(sampled_pass_at_k({"a": [None]}, ks=(1,))["sampled_pass_at_1"])


@pytest.fixture(scope="module")
def scored_task():
    task = code_generation()
    yield task
    task.close()


def _outcomes(task, problem_id, completions):
    sample = next(s for s in task.train_samples() + task.eval_samples() if s.id == f"embedded:{problem_id}")
    return task.outcomes_of([(sample, c) for c in completions])


def test_sampled_metrics_from_real_sandbox_outcomes(scored_task):
    good = scored_task.problem_for("embedded", "add_3").gold_completion()
    wrong = fence("def add_3(x):\n    return x + 4")
    broken = "```python\ndef add_3(x:\n```"
    outcomes = {
        "add_3": _outcomes(scored_task, "add_3", [good, wrong, broken, good]),
        "negate": _outcomes(scored_task, "negate", [fence("def negate(x):\n    return -x")] * 4),
    }
    assert [o.status for o in outcomes["add_3"]] == ["passed", "failed", "syntax_error", "passed"]
    got = sampled_metrics(outcomes)
    assert list(got) == list(SAMPLED_METRICS)
    assert got == pytest.approx({"sampled_pass_at_1": (2 / 4 + 1) / 2, "sampled_pass_at_4": 1.0})
    assert list(sampled_metrics({"add_3": outcomes["add_3"][:3]})) == ["sampled_pass_at_1"]  # k=4 > n=3


def test_sampled_pass_at_1_separates_checkpoints_that_greedy_pass_at_1_ties(scored_task):
    """Two checkpoints with the same greedy answers (so the same greedy pass@1) but where one
    samples the right answer more often: only the sampled metric tells them apart."""
    right = {pid: scored_task.problem_for("embedded", pid).gold_completion() for pid in ("add_3", "negate")}
    wrong = {pid: fence(f"def {pid}(x):\n    return x") for pid in right}
    greedy = {"add_3": right["add_3"], "negate": wrong["negate"]}
    checkpoints = {
        "better": {
            "add_3": [right["add_3"]] * 3 + [wrong["add_3"]],
            "negate": [right["negate"], *[wrong["negate"]] * 3],
        },
        "worse": {"add_3": [right["add_3"], *[wrong["add_3"]] * 3], "negate": [wrong["negate"]] * 4},
    }
    greedy_pass = {
        name: sum(metrics_of(_outcomes(scored_task, pid, [greedy[pid]])[0])["pass_at_1"] for pid in greedy)
        / 2
        for name in checkpoints
    }
    sampled = {
        name: sampled_metrics({pid: _outcomes(scored_task, pid, texts) for pid, texts in drawn.items()})
        for name, drawn in checkpoints.items()
    }
    assert greedy_pass == {"better": 0.5, "worse": 0.5}
    assert sampled["better"]["sampled_pass_at_1"] == pytest.approx((3 / 4 + 1 / 4) / 2)
    assert sampled["worse"]["sampled_pass_at_1"] == pytest.approx((1 / 4 + 0) / 2)
    assert sampled["better"]["sampled_pass_at_4"] == 1.0 and sampled["worse"]["sampled_pass_at_4"] == 0.5


def test_metrics_of_an_outcome():
    task = code_generation()
    try:
        problem = task.problem_for("embedded", "add_3")
        (good,) = task.scorer.score([(problem, problem.gold_completion())])
        metrics = metrics_of(good)
        assert list(metrics) == list(EVAL_METRICS)
        assert (
            metrics["pass_at_1"] == 1.0
            and metrics["executable_rate"] == 1.0
            and metrics["format_rate"] == 1.0
        )
        assert all(math.isnan(v) for v in metrics_of(None).values())
    finally:
        task.close()


def test_score_sample_for_the_exported_lm_eval_task():
    task = code_generation()
    sample = next(s for s in task.eval_samples())
    problem = task.problem_for(sample.columns["dataset"], sample.columns["problem_id"])
    assert score_sample(sample, problem.gold_completion())["pass_at_1"] == 1.0
    assert score_sample(sample, "no idea")["pass_at_1"] == 0.0


@pytest.fixture(scope="module")
def tiny_generator(random_generator):
    """A randomly initialised one-layer Qwen2 with a BPE trained on the task's demonstrations."""
    from mrbench.engine.models.tiny import train_tokenizer

    demos = code_generation().demonstrations(100, seed=0)
    tok = train_tokenizer([p[0]["content"] + c for p, c in demos], vocab_size=400)
    return random_generator(tok, layers=1, max_positions=512)


def test_gold_answers_fit_the_generation_budget(tiny_generator):
    task = code_generation()
    lengths = [len(tiny_generator.tokenizer(c)["input_ids"]) for _, c in task.demonstrations(146, 0)]
    assert max(lengths) < task.max_completion_tokens  # even with a 400-token vocabulary


def test_sampling_is_seeded_and_leaves_the_global_random_state_alone(tiny_generator):
    import torch

    model, tok = tiny_generator.model, tiny_generator.tokenizer
    conversations = [s.prompt for s in code_generation(n_eval=3).eval_samples()]
    model.train()
    state = torch.get_rng_state()

    def draw(seed: int, n: int = 4) -> list[list[str]]:
        return sample_completions(
            model, tok, conversations, n=n, max_new_tokens=8, temperature=1.0, seed=seed
        )

    first = draw(0)
    assert torch.equal(torch.get_rng_state(), state) and model.training  # both restored
    assert len(first) == 3 and all(
        len(group) == 4 and all(isinstance(t, str) for t in group) for group in first
    )
    assert first == draw(0) and first != draw(1)
    assert len({t for group in first for t in group}) > 3  # samples, not one answer repeated
    with pytest.raises(ValueError, match="n >= 1 and temperature > 0"):
        sample_completions(model, tok, conversations, n=0, max_new_tokens=8, temperature=1.0, seed=0)


def test_evaluate_runs_through_lm_eval(tiny_generator, tmp_path):
    task = code_generation(n_eval=3, n_sampled=4)
    try:
        result = task.evaluate(tiny_generator)
        assert list(result.metrics) == [*SAMPLED_METRICS, *EVAL_METRICS]
        assert task.primary_metric in result.metrics
        # a random model writes no working code
        assert result.metrics["pass_at_1"] == 0.0 and result.metrics["sampled_pass_at_1"] == 0.0
        assert len(result.samples) == 3
        record = result.samples[0]
        assert set(record) == {"id", "prompt", "completion", "status", "detail", "rewards", "sampled"}
        assert record["status"] in ("syntax_error", "error", "failed") and set(record["rewards"]) >= {
            "accuracy"
        }
        assert record["sampled"]["n"] == 4 and record["sampled"]["passed"] == 0
        assert sum(record["sampled"]["statuses"].values()) == 4
        assert task.evaluate(tiny_generator).metrics == result.metrics  # the same draws every time
        assert list(code_generation(n_eval=3, n_sampled=2).evaluate(tiny_generator).metrics) == [
            "sampled_pass_at_1",
            *EVAL_METRICS,
        ]
        yaml_path = task.export_lm_eval(tmp_path / "lm_eval_task")
        assert yaml_path.name == "mrbench_code_generation.yaml"
        assert (
            "mrbench.tasks.code_generation.task:score_sample"
            in (tmp_path / "lm_eval_task").joinpath("mrbench_code_generation_utils.py").read_text()
        )
    finally:
        task.close()
