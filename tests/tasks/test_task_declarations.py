"""A task declares its evaluation data (``eval_datasets``) and its Pareto axes (``pareto_axes``) on
its class; the harness reads them from the class its factory's return annotation names, without
building the task (:func:`mrbench.tasks.task_class`): ``mrbench eval --dataset``, a sweep's extra
evaluations and the report's Pareto figure. A task that declares neither gets the defaults."""

from __future__ import annotations

import re
from typing import Any, ClassVar

import pytest

import mrbench
import mrbench.tasks as tasks
from mrbench.core.contracts import DatasetSetting, EvalResult, RewardComponent, Sample, Task
from mrbench.core.errors import UserError
from mrbench.engine.contract import ContractError, check_task, task_declarations
from mrbench.engine.evaluation.evaluate import EvalSpec, task_settings
from mrbench.engine.evaluation.extra_evals import extra_eval_spec
from mrbench.reporting.figures import pareto_axes
from mrbench.tasks.code_generation import task as code_generation
from mrbench.tasks.tool_calling import task as tool_calling


def _zeros(prompts: list[Any], completions: list[Any], **columns: Any) -> list[float | None]:
    return [0.0 for _ in completions]


class Plain(Task):
    """A plugin task that declares neither: the defaults."""

    name, version, primary_metric, max_completion_tokens = "plain", "1", "score", 8
    built = 0

    def __init__(self, dataset: str = "a") -> None:
        type(self).built += 1
        self.samples = [Sample(f"{dataset}{i}", [{"role": "user", "content": str(i)}]) for i in range(4)]

    def train_samples(self) -> list[Sample]:
        return self.samples[:2]

    def eval_samples(self) -> list[Sample]:
        return self.samples[2:]

    def reward_components(self) -> list[RewardComponent]:
        return [RewardComponent(n, _zeros) for n in ("first", "second", "third")]

    def evaluate(self, generator: Any, samples: list[Sample] | None = None) -> EvalResult:
        return EvalResult({"score": 0.0}, [])


class Declared(Plain):
    """A plugin task with its own evaluation data (the ``split`` setting, a budget per split) and axes."""

    name = "declared"
    eval_datasets: ClassVar[DatasetSetting] = DatasetSetting("split", ("small", "large"), {"large": 32})
    pareto_axes: ClassVar[tuple[str, str]] = ("third", "first")


def plain(*, dataset: str = "a") -> Plain:
    return Plain(dataset)


def declared(*, split: str = "small", max_completion_tokens: int = 8, n: int = 4) -> Declared:
    return Declared(split)


def unannotated(*, split: str = "small"):  # the point: no return annotation
    return Declared(split)


def as_base(*, split: str = "small") -> Task:
    return Declared(split)


def without_split(*, n: int = 4) -> Declared:
    return Declared()


def without_budget(*, split: str = "small") -> Declared:
    return Declared(split)


@pytest.fixture
def registered() -> None:
    """The tasks above registered as a plugin's (``tests/conftest.py`` unregisters them after)."""
    for name, factory in (("plain", plain), ("declared", declared), ("unannotated", unannotated)):
        tasks.register_task(name)(factory)
    tasks.register_task("as-base")(as_base)
    tasks.register_task("without-split")(without_split)
    tasks.register_task("without-budget")(without_budget)


OLD_PARETO_AXES = {
    "code-generation": ("accuracy", "efficiency"),
    "agent-security": ("utility", "safety"),
    "tool-calling": ("values", "format"),
}
"""``reporting/figures.py``'s table before the tasks declared their axes."""


def test_the_built_in_tasks_declare_what_the_engine_tables_held() -> None:
    from mrbench.tasks.agent_security import dataset as agent_security_data

    assert {name: tasks.task_class(name).pareto_axes for name in OLD_PARETO_AXES} == OLD_PARETO_AXES
    assert tasks.task_class("tool-calling").eval_datasets == DatasetSetting("dataset", tool_calling.DATASETS)
    assert tasks.task_class("code-generation").eval_datasets == DatasetSetting(
        "eval_dataset", code_generation.DATASETS, code_generation.DEFAULT_MAX_COMPLETION_TOKENS
    )
    assert tasks.task_class("agent-security").eval_datasets == DatasetSetting(
        "dataset", agent_security_data.DATASETS
    )
    assert tasks.task_class("tool-calling") is tool_calling.ToolCallingTask


