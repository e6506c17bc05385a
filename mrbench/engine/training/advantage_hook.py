"""The advantage hook TRL 1.16 lacks: advantages from a registered mrbench method, not GRPO's.

:class:`~mrbench.engine.training.trainer.MultiRewardGRPOTrainer` drives an :class:`AdvantageHook` from two
of ``GRPOTrainer``'s internals:

1. ``_calculate_rewards`` returns the ``rewards_per_func`` ``[B_total, K]`` gathered over
   processes; the hook keeps them (:meth:`AdvantageHook.keep`);
2. ``_generate_and_score_completions`` runs unchanged (generation, reward calls, KL inputs, TRL's
   own reward logging), then
3. the hook recomputes the advantages from the kept rewards with the chosen method, on whole groups
   of the global batch, slices them to this process (:func:`mrbench.engine.processes.distributed.local_slice`,
   the rows TRL's ``process_slice`` gives it), and replaces ``advantages`` in the returned batch,
   plus the tail of TRL's ``_logs["advantages"]`` so that logged completions show what was trained
   on (:meth:`AdvantageHook.replace`).

Everything else (loss, clipping, KL, optimisation) is TRL's.
"""

from __future__ import annotations

from collections.abc import Callable, MutableSequence, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from mrbench.engine.processes.distributed import local_slice
from mrbench.engine.training.reward_log import group_prompt_ids


@dataclass(frozen=True)
class ScoredBatch:
    """One generation batch as the method saw it: ``rewards`` ``[P, G, K]`` (gathered over
    processes), ``weights`` ``[K]`` and the method's ``advantages`` ``[P, G]``, all float32 on the CPU,
    and ``prompt_ids`` ``[P]`` (:func:`mrbench.engine.training.reward_log.prompt_id` of each group's prompt;
    empty when the caller passed no prompts)."""

    rewards: torch.Tensor
    weights: torch.Tensor
    advantages: torch.Tensor
    prompt_ids: tuple[int, ...] = ()


class AdvantageHook:
    """``method_fn(rewards[P, G, K], weights[K], **method_params) -> [P, G]`` in place of TRL's advantages."""

    def __init__(
        self, method_fn: Callable[..., torch.Tensor], method_params: dict[str, Any] | None = None
    ) -> None:
        self.method_fn = method_fn
        self.method_params = dict(method_params or {})
        self._kept_rewards: torch.Tensor | None = None

    def keep(self, rewards_per_func: torch.Tensor) -> torch.Tensor:
        """Keep the batch's gathered rewards ``[B_total, K]`` for :meth:`replace`; returns them unchanged."""
        self._kept_rewards = rewards_per_func
        return rewards_per_func

    def replace(
        self,
        output: dict[str, Any],
        *,
        group: int,
        reward_weights: torch.Tensor,
        logged: MutableSequence[float],
        process_index: int,
        num_processes: int,
        prompts: Sequence[Any] = (),
    ) -> ScoredBatch:
        """Put the method's advantages into TRL's ``output`` (this process's ``[B_local]`` rows) and
        into the tail of ``logged`` (TRL's ``_logs["advantages"]``); return what the method saw.

        ``group``: rollouts per prompt (``G``); ``reward_weights``: ``[K]``; ``prompts``: TRL's
        gathered prompt log (``_logs["prompt"]``, one entry per rollout, this batch's last), which
        gives the batch's prompt ids.
        """
        rewards, self._kept_rewards = self._kept_rewards, None
        if rewards is None:  # pragma: no cover - TRL always scores before returning
            raise RuntimeError("TRL did not call _calculate_rewards; the advantage hook cannot apply")
        rewards = rewards.detach().float().cpu()
        grouped = rewards.view(-1, group, rewards.shape[1])  # [P, G, K]
        weights = reward_weights.detach().float().cpu()
        advantages = self.method_fn(grouped, weights, **self.method_params).reshape(-1)  # [B_total]

        # Whole groups of the global batch were scored above; this process trains on its own rows.
        trl_advantages = output["advantages"]
        local = local_slice(advantages, trl_advantages.shape[0], process_index, num_processes)
        output["advantages"] = local.to(device=trl_advantages.device, dtype=trl_advantages.dtype)
        _show_in_completion_log(logged, advantages)
        prompt_ids = tuple(group_prompt_ids(prompts, grouped.shape[0], group)) if prompts else ()
        return ScoredBatch(grouped, weights, advantages.view(-1, group), prompt_ids)


def _show_in_completion_log(logged: MutableSequence[float], advantages: torch.Tensor) -> None:
    """TRL appended this batch's GRPO advantages to its completion log (``logged``); show
    ``advantages`` ``[B_total]`` instead (the last ``B_total`` entries, fewer if the log holds fewer)."""
    tail = min(len(logged), advantages.numel())
    values = advantages.tolist()[-tail:] if tail else []
    for offset, value in enumerate(values):
        logged[len(logged) - tail + offset] = value
