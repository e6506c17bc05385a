"""The plugin contract checks, shipped: run them on your own task or estimator from your test suite.

::

    from mrbench.engine.contract import check_method, check_task


    def test_my_plugins_keep_the_contract() -> None:
        check_task("my_pkg.task:greeting")  # or its registered / entry-point name
        check_task("my_pkg.task:greeting", {"n": 8})  # with settings
        check_method("my_pkg.adv:centred")

Each check raises :class:`ContractError` (an ``AssertionError``, so pytest shows it as a failed
test) saying what does not fit, naming the plugin. :data:`TASK_CHECKS` and :data:`METHOD_CHECKS`
are the single checks, to parametrize a test over one check at a time::

    @pytest.mark.parametrize("check", TASK_CHECKS, ids=lambda c: c.__name__)
    def test_greeting(check):
        with built_task("greeting") as task:
            check(task)

mrbench's own tests run the same checks over every built-in task and method; these are the rules
of ``docs/adding-a-task.md`` and ``docs/adding-a-method.md`` that a program can check without a
model. The module lives in the engine because a task's ``train_defaults`` are checked against the
engine's :class:`~mrbench.engine.config.TrainSettings`.
"""

from __future__ import annotations

import contextlib
import inspect
import math
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from mrbench.core.contracts import DatasetSetting, RewardComponent, Sample, Task
from mrbench.core.errors import UserError
from mrbench.core.registry import Entry, path_of

__all__ = [
    "METHOD_CHECKS",
    "TASK_CHECKS",
    "ContractError",
    "built_task",
    "check_method",
    "check_task",
    "method_entry",
]

SCALAR = (int, float, bool, str, type(None))
"""The types a hyper-parameter's or a task setting's default may have (they become MLflow params)."""


class ContractError(AssertionError):
    """A task or an estimator that does not keep the plugin contract; the message says what."""


def _fail(owner: str, text: str) -> ContractError:
    return ContractError(f"{owner}: {text}")


def _name(plugin: str | Callable[..., Any]) -> str:
    """A registry name from a name or a function/factory (its ``module:qualname`` path)."""
    return plugin if isinstance(plugin, str) else path_of(plugin)


# ----------------------------------------------------------------------------------------- tasks


@contextlib.contextmanager
def built_task(task: str | Callable[..., Any], params: Mapping[str, Any] | None = None) -> Iterator[Task]:
    """The task built as a run builds it (name, entry point or ``module:factory``), closed after."""
    import mrbench.tasks as tasks

    built = tasks.build_task(_name(task), dict(params or {}))
    try:
        yield built
    finally:
        built.close()


def task_members(task: Task) -> None:
    """A :class:`Task` with a name, a version, a primary metric and a positive completion budget."""
    owner = f"task {getattr(task, 'name', type(task).__name__)!r}"
    if not isinstance(task, Task):
        raise _fail(owner, f"the factory returned a {type(task).__name__}, not a mrbench.Task subclass")
    for attr in ("name", "version", "primary_metric"):
        value = getattr(task, attr, None)
        if not isinstance(value, str) or not value:
            raise _fail(owner, f"{attr} must be a non-empty string, got {value!r}")
    budget = getattr(task, "max_completion_tokens", None)
    if isinstance(budget, bool) or not isinstance(budget, int) or budget <= 0:
        raise _fail(owner, f"max_completion_tokens must be a positive integer, got {budget!r}")
    if not isinstance(task.lower_is_better, frozenset) or not all(
        isinstance(m, str) for m in task.lower_is_better
    ):
        raise _fail(
            owner, f"lower_is_better must be a frozenset of metric names, got {task.lower_is_better!r}"
        )


def task_hooks(task: Task) -> None:
    """``train_defaults`` names real train settings with valid values; the hooks return their types."""
    from mrbench.engine.config import TrainSettings

    owner = f"task {task.name!r}"
    if not isinstance(task.train_defaults, Mapping):
        raise _fail(owner, f"train_defaults must be a mapping, got {type(task.train_defaults).__name__}")
    try:
        TrainSettings.from_overrides(dict(task.train_defaults))
    except UserError as exc:
        raise _fail(owner, f"bad train_defaults: {exc}") from None
    if not isinstance(task.demos_keep_final_line, bool):
        raise _fail(owner, "demos_keep_final_line must be a bool")
    hooks = task.training_hooks()
    if not isinstance(hooks, dict):
        raise _fail(owner, f"training_hooks() must return a dict, got {type(hooks).__name__}")


