"""Every registered task honours the Task contract: required members, typed hooks and their defaults."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

import mrbench.tasks as tasks
from mrbench.core.contracts import Task
from mrbench.core.errors import UserError
from mrbench.engine.config import TrainSettings


@pytest.fixture(params=tasks.TASKS.names())
def task(request: pytest.FixtureRequest) -> Task:
    built = tasks.build_task(request.param)
    yield built
    built.close()


def test_required_members(task: Task) -> None:
    assert isinstance(task, Task) and task.name in tasks.TASKS
    assert isinstance(task.version, str) and task.version
    assert isinstance(task.primary_metric, str) and task.primary_metric
    assert isinstance(task.max_completion_tokens, int) and task.max_completion_tokens > 0
    assert isinstance(task.lower_is_better, frozenset)


def test_hooks_are_typed_and_the_defaults_read_only(task: Task) -> None:
    assert isinstance(task.train_defaults, Mapping)
    TrainSettings.from_overrides(dict(task.train_defaults))  # names real settings with valid values
    with pytest.raises(TypeError):
        task.train_defaults["steps"] = 1  # type: ignore[index]
    assert isinstance(task.demos_keep_final_line, bool)
    assert isinstance(task.training_hooks(), dict)


def test_a_task_without_scoring_says_so() -> None:
    task = tasks.build_task("tool-calling")
    with pytest.raises(UserError, match="task 'tool-calling' cannot be scored with `mrbench score`"):
        Task.score_datasets(task)  # the default hook, which a task without scoring keeps


def test_the_base_class_defaults() -> None:
    assert dict(Task.train_defaults) == {} and Task.demos_keep_final_line is False
    assert Task.lower_is_better == frozenset()
    with pytest.raises(TypeError, match="abstract"):
        Task()  # type: ignore[abstract]
