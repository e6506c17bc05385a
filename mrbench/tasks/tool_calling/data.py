"""Procedurally generated tool-calling requests, their gold answers and the train/eval split.

Four kinds of item (shares of every generated set in ``KIND_SHARES``):

- ``single``   — one tool offered, one call needed;
- ``choose``   — three tools offered, one of them is needed;
- ``parallel`` — two calls in one answer (same tool twice or two different tools);
- ``no_call``  — small talk or a request no offered tool serves: answer with ``<response>``.

Split: an item belongs to ``eval`` when a hash of its *user request text* falls in the held-out
fraction, else to ``train``. Because the split key is the request itself (a template filled with
values), a request that appears in eval never appears in train, whatever tools are offered
with it; the generator for each split simply rejects items of the other split. Demonstrations
for the SFT warm start come from the train side only.

Everything is deterministic for given arguments (``random.Random`` with integer seeds; no
dependence on ``PYTHONHASHSEED``).
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass
from typing import Any

from mrbench.core.contracts import Message, Sample
from mrbench.kit.toolcall import THINK_CLOSE, THINK_OPEN, call_block, response_block
from mrbench.tasks.tool_calling.catalog import NO_CALL_POOLS, NO_CALL_TEMPLATES, TOOLS, Tool
from mrbench.tasks.tool_calling.prompts import build_prompt

KINDS: tuple[str, ...] = ("single", "choose", "parallel", "no_call")
KIND_SHARES: dict[str, float] = {"single": 0.35, "choose": 0.30, "parallel": 0.20, "no_call": 0.15}
EVAL_FRACTION = 0.2
"""Share of the request space held out for evaluation."""
CHOOSE_OFFERED = 3
"""Tools offered in a ``choose`` item (the needed one plus distractors)."""
MAX_PARALLEL_PARAMS = 3
"""Parallel items use at most this many arguments in total, so that their gold answer fits the
completion budget (``ToolCallingTask.max_completion_tokens``) of the tiny models."""
THINK = THINK_OPEN + THINK_CLOSE
"""Gold think block: empty, because the tiny CPU models have a ~48-token budget (the format
reward only requires the block to be present; real models may think at length)."""

_SPLIT_SALT = {"train": 11, "eval": 23, "demo": 37}
_CONNECTORS = ("Also, ", "And ", "Then ", "")


def compact_json(value: Any) -> str:
    """JSON without spaces (the form used in prompts and gold answers; fewer tokens).

    >>> compact_json({"name": "f", "parameters": {"x": 1}})
    '{"name":"f","parameters":{"x":1}}'
    """
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def gold_completion(calls: list[dict[str, Any]], response: str | None = None) -> str:
    """The ideal assistant answer: calls one JSON per line, or a ``<response>`` when there are none.

    >>> print(gold_completion([{"name": "get_news", "parameters": {"topic": "tech"}}]))
    <think></think>
    <tool_call>
    {"name":"get_news","parameters":{"topic":"tech"}}
    </tool_call>
    >>> gold_completion([], "Hi!")
    '<think></think>\\n<response>Hi!</response>'
    """
    if calls:
        lines = [compact_json({"name": c["name"], "parameters": c["parameters"]}) for c in calls]
        return f"{THINK}\n{call_block(lines)}"
    return f"{THINK}\n{response_block(response or '')}"


def split_of(request: str) -> str:
    """``"eval"`` or ``"train"``, from a stable hash of the request text.

    >>> split_of("What's the weather in Paris?") in ("train", "eval")
    True
    """
    digest = hashlib.sha256(request.strip().encode()).digest()
    return "eval" if int.from_bytes(digest[:8], "big") / 2**64 < EVAL_FRACTION else "train"


@dataclass(frozen=True)
class Item:
    """One generated request with its offered tools and gold answer."""

    kind: str
    tools: tuple[Tool, ...]
    request: str
    calls: tuple[dict[str, Any], ...] = ()
    response: str | None = None

    def messages(self, style: str = "compact") -> list[Message]:
        """The chat prompt of the request in prompt ``style`` (:mod:`.prompts`)."""
        return build_prompt(
            [t.compact() for t in self.tools], [{"role": "user", "content": self.request}], style
        )

    def completion(self) -> str:
        """The gold assistant answer."""
        return gold_completion(list(self.calls), self.response)


def _request(tool: Tool, rng: random.Random) -> tuple[str, dict[str, Any]]:
    args = tool.sample_arguments(rng)
    template = rng.choice(tool.templates)
    return template.format(**args), {"name": tool.name, "parameters": args}


def _join(first: str, second: str, connector: str) -> str:
    """Two requests as one message; lower-cases the second's first word after a connector."""
    if connector and second[:1].isupper() and second[1:2].islower():
        second = second[0].lower() + second[1:]
    return f"{first} {connector}{second}"