def _check_samples(owner: str, which: str, samples: Any) -> list[str]:
    if not isinstance(samples, list) or not all(isinstance(s, Sample) for s in samples):
        raise _fail(owner, f"{which}() must return a list of mrbench.Sample")
    for sample in samples:
        prompt = sample.prompt
        if not isinstance(prompt, list) or not all(isinstance(m, Mapping) and "role" in m for m in prompt):
            raise _fail(owner, f"sample {sample.id!r}: prompt must be a list of chat messages")
    ids = [s.id for s in samples]
    repeated = sorted({i for i in ids if ids.count(i) > 1})
    if repeated:
        raise _fail(owner, f"{which}() repeats the ids {repeated[:5]}")
    return ids


def task_samples(task: Task) -> None:
    """Training and evaluation samples: chat prompts, unique ids, disjoint, some to train on."""
    owner = f"task {task.name!r}"
    train = _check_samples(owner, "train_samples", task.train_samples())
    held_out = _check_samples(owner, "eval_samples", task.eval_samples())
    if not train:
        raise _fail(owner, "train_samples() is empty")
    shared = sorted(set(train) & set(held_out))
    if shared:
        raise _fail(owner, f"train and eval samples share the ids {shared[:5]}")


def task_rewards(task: Task) -> None:
    """Reward components with unique names and finite weights, each scoring a batch to a list of
    the batch's length of numbers or None."""
    owner = f"task {task.name!r}"
    components = task.reward_components()
    if not components or not all(isinstance(c, RewardComponent) for c in components):
        raise _fail(owner, "reward_components() must return a non-empty list of mrbench.RewardComponent")
    names = [c.name for c in components]
    if len(set(names)) != len(names) or not all(isinstance(n, str) and n for n in names):
        raise _fail(owner, f"reward component names must be unique non-empty strings, got {names}")
    batch = task.train_samples()[:2]
    columns = {key: [s.columns.get(key) for s in batch] for s in batch for key in s.columns}
    for component in components:
        where = f"reward component {component.name!r}"
        if not callable(component.fn):
            raise _fail(owner, f"{where}: fn is not callable")
        if not isinstance(component.weight, int | float) or not math.isfinite(component.weight):
            raise _fail(owner, f"{where}: weight must be a finite number, got {component.weight!r}")
        empty = [[{"role": "assistant", "content": ""}] for _ in batch]  # TRL's form for chat prompts
        scores = component.fn([s.prompt for s in batch], empty, **columns)
        if not isinstance(scores, list) or len(scores) != len(batch):
            raise _fail(owner, f"{where}: expected a list of {len(batch)} scores, got {scores!r}")
        if not all(v is None or (isinstance(v, int | float) and not isinstance(v, bool)) for v in scores):
            raise _fail(owner, f"{where}: scores must be numbers or None, got {scores!r}")


def task_declarations(task: Task) -> None:
    """``eval_datasets`` a :class:`DatasetSetting` (dataset names as choices, a positive budget per
    dataset); ``pareto_axes`` None or two different reward components of the task."""
    owner = f"task {task.name!r}"
    data = task.eval_datasets
    if not isinstance(data, DatasetSetting) or not isinstance(data.setting, str) or not data.setting:
        raise _fail(owner, f"eval_datasets must be a mrbench.DatasetSetting naming a setting, got {data!r}")
    if not all(isinstance(c, str) and c for c in data.choices):
        raise _fail(owner, f"eval_datasets.choices must be dataset names, got {data.choices!r}")
    for dataset, budget in data.budgets.items():
        if isinstance(budget, bool) or not isinstance(budget, int) or budget <= 0:
            raise _fail(
                owner, f"eval_datasets.budgets[{dataset!r}] must be a positive integer, got {budget!r}"
            )
    axes = task.pareto_axes
    if axes is None:
        return
    names = [c.name for c in task.reward_components()]
    if not isinstance(axes, tuple) or len(axes) != 2 or axes[0] == axes[1] or not set(axes) <= set(names):
        raise _fail(
            owner, f"pareto_axes must be None or two different reward components of {names}, got {axes!r}"
        )


