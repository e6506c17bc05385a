"""Evaluation for code generation: sampled and greedy pass@k, executable rate, efficiency.

:meth:`CodeGenerationTask.evaluate` scores two kinds of completions of every held-out problem in
the same sandbox as training:

**Sampled** (``n_sampled`` per problem, temperature 1, no top-k/top-p — the policy GRPO trains —
at a fixed seed, :mod:`.sampling`):

``sampled_pass_at_1``
    the primary metric: mean over problems of the fraction of samples that pass every test, the
    unbiased pass@1 estimate of Chen et al. (2021), i.e. the chance that one answer drawn from
    the policy is correct. It moves whenever training makes a correct answer more or less likely.
``sampled_pass_at_4``
    the unbiased pass@4 estimate (:func:`pass_at_k`) from the same samples (when ``n_sampled`` ≥ 4).

**Greedy** (one per problem, generated through lm-eval by ``mrbench.kit.lm_eval_bridge``: a custom
task over the local samples):

``pass_at_1``
    fraction of problems whose greedy completion passes every test (MLflow metric names cannot
    contain ``@``, hence ``pass_at_1`` for pass@1). Kept for comparison with other work, but a
    poor ranking metric for short runs: the argmax answer of a warm-started model rarely
    changes, so on the embedded set it stays at the warm start's value whatever the method.
``executable_rate``
    fraction whose program ran to completion or failed only on a test assertion.
``efficiency``
    mean efficiency reward (0 for failing programs).
``format_rate``, ``syntax_rate``, ``compile_rate``, ``ast_similarity``
    means of the other components.

Samples the sandbox could not score (a fault of the harness, not of the model) are left out of
the sampled metrics; greedy metrics are NaN for them. For pass@k from completions scored
elsewhere (e.g. with ``mrbench score --input``) use :func:`pass_at_k_by_problem`.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from mrbench.core.contracts import EvalResult, Generator, Sample
from mrbench.tasks.code_generation.rewards import Outcome

LM_EVAL_TASK = "mrbench_code_generation"
SAMPLED_KS: tuple[int, ...] = (1, 4)
"""k of the sampled pass@k metrics (each reported when ``n_sampled`` >= k)."""
SAMPLED_METRICS: tuple[str, ...] = tuple(f"sampled_pass_at_{k}" for k in SAMPLED_KS)
SAMPLING_TEMPERATURE = 1.0
"""Temperature of the sampled completions: the default of the GRPO rollouts."""
EVAL_METRICS: tuple[str, ...] = (  # per greedy completion, aggregated by lm-eval
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


def sampled_pass_at_k(passed: Mapping[str, Sequence[bool | None]], ks: Iterable[int]) -> dict[str, float]:
    """Mean unbiased pass@k over problems as ``sampled_pass_at_{k}``, for the sampled metrics.

    ``passed``: problem id → pass/fail of each sample, None for a sample the sandbox could not
    score (left out). A problem with fewer than k scorable samples is left out of pass@k; NaN
    when none has k.

    >>> sampled_pass_at_k({"a": [True, False, None], "b": [False, False, False]}, ks=(1, 2))
    {'sampled_pass_at_1': 0.25, 'sampled_pass_at_2': 0.5}
    >>> sampled_pass_at_k({"a": [True, None]}, ks=(1, 2))
    {'sampled_pass_at_1': 1.0, 'sampled_pass_at_2': nan}
    """
    scored = [[bool(p) for p in v if p is not None] for v in passed.values()]
    out: dict[str, float] = {}
    for k in ks:
        values = [pass_at_k(len(v), sum(v), k) for v in scored if len(v) >= k]
        out[f"sampled_pass_at_{k}"] = sum(values) / len(values) if values else math.nan
    return out


def _passed(outcome: Outcome | None) -> bool | None:
    """Whether a sample passed every test; None when it could not be scored."""
    if outcome is None or outcome.rewards.get("accuracy") is None:
        return None
    return outcome.rewards["accuracy"] == 1.0


def sampled_metrics(outcomes: Mapping[str, Sequence[Outcome | None]]) -> dict[str, float]:
    """The sampled metrics (:data:`SAMPLED_METRICS` with k <= the samples per problem) of the
    outcomes of each problem's sampled completions (``problem id → outcomes``; None = unscorable)."""
    n = max((len(v) for v in outcomes.values()), default=0)
    passed = {pid: [_passed(o) for o in group] for pid, group in outcomes.items()}
    return sampled_pass_at_k(passed, [k for k in SAMPLED_KS if k <= n])


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


Scorer = Callable[[Sequence[tuple[Sample, str]]], list[Outcome | None]]
"""Outcomes of (sample, completion) pairs, in order, scored together (None: unknown problem)."""


def evaluate(
    generator: Generator,
    samples: list[Sample],
    outcomes_of: Scorer,
    *,
    max_new_tokens: int,
    version: str,
    n_sampled: int,
    seed: int,
) -> EvalResult:
    """Sampled and greedy completions of ``samples``, scored by ``outcomes_of`` (the task's
    sandbox); metrics as in the module docstring, one record per sample with its greedy
    completion and the tally of its sampled ones (``sampled``: n, passed, statuses)."""
    from mrbench.kit.lm_eval_bridge import run_generation_task
    from mrbench.tasks.code_generation.sampling import sample_completions

    outcomes: dict[str, Outcome | None] = {}

    def score_fn(sample: Sample, completion: str) -> dict[str, float]:
        outcomes[sample.id] = outcome = outcomes_of([(sample, completion)])[0]
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
    drawn = sample_completions(
        generator.model,
        generator.tokenizer,
        [s.prompt for s in samples],
        n=n_sampled,
        max_new_tokens=max_new_tokens,
        temperature=SAMPLING_TEMPERATURE,
        seed=seed,
    )
    scored = outcomes_of([(s, text) for s, texts in zip(samples, drawn, strict=True) for text in texts])
    by_sample = [scored[i * n_sampled : (i + 1) * n_sampled] for i in range(len(samples))]
    metrics = sampled_metrics({s.id: group for s, group in zip(samples, by_sample, strict=True)})
    metrics.update(run.metrics)
    records: list[dict[str, Any]] = []
    for sample, completion, group in zip(samples, run.completions, by_sample, strict=True):
        outcome = outcomes.get(sample.id)
        records.append(
            {
                "id": sample.id,
                "prompt": sample.prompt[-1]["content"],
                "completion": completion,
                "status": outcome.status if outcome else "unknown_problem",
                "detail": outcome.detail if outcome else "",
                "rewards": dict(outcome.rewards) if outcome else {},
                "sampled": {
                    "n": len(group),
                    "passed": sum(_passed(o) is True for o in group),
                    "statuses": dict(Counter(o.status if o else "unknown_problem" for o in group)),
                },
            }
        )
    return EvalResult(metrics=metrics, samples=records)
