"""The task contract asks only for what every task needs."""

from __future__ import annotations

from fakes import EmptyTask

from mrbench.core.contracts import Task


def test_a_task_without_demonstrations_is_complete() -> None:
    # Only the built-in tasks warm-start the tiny models, so a plugin task needs no demonstrations.
    task = EmptyTask()
    assert task.demonstrations(4, seed=0) == []
    assert task.training_hooks() == {}
    assert task.completion_budget(32) == 32


def test_the_required_members_are_exactly_what_every_task_needs() -> None:
    assert Task.__abstractmethods__ == {"train_samples", "eval_samples", "reward_components", "evaluate"}
