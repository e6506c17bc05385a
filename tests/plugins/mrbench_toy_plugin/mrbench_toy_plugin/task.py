"""``toy-add``: call ``add`` with the two numbers of the prompt; two reward components.

The prompts and the answer format are those the test suite's micro model was warm-started on
(``tests/conftest.py``), so a few GRPO steps on it run through every part of a real cell. The task
declares its evaluation data (``mrbench eval --task toy-add --dataset teens``) and its Pareto axes.
"""

from __future__ import annotations

import json
import random
import re
from typing import Any, ClassVar

from mrbench import (
    DatasetSetting,
    EvalResult,
    Generator,
    RewardComponent,
    Sample,
    Task,
    completion_text,
    register_task,
)

CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
MARKERS = ("<tool_call>", "</tool_call>", '"name"', "add", "{", "}")
OPERANDS = {"digits": 0, "teens": 10}
"""The ``operands`` setting: the smallest of the ten numbers a prompt adds."""


def _prompt(a: int, b: int) -> list[dict[str, str]]:
    return [{"role": "system", "content": "Call add."}, {"role": "user", "content": f"add {a} {b}"}]


def _answer(a: int, b: int) -> str:
    return f'<tool_call>{{"name": "add", "a": {a}, "b": {b}}}</tool_call>'


def format_reward(prompts: list[Any], completions: list[Any], **columns: Any) -> list[float | None]:
    """1 when the completion is one ``<tool_call>…</tool_call>`` block, else the share of the call's
    markers it contains (graded, so that even a barely trained model's rollouts differ)."""
    out: list[float | None] = []
    for completion in completions:
        text = completion_text(completion).strip()
        full = CALL.fullmatch(text) is not None
        out.append(1.0 if full else sum(m in text for m in MARKERS) / (len(MARKERS) + 1))
    return out


def args_reward(
    prompts: list[Any], completions: list[Any], *, a: list[int], b: list[int], **columns: Any
) -> list[float | None]:
    """Share of the two arguments right; None (unscorable) when there is no JSON call to read."""
    out: list[float | None] = []
    for completion, want_a, want_b in zip(completions, a, b, strict=True):
        found = CALL.search(completion_text(completion))
        try:
            call = json.loads(found.group(1)) if found else None
        except json.JSONDecodeError:
            call = None
        if not isinstance(call, dict):
            out.append(None)
            continue
        out.append(((call.get("a") == want_a) + (call.get("b") == want_b)) / 2)
    return out


class ToyAddTask(Task):
    """Call add(a, b): format and argument rewards, exact-match evaluation."""

    name = "toy-add"
    version = "1"
    primary_metric = "exact_match"
    max_completion_tokens = 40
    train_defaults: ClassVar[dict[str, Any]] = {"num_generations": 2, "prompts_per_step": 2}
    eval_datasets: ClassVar[DatasetSetting] = DatasetSetting("operands", tuple(OPERANDS))
    pareto_axes: ClassVar[tuple[str, str]] = ("args", "format")  # not the first two components

    def __init__(self, *, n_train: int, n_eval: int, seed: int, operands: str = "digits") -> None:
        rng, low = random.Random(seed), OPERANDS[operands]
        pairs = [(rng.randint(low, low + 9), rng.randint(low, low + 9)) for _ in range(n_train + n_eval)]
        samples = [Sample(f"toy-{i}", _prompt(a, b), {"a": a, "b": b}) for i, (a, b) in enumerate(pairs)]
        self._train, self._eval = samples[:n_train], samples[n_train:]

    def train_samples(self) -> list[Sample]:
        return list(self._train)

    def eval_samples(self) -> list[Sample]:
        return list(self._eval)

    def reward_components(self) -> list[RewardComponent]:
        return [RewardComponent("format", format_reward), RewardComponent("args", args_reward, weight=2.0)]

    def demonstrations(self, n: int, seed: int) -> list[tuple[list[dict[str, str]], str]]:
        rng = random.Random(seed)
        pairs = [(rng.randint(0, 9), rng.randint(0, 9)) for _ in range(n)]
        return [(_prompt(a, b), _answer(a, b)) for a, b in pairs]

    def evaluate(self, generator: Generator, samples: list[Sample] | None = None) -> EvalResult:
        samples = self.eval_samples() if samples is None else samples
        texts = generator([s.prompt for s in samples], max_new_tokens=self.max_completion_tokens)
        records = []
        for sample, text in zip(samples, texts, strict=True):
            a, b = [sample.columns["a"]], [sample.columns["b"]]
            rewards = {"format": format_reward([], [text])[0], "args": args_reward([], [text], a=a, b=b)[0]}
            records.append({"id": sample.id, "completion": text, "rewards": rewards})
        exact = [r["rewards"]["format"] == 1.0 and r["rewards"]["args"] == 1.0 for r in records]
        return EvalResult({"exact_match": sum(exact) / max(len(exact), 1)}, records)


@register_task("toy-add")
def toy_add(*, n_train: int = 4, n_eval: int = 2, seed: int = 0, operands: str = "digits") -> ToyAddTask:
    """Call add(a, b) with the prompt's two numbers: format and argument rewards (a test fixture)."""
    if n_train < 1 or n_eval < 0:
        raise ValueError(f"n_train must be >= 1 and n_eval >= 0, got {n_train} and {n_eval}")
    if operands not in OPERANDS:
        raise ValueError(f"operands must be one of {', '.join(OPERANDS)}, got {operands!r}")
    return ToyAddTask(n_train=n_train, n_eval=n_eval, seed=seed, operands=operands)
