"""The task contract: what every task provides to the harness, and the types it is built from.

A task is a subclass of :class:`Task`, built by a factory function that the task registry
(``mrbench.tasks.TASKS``) holds under the task's name. The built-in tasks register theirs
lazily as ``"module:attr"`` (``"tool-calling"`` → ``"mrbench.tasks.tool_calling.task:tool_calling"``);
a task from another package registers its factory with the ``register_task`` decorator::

    from mrbench import Task, register_task

    @register_task("my-task")
    def my_task(*, n_train: int = 512, n_eval: int = 64) -> MyTask: ...

or through an entry point in the group ``mrbench.tasks`` (``my-task = "package.module:my_task"``),
or is named ``"package.module:my_task"`` wherever a task name is expected (see :mod:`mrbench.tasks`).

The factory's keyword-only parameters (each with a default) are the task's settings; the
registry reads them from its signature, and they are captured into the run key and MLflow
params exactly like a method's hyper-parameters. A factory raises ``ValueError`` for a bad
setting value. Code builds a task by name one way, ``mrbench.tasks.build_task(name, settings)``:
settings resolved and checked, a bad value reported as a :class:`~mrbench.core.errors.UserError`
naming the task. Building the object may load data; importing the module must not.

:class:`Task` declares what every task must provide (the abstract methods and the attributes
``name``, ``version``, ``primary_metric``, ``max_completion_tokens``) and the optional hooks
with their defaults, which a task overrides where it needs to: ``lower_is_better``,
``train_defaults``, ``demos_keep_final_line``, :meth:`Task.training_hooks`, :meth:`Task.close`,
and the ``mrbench score`` hooks :meth:`Task.score_datasets`, :meth:`Task.gold_items` and
:meth:`Task.score_items` (by default they raise a :class:`~mrbench.core.errors.UserError`
saying the task cannot be scored). The engine reads every hook as a plain attribute.

Two class attributes are read *without building* the task, from the class its factory's return
annotation names (:func:`mrbench.tasks.task_class`): ``eval_datasets`` (a :class:`DatasetSetting`:
the evaluation data ``mrbench eval --dataset`` and a sweep's ``eval`` key choose from) and
``pareto_axes`` (the two reward components the report's Pareto figure plots).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, ClassVar, Protocol, runtime_checkable

from mrbench.core.errors import UserError

Message = dict[str, str]
"""One chat message: ``{"role": "system" | "user" | "assistant" | "tool", "content": str}``."""

Column = str | int | float | bool
"""Dataset column values are flat scalars; tasks JSON-encode anything nested into a str."""

RewardFn = Callable[..., list[float | None]]
"""TRL's reward-function signature: ``fn(prompts, completions, **columns) -> list[float | None]``.

