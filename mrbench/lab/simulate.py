"""The lab's training loop: multi-reward policy gradient over candidate responses, seeds batched.

One run trains, for every method, one policy per seed from the uniform start, all seeds at
once: each step samples G responses per prompt, draws their K-component rewards, computes
advantages with the registered estimator (:mod:`mrbench.lab.estimators`), and takes a policy-
gradient step (:mod:`mrbench.lab.policy`). The expected reward of every component under the
policy is computed exactly from the reward table after every step, not estimated from samples.

Shapes: ``S`` seeds, ``P`` prompts, ``B = S·P`` groups (seed-major), ``N`` responses, ``G``
rollouts per group, ``K`` components, ``T`` steps.

Speed: work is batched over seeds and prompts and the policy gradient is analytic, so a step is
a fixed number of small tensor operations whatever S is. Tensors this small lose far more to
thread hand-offs than they gain from a second thread (measured ~20× slower with 2 threads on a
loaded 2-core machine), so :func:`simulate` runs with one torch thread and restores the setting.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from concurrent.futures import Executor, ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing import get_all_start_methods, get_context

import numpy as np
import torch
from torch import Tensor

from mrbench.lab.estimators import Estimator, load_estimator
from mrbench.lab.generator import ComponentSpec, Instance, NoiseStream, draw_instance, sample_rewards
from mrbench.lab.metrics import seed_scores, step_diagnostics
from mrbench.lab.policy import SoftmaxPolicy, sample_actions, update
from mrbench.lab.scenarios import Scenario

REFERENCE_METHOD = "grpo"
"""Sign disagreement is measured against this method's advantages for the same rewards."""
DIAGNOSTICS = ("sign_disagree", "resolution", "max_abs_adv")
"""The per-step diagnostics recorded (:func:`mrbench.lab.metrics.step_diagnostics`)."""


@dataclass(frozen=True)
class MethodRun:
    """One method's training on every seed.

    Attributes:
        components: ``[S, T+1, K]`` expected reward of each component under the policy (reward
            units, mean over prompts), before training and after each step.
        diagnostics: ``sign_disagree``, ``resolution``, ``max_abs_adv``: ``[T, S]`` per step.
        scores: per-seed scores ``{name: [S]}`` (:func:`mrbench.lab.metrics.seed_scores`).
        batch_coupled: the method was called once per seed (see :mod:`mrbench.lab.estimators`).
    """

    method: str
    params: dict
    components: np.ndarray
    diagnostics: dict[str, np.ndarray]
    scores: dict[str, np.ndarray]
    batch_coupled: bool
    wall_s: float


@dataclass(frozen=True)
class LabResult:
    """Every method's run on one scenario and one set of seeds."""

    scenario: Scenario
    seeds: tuple[int, ...]
    instance: Instance
    runs: dict[str, MethodRun]

    @property
    def methods(self) -> list[str]:
        """Method names in run order."""
        return list(self.runs)