TASK_CHECKS: tuple[Callable[[Task], None], ...] = (
    task_members,
    task_hooks,
    task_samples,
    task_rewards,
    task_declarations,
)
"""Every check of a built task, in order."""


def task_settings(task: str | Callable[..., Any]) -> None:
    """The factory's settings: keyword-only, each default a plain value (it becomes an MLflow param);
    among them the setting a declared ``eval_datasets`` names, and ``max_completion_tokens`` where it
    declares budgets."""
    import mrbench.tasks as tasks

    entry = tasks.get_task_entry(_name(task))
    for key, default in entry.params.items():
        if not isinstance(default, SCALAR):
            raise _fail(
                f"task {entry.name!r}", f"setting {key!r} has a default of type {type(default).__name__}"
            )
    data = tasks.task_class(entry.name).eval_datasets
    if data != DatasetSetting() and data.setting not in entry.params:
        raise _fail(
            f"task {entry.name!r}", f"eval_datasets names the setting {data.setting!r}, which it lacks"
        )
    if data.budgets and "max_completion_tokens" not in entry.params:
        raise _fail(
            f"task {entry.name!r}", "eval_datasets has budgets, but no max_completion_tokens setting to set"
        )


def task_class_declared(task: str | Callable[..., Any], built: Task) -> None:
    """The class the factory's return annotation names declares what the built task does: the
    harness reads ``eval_datasets`` and ``pareto_axes`` from it without building the task
    (:func:`mrbench.tasks.task_class`)."""
    import mrbench.tasks as tasks

    declared = tasks.task_class(_name(task))
    for attr in ("eval_datasets", "pareto_axes"):
        if getattr(declared, attr) != getattr(built, attr):
            raise _fail(
                f"task {built.name!r}",
                f"it declares {attr} = {getattr(built, attr)!r}, but the harness reads "
                f"{getattr(declared, attr)!r} from {declared.__qualname__}, the class its factory's "
                f"return annotation names: annotate the factory with its class "
                f"(def factory(...) -> {type(built).__qualname__})",
            )


def check_task(task: str | Callable[..., Any], params: Mapping[str, Any] | None = None) -> None:
    """Run every task check on ``task`` (a name, an entry point's name, ``"module:factory"`` or the
    factory itself) built with ``params``; :class:`ContractError` says what does not fit."""
    task_settings(task)
    with built_task(task, params) as built:
        for check in TASK_CHECKS:
            check(built)
        task_class_declared(task, built)


# --------------------------------------------------------------------------------------- methods


def method_entry(method: str | Callable[..., Any]) -> Entry[Any]:
    """The registry entry of ``method`` (a name, an entry point's name, ``"module:function"`` or the
    function itself), loaded as a run loads it."""
    import mrbench.methods as methods

    return methods.get_method(_name(method))


def method_signature(entry: Entry[Any]) -> None:
    """``fn(rewards, weights, *, <hyper-parameters>)``: plain-valued defaults inside their ranges,
    and a docstring whose first line summarises it and which states the shapes."""
    owner = f"method {entry.name!r}"
    params = list(inspect.signature(entry.obj).parameters.values())
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    if [p.name for p in params[:2]] != ["rewards", "weights"] or any(
        p.kind not in positional for p in params[:2]
    ):
        raise _fail(
            owner,
            f"must take (rewards, weights, *, <hyper-parameters>), takes {inspect.signature(entry.obj)}",
        )
    extra = [p.name for p in params[2:] if p.kind is not inspect.Parameter.KEYWORD_ONLY]
    if extra:
        raise _fail(owner, f"hyper-parameters must be keyword-only (after *), not {', '.join(extra)}")
    for key, default in entry.params.items():
        if not isinstance(default, SCALAR):
            raise _fail(owner, f"hyper-parameter {key!r} has a default of type {type(default).__name__}")
    doc = inspect.getdoc(entry.obj) or ""
    if not entry.summary or not all(shape in doc for shape in ("[P, G, K]", "[K]", "[P, G]")):
        raise _fail(
            owner, "its docstring must summarise it in one line and state the shapes [P, G, K], [K], [P, G]"
        )


