"""Every registered task honours the Task contract, through the checks mrbench ships for plugins
(:mod:`mrbench.engine.contract`); the built-ins' bounded settings declare their Range."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import pytest

import mrbench.tasks as tasks
from mrbench.core.contracts import EvalResult, RewardComponent, Sample, Task
from mrbench.core.errors import RegistryError, UserError
from mrbench.core.registry import Range
from mrbench.engine.contract import (
    TASK_CHECKS,
    ContractError,
    built_task,
    check_task,
    task_hooks,
    task_rewards,
    task_samples,
)


@pytest.fixture(params=tasks.TASKS.names())
def task(request: pytest.FixtureRequest) -> Task:
    with built_task(request.param) as built:
        yield built


@pytest.mark.parametrize("check", TASK_CHECKS, ids=lambda c: c.__name__)
def test_the_shipped_contract_checks(task: Task, check: Callable[[Task], None]) -> None:
    check(task)  # the checks a plugin runs on its own task (mrbench.engine.contract)


@pytest.mark.parametrize("name", tasks.TASKS.names())
def test_check_task_in_one_line(name: str) -> None:
    check_task(name)


def test_built_in_tasks_are_registered_under_their_name_with_read_only_defaults(task: Task) -> None:
    assert task.name in tasks.TASKS
    with pytest.raises(TypeError):
        task.train_defaults["steps"] = 1  # type: ignore[index]


class _Broken(Task):
    name, version, primary_metric, max_completion_tokens = "broken", "1", "score", 8
    train_defaults: ClassVar[Mapping[str, Any]] = {"stepz": 3}

    def train_samples(self) -> list[Sample]:
        return [Sample("a", [{"role": "user", "content": "hi"}])]

    def eval_samples(self) -> list[Sample]:
        return [Sample("a", [{"role": "user", "content": "hi"}])]

    def reward_components(self) -> list[RewardComponent]:
        return [RewardComponent("r", lambda prompts, completions, **_: [])]  # one score short

    def evaluate(self, generator: Any, samples: list[Sample] | None = None) -> EvalResult:
        return EvalResult({"score": 0.0}, [])


@pytest.mark.parametrize(
    ("check", "says"),
    [
        (task_hooks, "task 'broken': bad train_defaults: unknown train setting"),
        (task_samples, "task 'broken': train and eval samples share the ids ['a']"),
        (task_rewards, "task 'broken': reward component 'r': expected a list of 1 scores"),
    ],
)
def test_the_checks_say_what_does_not_fit(check: Callable[[Task], None], says: str) -> None:
    with pytest.raises(ContractError, match=re.escape(says)):
        check(_Broken())


def test_a_task_without_scoring_says_so() -> None:
    task = tasks.build_task("tool-calling")
    with pytest.raises(UserError, match="task 'tool-calling' cannot be scored with `mrbench score`"):
        Task.score_datasets(task)  # the default hook, which a task without scoring keeps


def test_the_base_class_defaults() -> None:
    assert dict(Task.train_defaults) == {} and Task.demos_keep_final_line is False
    assert Task.lower_is_better == frozenset()
    with pytest.raises(TypeError, match="abstract"):
        Task()  # type: ignore[abstract]


BOUNDED = {
    "tool-calling": {"n_train", "n_eval", "seed", "max_completion_tokens"},
    "code-generation": {"seed", "timeout_s", "max_completion_tokens", "n_sampled"},
    "agent-security": {
        "seed",
        "n_train",
        "n_eval",
        "max_turns",
        "format_weight",
        "max_completion_tokens",
        "clean_share",
    },
}
"""The settings of the built-in tasks that declare a Range (code-generation's n_train and n_eval
may also be None, so their range is checked by the factory alone)."""


def test_bounded_settings_declare_their_range() -> None:
    for name, keys in BOUNDED.items():
        entry = tasks.TASKS.get(name)
        assert set(entry.ranges) == keys, name
        assert all(
            isinstance(bound, Range) and bound.admits(entry.params[k]) for k, bound in entry.ranges.items()
        )


def test_every_numeric_setting_of_a_built_in_task_has_an_upper_bound() -> None:
    # Issue 36, item 2: n_eval=99999999999 never finished, n_eval=20000 failed deep in the run,
    # a seed >= 2**32 failed in numpy. Every count and seed is bounded where it is declared.
    for name in BOUNDED:
        entry = tasks.TASKS.get(name)
        numeric = {
            k for k, v in entry.params.items() if isinstance(v, int | float) and not isinstance(v, bool)
        }
        assert numeric <= set(entry.ranges), (name, numeric - set(entry.ranges))
        unbounded = [k for k, bound in entry.ranges.items() if bound.le is None and bound.lt is None]
        assert unbounded == [], name
    for value, must in ((99_999_999_999, ">= 1 and <= 2000"), (20_000, ">= 1 and <= 2000")):
        with pytest.raises(
            RegistryError, match=f"bad value {value} for parameter 'n_eval' .*: must be {must}"
        ):
            tasks.build_task("tool-calling", {"n_eval": value})
    with pytest.raises(RegistryError, match="'seed' of 'tool-calling': must be >= 0 and <= 4294967295"):
        tasks.build_task("tool-calling", {"seed": 2**32})


@pytest.mark.parametrize(
    ("name", "key", "value", "must"),
    [
        ("tool-calling", "n_eval", 0, ">= 1 and <= 2000"),
        ("tool-calling", "max_completion_tokens", -1, ">= 0 and <= 131072"),
        ("code-generation", "timeout_s", 600.5, "> 0 and <= 600"),
        ("code-generation", "n_sampled", 0, ">= 1 and <= 1024"),
        ("agent-security", "max_turns", -2, ">= 0 and <= 64"),
        ("agent-security", "clean_share", 1.5, "<= 1"),
        ("agent-security", "format_weight", float("nan"), ">= 0 and <= 1000"),
    ],
)
def test_a_value_out_of_range_is_refused_alike_by_name_and_directly(
    name: str, key: str, value: object, must: str
) -> None:
    message = f"bad value {value!r} for parameter {key!r} of {name!r}: must be {must}"
    with pytest.raises(RegistryError) as by_name:
        tasks.build_task(name, {key: value})
    with pytest.raises(RegistryError) as direct:
        tasks.TASKS.get(name).obj(**{key: value})
    assert str(by_name.value) == str(direct.value) == message


def test_an_integer_setting_takes_integers_only() -> None:
    for name in BOUNDED:
        with pytest.raises(RegistryError, match=f"'seed' of '{name}': must be an integer"):
            tasks.build_task(name, {"seed": 1.5})
    with pytest.raises(RegistryError, match="'n_train' of 'tool-calling': must be an integer"):
        tasks.build_task("tool-calling", {"n_train": 2.5})


def test_a_bad_setting_exits_2_naming_the_task_and_the_setting(
    mrbench_cli: Callable[..., tuple[int, str, str]],
) -> None:
    code, _, err = mrbench_cli("run", "--task", "code-generation", "--task-param", "n_sampled=0")
    assert code == 2 and "Traceback" not in err
    assert "bad value 0 for parameter 'n_sampled' of 'code-generation': must be >= 1" in err