def test_the_defaults_and_the_public_name() -> None:
    assert Task.eval_datasets == DatasetSetting("dataset") and Task.pareto_axes is None
    assert mrbench.DatasetSetting is DatasetSetting is tasks.DatasetSetting
    data = DatasetSetting("split", ["a", "b"], {"b": 3})
    assert data.choices == ("a", "b") and dict(data.budgets) == {"b": 3}
    with pytest.raises(TypeError):
        data.budgets["a"] = 1  # type: ignore[index]


def test_task_class_reads_the_factorys_return_annotation_without_building(registered) -> None:
    Plain.built = Declared.built = 0
    assert tasks.task_class("declared") is Declared
    assert tasks.task_class(f"{__name__}:declared") is Declared  # a module:attr name alike
    assert tasks.task_class("plain") is Plain
    assert tasks.task_class("unannotated") is Task  # nothing to read: the defaults
    assert tasks.task_class("as-base") is Task
    assert Plain.built == Declared.built == 0  # nothing built


def test_a_plugin_task_without_declarations_gets_the_defaults(registered) -> None:
    _, settings, dataset = task_settings(EvalSpec("tiny", "plain", dataset="b"))
    assert settings == {"dataset": "b"} and dataset == "b"  # any value; the factory checks it
    assert extra_eval_spec("plain", "c", {"dataset": "b"}).task_params == {}
    assert pareto_axes("plain", ["first", "second", "third"]) == ("first", "second")


def test_a_plugin_tasks_declared_eval_data_is_used(registered) -> None:
    _, settings, dataset = task_settings(EvalSpec("tiny", "declared", dataset="large"))
    assert settings == {"split": "large", "max_completion_tokens": 32, "n": 4} and dataset == "large"
    _, settings, _ = task_settings(EvalSpec("tiny", "declared", dataset="small"))
    assert settings["max_completion_tokens"] == 8  # no budget declared for it: the default
    spec = EvalSpec("tiny", "declared", dataset="large", task_params={"max_completion_tokens": "16"})
    assert task_settings(spec)[1]["max_completion_tokens"] == 16  # a given budget stays
    with pytest.raises(
        UserError, match="unknown dataset 'huge' for task 'declared'; choose from small, large"
    ):
        task_settings(EvalSpec("tiny", "declared", dataset="huge"))
    with pytest.raises(UserError, match="--dataset 'x': task 'unannotated' has no dataset setting"):
        task_settings(EvalSpec("tiny", "unannotated", dataset="x"))  # the default setting, absent
    extra = extra_eval_spec("declared", "large", {"split": "small", "n": 2})
    assert extra.task_params == {"n": 2} and extra.dataset == "large"


def test_a_plugin_tasks_declared_pareto_axes_are_plotted(registered) -> None:
    assert pareto_axes("declared", ["first", "second", "third"]) == ("third", "first")
    assert pareto_axes("declared", ["first", "second"]) == ("first", "second")  # a run lacks one
    assert pareto_axes("not-installed-here", ["first", "second"]) == ("first", "second")
    assert pareto_axes("no_such_module_xyz:factory", ["first", "second"]) == ("first", "second")


def test_the_contract_checks_the_declarations(registered) -> None:
    check_task("declared")
    check_task(f"{__name__}:declared", {"split": "large"})
    message = "it declares eval_datasets = DatasetSetting(setting='split'"
    with pytest.raises(ContractError, match=re.escape(message)) as info:
        check_task("unannotated")
    assert "annotate the factory with its class (def factory(...) -> Declared)" in str(info.value)
    with pytest.raises(ContractError, match="eval_datasets names the setting 'split', which it lacks"):
        check_task("without-split")
    with pytest.raises(ContractError, match="eval_datasets has budgets, but no max_completion_tokens"):
        check_task("without-budget")

    class Typo(Plain):
        pareto_axes = ("thrid", "first")

    with pytest.raises(ContractError, match="pareto_axes must be None or two different reward components"):
        task_declarations(Typo())

    class NoBudget(Plain):
        eval_datasets = DatasetSetting("dataset", ("a",), {"a": 0})

    with pytest.raises(ContractError, match=re.escape("eval_datasets.budgets['a'] must be a positive")):
        task_declarations(NoBudget())
