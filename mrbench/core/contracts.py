"""The Task protocol: what every task package provides to the harness.

A task is built by a registered factory (see :mod:`tasks`), e.g.::

    @register_task("tool-calling")
    def tool_calling(*, n_train: int = 512, n_eval: int = 64) -> Task: ...

The factory's keyword-only parameters are the task's settings; they are captured into the run
key and MLflow params exactly like a method's hyper-parameters. Building the object may load
data; importing the module must not.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

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


@runtime_checkable
class Generator(Protocol):
    """Greedy chat generation from the model under evaluation (built by the harness)."""

    model: Any  # transformers PreTrainedModel
    tokenizer: Any  # transformers PreTrainedTokenizerBase

    def __call__(self, conversations: Sequence[list[Message]], *, max_new_tokens: int) -> list[str]:
        """One greedy completion (assistant text) per conversation, in order."""
        ...


@runtime_checkable
class Task(Protocol):
    """What the harness needs from a task.

    Optional attributes the harness reads when present: ``train_defaults`` (``TrainSettings``
    overrides that suit the task on the tiny CPU models, applied before the caller's own
    overrides; ``mrbench.engine.config.resolve_spec``) and ``demos_keep_final_line``
    (``mrbench.engine.models.collect_demonstrations``).
    """

    name: str
    version: str
    primary_metric: str  # a key of EvalResult.metrics
    lower_is_better: frozenset[str]  # metric names where smaller is better (e.g. attack success rate)
    max_completion_tokens: int  # generation budget per completion during training and eval

    def train_samples(self) -> list[Sample]:
        """Training prompts (deterministic for given settings)."""
        ...

    def eval_samples(self) -> list[Sample]:
        """Held-out prompts, disjoint from training."""
        ...

    def reward_components(self) -> list[RewardComponent]:
        """The K components in a fixed order; this order is the K axis of the reward tensor."""
        ...

    def demonstrations(self, n: int, seed: int) -> list[tuple[list[Message], str]]:
        """``n`` (prompt, good assistant completion) pairs for the tiny models' SFT warm start."""
        ...

    def evaluate(self, generator: Generator, samples: list[Sample] | None = None) -> EvalResult:
        """Score greedy generations on ``samples`` (default: :meth:`eval_samples`)."""
        ...


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
