"""The contract between a task's own training rollout and the trainer that runs it.

A task whose training episodes take several model turns (environment feedback between them)
provides a :data:`Rollout`. For every generation batch the engine builds a
:class:`RolloutContext` from its trainer, calls the rollout with the batch's prompts, and hands
the returned :class:`RolloutBatch` to the trainer. Nothing here names a training library: a
rollout sees a tokenizer, a token-level sampler of the policy being trained and its budgets,
never the trainer itself.

Shapes: ``B`` prompts in, ``B`` episodes out (the trainer has already repeated each prompt
once per generation of its group); token ids are plain ``list[int]`` of per-episode length.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from mrbench.core.contracts import Column, Message

TokenGenerate = Callable[[list[list[int]], int], list[list[int]]]
"""``generate(batch, max_new_tokens) -> outputs``: sample one continuation per sequence.

``batch``: ``B`` token-id lists (B ≥ 1, any lengths). ``outputs``: ``B`` lists of new token ids
in batch order, each at most ``max_new_tokens`` long. A continuation that ended keeps the EOS id
that ended it; ids after the first EOS (padding) carry no meaning.
"""


@dataclass(frozen=True)
class RolloutContext:
    """What a rollout may use from the trainer for one generation batch.

    ``tokenizer``: the policy's tokenizer (a transformers ``PreTrainedTokenizerBase``: chat
    template, encode, decode). ``generate``: samples from the policy being trained, with the
    run's sampling settings. ``max_new_tokens``: the generation budget of one model turn.
    ``eos_token_ids``: any of them ends a turn. ``max_length``: the longest sequence a turn may
    reach, in tokens (the model's context, or less; ``None`` when nothing says).

    ``any_live(live)``: whether any process of the cell still has a live episode, given whether
    this one has (a collective call: every process of a multi-process cell must make it, once
    per turn). Under FSDP and ZeRO-3 every ``generate`` call is collective too, so a rollout makes
    one call per turn while ``any_live`` is true, with a stand-in batch once its own episodes
    have ended: every process makes the same number of calls. One process: ``live`` itself.
    """

    tokenizer: Any
    generate: TokenGenerate
    max_new_tokens: int
    eos_token_ids: tuple[int, ...]
    max_length: int | None = None
    any_live: Callable[[bool], bool] = bool


@dataclass(frozen=True)
class RolloutBatch:
    """What a rollout returns: one episode per prompt, in prompt order.

    ``prompt_ids[i]``: the episode's prompt tokens ``[P_i]``. ``completion_ids[i]``: everything
    after the prompt ``[C_i]`` — the model's turns and the environment's tokens between them.
    ``env_mask[i]`` ``[C_i]``: 1 on a token the model generated (trained on), 0 on one the
    environment inserted (masked out of the loss). ``columns``: name → ``B`` values, handed to the
    reward functions as extra dataset columns (JSON-encode anything nested).
    """

    prompt_ids: list[list[int]]
    completion_ids: list[list[int]]
    env_mask: list[list[int]]
    columns: dict[str, list[Column]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        n = len(self.prompt_ids)
        if len(self.completion_ids) != n or len(self.env_mask) != n:
            raise ValueError(
                f"rollout batch sizes differ: {n} prompts, {len(self.completion_ids)} completions, "
                f"{len(self.env_mask)} masks"
            )
        for i, (ids, mask) in enumerate(zip(self.completion_ids, self.env_mask, strict=True)):
            if len(ids) != len(mask):
                raise ValueError(f"episode {i}: {len(ids)} completion tokens but {len(mask)} mask entries")
        for name, values in self.columns.items():
            if len(values) != n:
                raise ValueError(f"rollout column {name!r} has {len(values)} values for {n} episodes")


Rollout = Callable[[list[list[Message]], RolloutContext], RolloutBatch]
"""``rollout(prompts, context) -> batch``: run one episode per prompt (``B`` chat conversations)."""