def _advantages(entry: Entry[Any], rewards: Any, weights: Any) -> Any:
    import torch

    out = entry.obj(rewards, weights)
    if not isinstance(out, torch.Tensor) or out.shape != rewards.shape[:2]:
        got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise _fail(
            f"method {entry.name!r}",
            f"rewards {tuple(rewards.shape)} gave {got}, expected {tuple(rewards.shape[:2])}",
        )
    return out


def method_shapes(entry: Entry[Any]) -> None:
    """``[P, G, K]`` and ``[K]`` → finite ``[P, G]`` of the rewards' dtype (float32 and float64,
    also for empty groups, batches and components; no component at all: every advantage 0)."""
    import torch

    owner = f"method {entry.name!r}"
    gen = torch.Generator().manual_seed(0)
    for dtype in (torch.float32, torch.float64):
        rewards = torch.randn(3, 5, 2, generator=gen, dtype=torch.float64).to(dtype)
        out = _advantages(entry, rewards, torch.ones(2, dtype=dtype))
        if out.dtype != dtype or not bool(torch.isfinite(out).all()):
            raise _fail(owner, f"{dtype} rewards gave {out.dtype} advantages {out.tolist()}")
    for shape in ((0, 4, 3), (2, 0, 3), (2, 4, 0)):
        out = _advantages(entry, torch.rand(*shape, generator=gen), torch.ones(shape[2]))
        if shape[2] == 0 and not bool((out == 0).all()):
            raise _fail(owner, f"without reward components every advantage must be 0, got {out.tolist()}")


def method_unscorable(entry: Entry[Any]) -> None:
    """NaN and ±inf values (unscorable) give finite advantages; a rollout with no scorable value
    gets 0 and is left out of its group's statistics (the rest as if it were not there)."""
    import torch

    owner = f"method {entry.name!r}"
    gen = torch.Generator().manual_seed(1)
    for _ in range(4):
        scale = 10.0 ** torch.randint(-3, 4, (3,), generator=gen).double()  # |w·r| well within 1e6
        rewards = torch.randn(1, 7, 3, generator=gen, dtype=torch.float64) * scale
        weights = 0.25 + torch.rand(3, generator=gen, dtype=torch.float64)
        mixed = rewards.clone()
        mixed[0, 0, 1], mixed[0, 1, 2], mixed[0, 2, 0] = math.nan, math.inf, -math.inf
        out = _advantages(entry, mixed, weights)
        if not bool(torch.isfinite(out).all()):
            raise _fail(owner, f"NaN or inf rewards must give finite advantages, got {out.tolist()}")
        with_hole = rewards.clone()
        with_hole[0, 3] = math.nan
        out = _advantages(entry, with_hole, weights)
        without = _advantages(entry, torch.cat([rewards[:, :3], rewards[:, 4:]], dim=1), weights)
        rest = torch.cat([out[:, :3], out[:, 4:]], dim=1)
        tolerance = 1e-9 * max(float(without.abs().max()), 1e-30)
        moved = float((rest - without).abs().max())
        if out[0, 3] != 0 or not torch.allclose(rest, without, rtol=1e-9, atol=tolerance):
            raise _fail(
                owner,
                "a rollout whose every reward is NaN must get advantage 0 and leave its group's "
                f"others as they are without it; it got {float(out[0, 3]):.4g} and the others moved "
                f"by up to {moved:.4g}",
            )


METHOD_CHECKS: tuple[Callable[[Entry[Any]], None], ...] = (method_signature, method_shapes, method_unscorable)
"""Every check of an estimator's registry entry, in order."""


def check_method(method: str | Callable[..., Any]) -> None:
    """Run every estimator check on ``method`` (a name, an entry point's name, ``"module:function"``
    or the function itself); :class:`ContractError` says what does not fit."""
    entry = method_entry(method)
    for check in METHOD_CHECKS:
        check(entry)
