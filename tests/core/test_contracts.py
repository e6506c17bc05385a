"""The task contract asks only for what every task needs."""

from __future__ import annotations

import pytest

from mrbench.core.contracts import EvalResult, Generator, RewardComponent, Sample, Task


class _Minimal(Task):
    name = "minimal"
    version = "0"
    primary_metric = "score"
    max_completion_tokens = 8

    def train_samples(self) -> list[Sample]:
        return []

    def eval_samples(self) -> list[Sample]:
        return []

    def reward_components(self) -> list[RewardComponent]:
        return []

    def evaluate(self, generator: Generator, samples: list[Sample] | None = None) -> EvalResult:
        return EvalResult({})


def test_a_task_without_demonstrations_is_complete() -> None:
    # Only the built-in tasks warm-start the tiny models, so a plugin task needs no demonstrations.
    task = _Minimal()
    assert task.demonstrations(4, seed=0) == []
    assert task.training_hooks() == {}
    assert task.completion_budget(32) == 32


def test_the_required_members_stay_required() -> None:
    class _NoEvaluate(Task):
        name, version, primary_metric, max_completion_tokens = "x", "0", "s", 8

        def train_samples(self) -> list[Sample]:
            return []

        def eval_samples(self) -> list[Sample]:
            return []

        def reward_components(self) -> list[RewardComponent]:
            return []

    with pytest.raises(TypeError, match="evaluate"):
        _NoEvaluate()  # type: ignore[abstract]
