"""Evaluation for code generation: pass@k, executable rate and efficiency, run through lm-eval.

:meth:`CodeGenerationTask.evaluate` generates one greedy completion per problem through
lm-eval (``mrbench.kit.lm_eval_bridge``: a custom task over the local samples, scored by the same
sandbox as training) and reports:

``pass_at_1``
    fraction of problems whose greedy completion passes every test (the primary metric;
    MLflow metric names cannot contain ``@``, hence ``pass_at_1`` for pass@1).
``executable_rate``
    fraction whose program ran to completion or failed only on a test assertion.
``efficiency``
    mean efficiency reward (0 for failing programs).
``format_rate``, ``syntax_rate``, ``compile_rate``, ``ast_similarity``
    means of the other components.

pass@k for k > 1 needs n ≥ k *sampled* completions per problem: score them (e.g. with
``mrbench score --input``) and aggregate with :func:`pass_at_k_by_problem`, which applies the
unbiased estimator of Chen et al. (2021), :func:`pass_at_k`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from mrbench.core.contracts import EvalResult, Generator, Sample
from mrbench.tasks.code_generation.rewards import Outcome

LM_EVAL_TASK = "mrbench_code_generation"
EVAL_METRICS: tuple[str, ...] = (
    "pass_at_1",
    "executable_rate",
    "efficiency",
    "format_rate",
    "syntax_rate",
    "compile_rate",
    "ast_similarity",
)
_FROM_COMPONENT = {
    "pass_at_1": "accuracy",
    "executable_rate": "runtime",
    "efficiency": "efficiency",
    "format_rate": "format",
    "syntax_rate": "syntax",
    "compile_rate": "compile",
    "ast_similarity": "ast_similarity",
}


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased estimate of pass@k from ``n`` samples of which ``c`` passed: ``1 − C(n−c, k) / C(n, k)``.

    Computed as a product (no huge binomials), exact for every n.

    >>> pass_at_k(10, 0, 1), pass_at_k(10, 10, 5), round(pass_at_k(10, 3, 1), 12)
    (0.0, 1.0, 0.3)
    >>> round(pass_at_k(10, 3, 5), 4)  # 1 - C(7,5)/C(10,5) = 1 - 21/252
    0.9167
    >>> pass_at_k(5, 1, 10)
    Traceback (most recent call last):
    ...
    ValueError: pass@k needs n >= k samples, got n=5, k=10
    """
    if not (0 <= c <= n) or k < 1:
        raise ValueError(f"pass@k needs 0 <= c <= n and k >= 1, got n={n}, c={c}, k={k}")
    if n < k:
        raise ValueError(f"pass@k needs n >= k samples, got n={n}, k={k}")
    if n - c < k:
        return 1.0
    miss = 1.0
    for i in range(n - c + 1, n + 1):
        miss *= 1.0 - k / i
    return 1.0 - miss


def pass_at_k_by_problem(
    passed: Mapping[str, Sequence[bool]], ks: Iterable[int] = (1, 5, 10)
) -> dict[str, float]:
    """Mean pass@k over problems (``problem id → pass/fail of each sample``), as ``pass_at_{k}``.

    A k larger than some problem's sample count is left out.

    >>> pass_at_k_by_problem({"a": [True, False], "b": [False, False]}, ks=(1, 2, 5))
    {'pass_at_1': 0.25, 'pass_at_2': 0.5}
    """
    out: dict[str, float] = {}
    for k in ks:
        if not passed or any(len(v) < k for v in passed.values()):
            continue
        out[f"pass_at_{k}"] = sum(pass_at_k(len(v), sum(map(bool, v)), k) for v in passed.values()) / len(
            passed
        )
    return out


def metrics_of(outcome: Outcome | None) -> dict[str, float]:
    """Per-item evaluation metrics of one outcome (NaN where unscorable)."""
    if outcome is None:
        return dict.fromkeys(EVAL_METRICS, math.nan)
    return {
        metric: math.nan
        if outcome.rewards.get(component) is None
        else float(outcome.rewards[component] or 0.0)
        for metric, component in _FROM_COMPONENT.items()
    }


def evaluate(
    generator: Generator,
    samples: list[Sample],
    outcome_of: Callable[[Sample, str], Outcome | None],
    *,
    max_new_tokens: int,
    version: str,
) -> EvalResult:
    """Greedy completions through lm-eval, each scored by ``outcome_of`` (the task's sandbox; None
    for a sample naming no known problem); metrics and records as in the module docstring."""
    from mrbench.kit.lm_eval_bridge import run_generation_task

    outcomes: dict[str, Outcome | None] = {}

    def score_fn(sample: Sample, completion: str) -> dict[str, float]:
        outcomes[sample.id] = outcome = outcome_of(sample, completion)
        return metrics_of(outcome)

    run = run_generation_task(
        generator,
        samples,
        task_name=LM_EVAL_TASK,
        score_fn=score_fn,
        metric_names=EVAL_METRICS,
        max_new_tokens=max_new_tokens,
        version=version,
    )
    records: list[dict[str, Any]] = []
    for sample, completion in zip(samples, run.completions, strict=True):
        outcome = outcomes.get(sample.id)
        records.append(
            {
                "id": sample.id,
                "prompt": sample.prompt[-1]["content"],
                "completion": completion,
                "status": outcome.status if outcome else "unknown_problem",
                "detail": outcome.detail if outcome else "",
                "rewards": dict(outcome.rewards) if outcome else {},
            }
        )
    return EvalResult(metrics=dict(run.metrics), samples=records)
