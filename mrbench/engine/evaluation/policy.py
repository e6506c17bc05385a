"""A policy evaluated as every cell evaluates it: one path for a cell's evaluations, extra
evaluations and ``mrbench eval``.

A model is prepared (a preset built or converted once), seeded, and loaded once, in float32 — the
master weights, whatever the ``precision`` (:class:`~mrbench.engine.models.catalog.Precision`,
resolved once from the train setting) — and evaluated greedily on the task's first ``limit`` eval
samples under that precision's autocast. The pre-training evaluation of a (model, task settings,
eval split, precision) is read from :mod:`~mrbench.engine.evaluation.eval_cache` when any process
computed it, else computed under the cache's lock and stored.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from mrbench.core.contracts import EvalResult, Task
from mrbench.engine.evaluation import eval_cache
from mrbench.engine.models.catalog import Precision
from mrbench.engine.processes.allocator import keep_freed_blocks
from mrbench.engine.processes.threads import use_threads_for


@dataclass(frozen=True)
class LoadedPolicy:
    """A model loaded for evaluation (and a cell's training): its prepared ``path``, ``model``
    (float32), ``tokenizer``, and the seconds preparing (building, converting) and loading took."""

    path: str
    model: Any
    tokenizer: Any
    prepare_s: float
    load_s: float


def load_policy(path: str, *, dtype: str | None = None) -> tuple[Any, Any]:
    """``(model, tokenizer)`` of a loadable ``path`` (folder or hub id); the model on the GPU if any,
    in ``dtype`` (see :func:`mrbench.engine.models.catalog.load_model`)."""
    import torch

    from mrbench.engine.models.catalog import load_model, load_tokenizer

    tokenizer = load_tokenizer(path)
    model = load_model(path, dtype=dtype)
    if torch.cuda.is_available():
        model = model.to("cuda")
    return model, tokenizer


def load_for_evaluation(model: str, seed: int) -> LoadedPolicy:
    """Prepare ``model`` (:func:`~mrbench.engine.models.catalog.prepare_model`), seed every generator
    with ``seed`` and load it in float32, as a cell loads its policy."""
    from transformers import set_seed

    from mrbench.engine.models.catalog import prepare_model

    use_threads_for(model)  # before the model is built or loaded (engine.processes.threads)
    keep_freed_blocks()  # on the CPU: big blocks reused, not mapped anew (engine.processes.allocator)
    t0 = time.perf_counter()
    path = prepare_model(model)
    t1 = time.perf_counter()
    set_seed(seed)
    loaded, tokenizer = load_policy(path, dtype="float32")
    return LoadedPolicy(path, loaded, tokenizer, t1 - t0, time.perf_counter() - t1)


def evaluate_model(task: Task, model: Any, tokenizer: Any, limit: int) -> EvalResult:
    """The task's own evaluation of ``model`` with greedy decoding (first ``limit`` eval samples, 0 = all)."""
    from mrbench.engine.evaluation.generation import HFGenerator

    samples = task.eval_samples()
    if limit:
        samples = samples[:limit]
    return task.evaluate(HFGenerator(model, tokenizer), samples)


def evaluate_policy(
    task: Task, model: Any, tokenizer: Any, limit: int, precision: Precision, *, n_sampled: int = 1
) -> EvalResult:
    """:func:`evaluate_model` under ``precision``'s autocast, its metrics with
    pass@``n_sampled`` (:func:`with_pass_at_k`)."""
    with precision.autocast():
        result = evaluate_model(task, model, tokenizer, limit)
    return EvalResult(with_pass_at_k(result.metrics, result.samples, n_sampled), result.samples)


def cached_evaluation(
    key: str | None, compute: Callable[[], EvalResult], run_id: str
) -> tuple[EvalResult, str | None]:
    """``(result, run id it was cached from)``: the cache's entry for ``key`` when there is one
    (a process computing it now is waited for), else ``(compute(), None)``, stored under ``key`` as
    computed by run ``run_id``. ``key`` None: computed, not cached."""
    with eval_cache.computing(key):
        cached = eval_cache.read(key)
        if cached is not None:
            return EvalResult(metrics=cached.metrics, samples=cached.samples), cached.run_id
        result = compute()
        eval_cache.write(key, dict(result.metrics), result.samples, run_id)
    return result, None


def with_pass_at_k(metrics: Mapping[str, float], records: list[dict[str, Any]], k: int) -> dict[str, float]:
    """``metrics`` plus ``sampled_pass_at_<k>`` when the task did not report it and ``k`` > 1.

    Computed from the records' tallies of sampled completions (``{"sampled": {"n", "passed"}}``,
    code-generation's) with the unbiased estimator, averaged over the problems with at least ``k``
    samples; a sample the sandbox could not score counts as failed here.

    >>> with_pass_at_k({}, [{"sampled": {"n": 2, "passed": 1}}, {"sampled": {"n": 2, "passed": 0}}], 2)
    {'sampled_pass_at_2': 0.5}
    """
    from mrbench.tasks.code_generation.evaluation import pass_at_k

    name = f"sampled_pass_at_{k}"
    out = dict(metrics)
    tallies = [r["sampled"] for r in records if isinstance(r.get("sampled"), dict)]
    if k > 1 and name not in out and tallies:
        values = [pass_at_k(int(t["n"]), int(t["passed"]), k) for t in tallies if int(t["n"]) >= k]
        out[name] = sum(values) / len(values) if values else math.nan
    return out