@contextmanager
def single_thread() -> Iterator[None]:
    """Run torch ops on one thread without autograd (see the module docstring), restoring the
    previous thread count."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with torch.inference_mode():  # no autograd bookkeeping: ~15 % less per operation
            yield
    finally:
        torch.set_num_threads(before)


def _expected_components(probs: Tensor, instance: Instance, seeds: int) -> Tensor:
    """E_π[r_k] ``[S, K]``: Σ_n π_n E[r_k | n], mean over the prompts."""
    per_group = torch.bmm(probs.unsqueeze(1), instance.expected).squeeze(1)  # [B, K]
    return per_group.reshape(seeds, -1, per_group.shape[-1]).mean(dim=1)


def _loop(
    scenario: Scenario,
    instance: Instance,
    spec: ComponentSpec,
    estimator: Estimator | _Joint,
    reference: Estimator,
    copies: int = 1,
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Train one policy per seed of ``instance`` with ``estimator``: expected rewards
    ``[S, T+1, K]`` and the per-step diagnostics (each ``[T, S]``). ``copies``: the instance's
    seeds are that many copies of the same seeds (their random numbers are drawn once)."""
    s, t_steps = len(instance.seeds), scenario.steps
    policy = SoftmaxPolicy(
        scenario.policy,
        seeds=s,
        prompts=scenario.prompts,
        responses=scenario.responses,
        features=instance.features,
        lr=scenario.lr,
    )
    stream = NoiseStream(scenario, instance.seeds[: s // copies], copies)
    weights = spec.weight
    curves = torch.empty(t_steps + 1, s, scenario.k, dtype=torch.float64)
    per_step = {name: torch.empty(t_steps, s, dtype=torch.float64) for name in DIAGNOSTICS}
    probs = policy.probs()
    curves[0] = _expected_components(probs, instance, s)
    for t in range(t_steps):
        noise = stream.step()
        actions = sample_actions(probs, noise.uniform)
        rewards = sample_rewards(instance, actions, noise, spec)
        adv = estimator(rewards, weights, s).to(torch.float64)
        ref = adv if reference.name == estimator.name and reference.params == estimator.params else None
        if ref is None:
            ref = reference(rewards, weights, s).to(torch.float64)
        for name, values in step_diagnostics(rewards, adv, ref, s).items():
            per_step[name][t] = values
        update(policy, actions, adv, probs, epochs=scenario.ppo_epochs, clip=scenario.ppo_clip)
        probs = policy.probs()
        curves[t + 1] = _expected_components(probs, instance, s)
    return curves.transpose(0, 1).numpy(), {name: values.numpy() for name, values in per_step.items()}


def train(
    scenario: Scenario,
    instance: Instance,
    spec: ComponentSpec,
    estimator: Estimator,
    reference: Estimator,
) -> MethodRun:
    """Train one policy per seed with ``estimator``; see :class:`MethodRun` for what is recorded."""
    start = time.perf_counter()
    components, diagnostics = _loop(scenario, instance, spec, estimator, reference)
    scores = _scores(scenario, instance, spec, components, diagnostics)
    return MethodRun(
        estimator.name,
        dict(estimator.params),
        components,
        diagnostics,
        scores,
        estimator.batch_coupled,
        time.perf_counter() - start,
    )


@dataclass(frozen=True)
class _Joint:
    """Several methods as one estimator over ``M`` copies of the seeds (method-major): each
    method's copy ``[S·P, G, K]`` of a step's rewards goes to that method alone, with S seeds."""

    estimators: tuple[Estimator, ...]
    seeds: int
    name: str = "(every method at once)"
    params: tuple = ()

    def __call__(self, rewards: Tensor, weights: Tensor, seeds: int) -> Tensor:
        """Advantages ``[M·S·P, G]`` of ``rewards [M·S·P, G, K]``."""
        parts = rewards.chunk(len(self.estimators))
        return torch.cat(
            [est(part, weights, self.seeds) for est, part in zip(self.estimators, parts, strict=True)]
        )


def train_together(
    scenario: Scenario,
    seeds: tuple[int, ...],
    spec: ComponentSpec,
    estimators: Sequence[Estimator],
    reference: Estimator,
) -> dict[str, MethodRun]:
    """:func:`train` for every estimator in one loop: the seeds are repeated once per method
    (each copy draws the seed's own instance and random numbers, so every method still sees the
    same numbers), and a step samples, scores, diagnoses and updates all methods' policies in one
    batch, calling each method on its own copy. The same results as one :func:`train` per method
    (tests/lab/test_simulate.py) with ~M times fewer tensor operations per step."""
    if not estimators:
        return {}
    start = time.perf_counter()
    m, s = len(estimators), len(seeds)
    tiled = draw_instance(scenario, seeds * m, spec)
    components, diagnostics = _loop(scenario, tiled, spec, _Joint(tuple(estimators), s), reference, m)
    instance = draw_instance(scenario, seeds, spec)
    wall = (time.perf_counter() - start) / m  # the methods share the loop: an equal share each
    runs = {}
    for i, est in enumerate(estimators):
        rows = slice(i * s, (i + 1) * s)
        comp = np.ascontiguousarray(components[rows])
        diag = {name: np.ascontiguousarray(values[:, rows]) for name, values in diagnostics.items()}
        scores = _scores(scenario, instance, spec, comp, diag)
        runs[est.name] = MethodRun(est.name, dict(est.params), comp, diag, scores, est.batch_coupled, wall)
    return runs


def _scores(
    scenario: Scenario,
    instance: Instance,
    spec: ComponentSpec,
    components: np.ndarray,
    diagnostics: dict[str, np.ndarray],
) -> dict[str, np.ndarray]:
    """Per-seed scores (:func:`mrbench.lab.metrics.seed_scores`) of ``components`` ``[S, T+1, K]``
    and ``diagnostics`` (each ``[T, S]``) against the instance's best and worst responses."""
    return seed_scores(
        components,
        spec.weight.numpy(),
        instance.best.numpy(),
        instance.worst.numpy(),
        instance.best_total.numpy(),
        instance.worst_total.numpy(),
        diagnostics,
        scenario.components,
    )


def default_methods() -> list[str]:
    """Every usable registered method: built-ins and installed plugins (broken plugins left out)."""
    from mrbench.methods import METHODS

    entries, _problems = METHODS.catalog()
    return [e.name for e in entries]


def load_estimators(scenario: Scenario, methods: Sequence[str] | None) -> list[Estimator]:
    """The estimators of ``methods`` (default: every registered method) with the scenario's
    hyper-parameters; unknown names or parameters raise the registry's user errors."""
    names = list(methods) if methods is not None else default_methods()
    weights = ComponentSpec.of(scenario).weight
    return [load_estimator(name, weights, scenario.method_params.get(name)) for name in names]


def _train_named(scenario: Scenario, seeds: tuple[int, ...], name: str) -> MethodRun:
    """Draw the instance and train one method (the unit of work sent to an executor's process)."""
    spec = ComponentSpec.of(scenario)
    estimator = load_estimator(name, spec.weight, scenario.method_params.get(name))
    reference = load_estimator(REFERENCE_METHOD, spec.weight, scenario.method_params.get(REFERENCE_METHOD))
    with single_thread():
        instance = draw_instance(scenario, seeds, spec)
        return train(scenario, instance, spec, estimator, reference)


def process_pool(workers: int) -> ProcessPoolExecutor:
    """A pool of ``workers`` processes for :func:`simulate`: forked where the platform can (no
    start-up cost: the children inherit the imported modules; create it before any torch work),
    spawned elsewhere."""
    method = "fork" if "fork" in get_all_start_methods() else "spawn"
    return ProcessPoolExecutor(max_workers=workers, mp_context=get_context(method))


def simulate(
    scenario: Scenario,
    methods: Sequence[str] | None = None,
    seeds: Sequence[int] = range(50),
    *,
    executor: Executor | None = None,
) -> LabResult:
    """Run every method of ``methods`` (default: every registered one) on ``scenario`` for ``seeds``.

    Unknown method names or hyper-parameters raise the registry's user errors before anything
    runs. With an ``executor`` (a process pool: one process per core), each method trains in a
    worker (batch-coupled ones first, they take longest); a worker resolves method names itself,
    so a method registered only at run time in this process must be given as ``module:function``.
    Results are identical either way (every random number is drawn per seed).
    """
    seeds = tuple(int(x) for x in seeds)
    if not seeds:
        raise ValueError("simulate needs at least one seed")
    spec = ComponentSpec.of(scenario)
    estimators = load_estimators(scenario, methods)
    reference = load_estimator(REFERENCE_METHOD, spec.weight, scenario.method_params.get(REFERENCE_METHOD))
    with single_thread():
        instance = draw_instance(scenario, seeds, spec)
        if executor is None:
            runs = train_together(scenario, seeds, spec, estimators, reference)
        else:
            ordered = sorted(estimators, key=lambda est: not est.batch_coupled)
            futures = {est.name: executor.submit(_train_named, scenario, seeds, est.name) for est in ordered}
            runs = {est.name: futures[est.name].result() for est in estimators}
    return LabResult(scenario, seeds, instance, runs)