``completions[i]`` is a str or a list of chat messages (conversational datasets); use
:func:`completion_text`. Each column arrives as a list aligned with ``completions``.
``None`` (or NaN) marks an unscorable completion for this component.
"""


@dataclass(frozen=True)
class Sample:
    """One prompt: chat messages plus the columns its reward functions and evaluation need."""

    id: str
    prompt: list[Message]
    columns: dict[str, Column] = field(default_factory=dict)


@dataclass(frozen=True)
class RewardComponent:
    """A named reward component: its function, default weight and value range ``[low, high]``."""

    name: str
    fn: RewardFn
    weight: float = 1.0
    low: float = 0.0
    high: float = 1.0


@dataclass
class EvalResult:
    """Evaluation output.

    ``metrics``: metric name (no ``eval/`` prefix) → value, e.g. ``{"exact_match": 0.4}``.
    ``samples``: per-item records (id, prompt, completion, per-component rewards, …) for the
    artifact a researcher reads to see what the model actually did.
    """

    metrics: dict[str, float]
    samples: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class ScoredItem:
    """The score of one ``mrbench score`` input item: reward per component (None = unscorable), status."""

    id: str
    rewards: dict[str, float | None]
    status: str
    error: str | None = None  # set when the item itself is invalid (unknown id, missing field, …)


@dataclass(frozen=True)
class DatasetSetting:
    """A task's evaluation data, as ``mrbench eval --dataset`` and a sweep's ``eval`` key choose it.

    ``setting``: the task setting a dataset name sets. ``choices``: the names it takes (empty:
    whatever the task's factory accepts, which checks the value). ``budgets``: ``{dataset:
    max_completion_tokens}`` for a task whose default budget follows its *training* dataset: the
    evaluation's dataset, where it is listed, sets the ``max_completion_tokens`` setting instead
    (unless that is given).

    >>> DatasetSetting("eval_dataset", ["embedded", "humaneval"], {"humaneval": 512}).choices
    ('embedded', 'humaneval')
    """

    setting: str = "dataset"
    choices: Sequence[str] = ()
    budgets: Mapping[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "choices", tuple(self.choices))
        object.__setattr__(self, "budgets", MappingProxyType(dict(self.budgets)))


@runtime_checkable
class Generator(Protocol):
    """Greedy chat generation from the model under evaluation (built by the harness)."""

    model: Any  # transformers PreTrainedModel
    tokenizer: Any  # transformers PreTrainedTokenizerBase

    def __call__(self, conversations: Sequence[list[Message]], *, max_new_tokens: int) -> list[str]:
        """One greedy completion (assistant text) per conversation, in order."""
        ...


class Task(ABC):
    """What the harness needs from a task; every task subclasses it (see the module docstring).

    Subclasses set the four required attributes (``name``, ``version``, ``primary_metric`` as
    class attributes; ``max_completion_tokens`` may depend on the settings), implement the
    abstract methods, and override the optional hooks below where their defaults do not fit.
    """

    name: str
    """Registry name, e.g. ``"tool-calling"``."""
    version: str
    """Bumped whenever samples, rewards or evaluation change meaning (logged with every run)."""
    primary_metric: str
    """A key of :attr:`EvalResult.metrics`: the number a report ranks methods by."""
    max_completion_tokens: int
    """Generation budget per completion (per assistant turn for multi-turn tasks), training and eval."""
    lower_is_better: frozenset[str] = frozenset()
    """Metric names where smaller is better (e.g. an attack success rate)."""

    train_defaults: ClassVar[Mapping[str, Any]] = MappingProxyType({})
    """``TrainSettings`` overrides that suit the task (e.g. a smaller learning rate), applied
    before the caller's own overrides (``mrbench.engine.config.resolve_spec``); read-only."""
    demos_keep_final_line: ClassVar[bool] = False
    """Keep every demonstration whole in the tiny models' warm start instead of leaving out the
    final line of some (``mrbench.engine.models.tiny.collect_demonstrations``): for multi-turn tasks,
    where a flaw per turn would compound over an episode."""
    eval_datasets: ClassVar[DatasetSetting] = DatasetSetting()
    """The evaluation data ``mrbench eval --dataset`` (and a sweep's ``eval`` key) chooses from: by
    default any value of the ``dataset`` setting, which the factory checks. Read from the class
    without building the task (:func:`mrbench.tasks.task_class`)."""
    pareto_axes: ClassVar[tuple[str, str] | None] = None
    """The two reward components the report's Pareto figure plots, x then y: the trade-off the task
    is about; by default (or when a run lacks one of them) its first two components. Read from the
    class without building the task (:func:`mrbench.tasks.task_class`)."""

    # -- required ----------------------------------------------------------------------------
    @abstractmethod
    def train_samples(self) -> list[Sample]:
        """Training prompts (deterministic for given settings)."""

    @abstractmethod
    def eval_samples(self) -> list[Sample]:
        """Held-out prompts, disjoint from training."""

    @abstractmethod
    def reward_components(self) -> list[RewardComponent]:
        """The K components in a fixed order; this order is the K axis of the reward tensor."""

    @abstractmethod
    def evaluate(self, generator: Generator, samples: list[Sample] | None = None) -> EvalResult:
        """Score greedy generations on ``samples`` (default: :meth:`eval_samples`)."""

    # -- optional hooks ------------------------------------------------------------------------
    def demonstrations(self, n: int, seed: int) -> list[tuple[list[Message], str]]:
        """``n`` (prompt, good assistant completion) pairs for the tiny models' SFT warm start.

        Only the built-in tasks' demonstrations warm-start the tiny presets (a plugin must not
        change a cached model), so a plugin task needs none: the default is an empty list."""
        return []

    def training_hooks(self) -> dict[str, Any]:
        """Extra keyword arguments for the engine's trainer, e.g. ``{"rollout": ...}`` (a
        :data:`mrbench.core.rollout.Rollout` running multi-turn episodes); none by default."""
        return {}

    def completion_budget(self, max_new_tokens: int) -> int:
        """Tokens a training sequence may hold after its prompt when each model turn may generate
        ``max_new_tokens``: one completion by default. A multi-turn task counts its turns and what
        the environment inserts between them. The engine caps vLLM's context at the longest
        prompt plus this (``mrbench.engine.evaluation.generation.vllm_context_cap``)."""
        return max_new_tokens

    def close(self) -> None:
        """Release what the task started (worker processes, …); called once the run is done with it."""
        return  # most tasks hold nothing to release

    # -- mrbench score -------------------------------------------------------------------------
    def score_datasets(self) -> list[str]:
        """Dataset names whose items the task can score (``--dataset`` must be one of them)."""
        raise self._not_scorable()

    def gold_items(self, dataset: str) -> list[dict[str, Any]]:
        """The dataset's reference answers as input items (``--gold``)."""
        raise self._not_scorable()

    def score_items(self, items: list[dict[str, Any]]) -> list[ScoredItem]:
        """One :class:`ScoredItem` per input item, in order.

        Items are the JSON objects of the input file (at least ``dataset``, ``id`` and
        ``completion``). A problem with one item (unknown dataset or id, a missing field) must
        not stop the others: return its ``ScoredItem`` with ``status`` saying what went wrong,
        empty ``rewards`` and ``error`` set to a clear message.
        """
        raise self._not_scorable()

    def _not_scorable(self) -> UserError:
        return UserError(
            f"task {self.name!r} cannot be scored with `mrbench score`: it implements no "
            "score_datasets / gold_items / score_items (see mrbench.core.contracts.Task)"
        )


def completion_text(completion: str | list[Message] | Any) -> str:
    """The assistant text of a TRL completion, whether plain or conversational.

    >>> completion_text([{"role": "assistant", "content": "hi"}])
    'hi'
    >>> completion_text("hi")
    'hi'
    """
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list):
        return "".join(
            str(m.get("content", "")) for m in completion if m.get("role", "assistant") == "assistant"
        )
    return str(completion)


def clean_reward(value: float | None) -> float | None:
    """Map NaN/inf to ``None`` (unscorable); keep finite floats.

    >>> clean_reward(float("nan")) is None
    True
    >>> clean_reward(0.5)
    0.5
    """
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None