def sample_item(kind: str, rng: random.Random) -> Item:
    """Draw one item of ``kind`` (see the module docstring)."""
    if kind == "single":
        tool = rng.choice(TOOLS)
        text, call = _request(tool, rng)
        return Item(kind, (tool,), text, (call,))
    if kind == "choose":
        offered = rng.sample(TOOLS, CHOOSE_OFFERED)
        text, call = _request(offered[0], rng)
        rng.shuffle(offered)
        return Item(kind, tuple(offered), text, (call,))
    if kind == "parallel":
        if rng.random() < 0.5:
            tool = rng.choice(TOOLS)
            needed = [tool, tool]
        else:
            needed = rng.sample(TOOLS, 2)
        (text1, call1), (text2, call2) = _request(needed[0], rng), _request(needed[1], rng)
        if call1 == call2 or len(call1["parameters"]) + len(call2["parameters"]) > MAX_PARALLEL_PARAMS:
            return sample_item(kind, rng)  # identical calls are not parallel; long answers exceed the budget
        needed = list(dict.fromkeys(needed))
        distractors = [t for t in TOOLS if t not in needed]
        offered = needed + rng.sample(distractors, rng.randint(0, 1))
        rng.shuffle(offered)
        return Item(kind, tuple(offered), _join(text1, text2, rng.choice(_CONNECTORS)), (call1, call2))
    if kind == "no_call":
        template, answer = rng.choice(NO_CALL_TEMPLATES)
        values = {slot: rng.choice(pool) for slot, pool in NO_CALL_POOLS.items()}
        offered = rng.sample(TOOLS, rng.randint(1, 2))
        return Item(kind, tuple(offered), template.format(**values), (), answer.format(**values))
    raise ValueError(f"unknown item kind {kind!r}; choose from {', '.join(KINDS)}")


def kind_counts(n: int) -> dict[str, int]:
    """Items per kind for a set of ``n`` (largest-remainder rounding of ``KIND_SHARES``).

    >>> kind_counts(10)
    {'single': 4, 'choose': 3, 'parallel': 2, 'no_call': 1}
    """
    raw = {k: n * KIND_SHARES[k] for k in KINDS}
    counts = {k: int(v) for k, v in raw.items()}
    by_remainder = sorted(KINDS, key=lambda k: (raw[k] - counts[k], -KINDS.index(k)), reverse=True)
    for k in by_remainder[: n - sum(counts.values())]:
        counts[k] += 1
    return counts


def generate_items(n: int, *, split: str, seed: int) -> list[Item]:
    """``n`` distinct items whose requests all hash to ``split`` (``"demo"`` draws from train).

    Distinct = no two items with the same offered tools and request. Raises ``ValueError`` if
    the request space cannot supply ``n`` items (far above the default sizes).
    """
    if split not in _SPLIT_SALT:
        raise ValueError(f"unknown split {split!r}; choose from {', '.join(_SPLIT_SALT)}")
    wanted = "eval" if split == "eval" else "train"
    rng = random.Random(seed * 1_000_003 + _SPLIT_SALT[split])
    items: list[Item] = []
    for kind, count in kind_counts(n).items():
        seen: set[tuple[Any, ...]] = set()
        attempts = 0
        while count > 0:
            attempts += 1
            if attempts > 200 * (count + 10) + 10_000:
                raise ValueError(
                    f"cannot draw {n} distinct {wanted} items of kind {kind!r}; use a smaller size"
                )
            item = sample_item(kind, rng)
            key = (tuple(t.name for t in item.tools), item.request)
            if key in seen or split_of(item.request) != wanted:
                continue
            seen.add(key)
            items.append(item)
            count -= 1
    rng.shuffle(items)
    return items


def item_to_sample(item: Item, sample_id: str, style: str = "compact") -> Sample:
    """A :class:`~mrbench.core.contracts.Sample` with the gold calls JSON-encoded in ``gold_calls``."""
    return Sample(
        id=sample_id,
        prompt=item.messages(style),
        columns={"gold_calls": compact_json(list(item.calls)), "kind": item.kind},
    )


def make_samples(n: int, *, split: str, seed: int, style: str = "compact") -> list[Sample]:
    """``n`` samples of ``split`` (``"train"`` or ``"eval"``) in prompt ``style``, ids ``<split>-<index>``."""
    return [
        item_to_sample(item, f"{split}-{i:05d}", style)
        for i, item in enumerate(generate_items(n, split=split, seed=seed))
    ]


def make_demonstrations(n: int, *, seed: int, style: str = "compact") -> list[tuple[list[Message], str]]:
    """``n`` (prompt, gold completion) pairs from the train side of the split (never eval requests)."""
    return [(item.messages(style), item.completion()) for item in generate_items(n, split="demo", seed=seed)]
