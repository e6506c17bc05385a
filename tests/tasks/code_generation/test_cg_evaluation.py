"""Evaluation: the unbiased pass@k estimator, per-item metrics, and evaluate() through lm-eval."""

from __future__ import annotations

import doctest
import itertools
import math
from math import comb

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mrbench.tasks.code_generation import code_generation, evaluation
from mrbench.tasks.code_generation.evaluation import EVAL_METRICS, metrics_of, pass_at_k, pass_at_k_by_problem
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
    from mrbench.engine.models import train_tokenizer

    demos = code_generation().demonstrations(100, seed=0)
    tok = train_tokenizer([p[0]["content"] + c for p, c in demos], vocab_size=400)
    return random_generator(tok, layers=1, max_positions=512)


def test_gold_answers_fit_the_generation_budget(tiny_generator):
    task = code_generation()
    lengths = [len(tiny_generator.tokenizer(c)["input_ids"]) for _, c in task.demonstrations(146, 0)]
    assert max(lengths) < task.max_completion_tokens  # even with a 400-token vocabulary


def test_evaluate_runs_through_lm_eval(tiny_generator, tmp_path):
    task = code_generation(n_eval=3)
    try:
        result = task.evaluate(tiny_generator)
        assert list(result.metrics) == list(EVAL_METRICS)
        assert result.metrics["pass_at_1"] == 0.0  # a random model writes no working code
        assert len(result.samples) == 3
        record = result.samples[0]
        assert set(record) == {"id", "prompt", "completion", "status", "detail", "rewards"}
        assert record["status"] in ("syntax_error", "error", "failed") and set(record["rewards"]) >= {
            "accuracy"
        }
        yaml_path = task.export_lm_eval(tmp_path / "lm_eval_task")
        assert yaml_path.name == "mrbench_code_generation.yaml"
        assert (
            "mrbench.tasks.code_generation.task:score_sample"
            in (tmp_path / "lm_eval_task").joinpath("mrbench_code_generation_utils.py").read_text()
        )
    finally:
        task.close()
