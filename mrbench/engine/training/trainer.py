"""TRL glue: a ``GRPOTrainer`` whose advantages come from a registered mrbench method.

:class:`MultiRewardGRPOTrainer` keeps only ``GRPOTrainer``'s override points and composes the
collaborators that do the work, each of which explains the TRL internal it touches:

- :class:`~mrbench.engine.training.advantage_hook.AdvantageHook` (TRL 1.16 has no advantage hook): keeps
  the gathered rewards ``_calculate_rewards`` returns, recomputes the advantages with the chosen
  method once ``_generate_and_score_completions`` has run unchanged, and replaces TRL's in its
  output and in ``_logs["advantages"]``. Everything else (loss, clipping, KL, optimisation) is TRL's.
- :class:`~mrbench.engine.training.step_diagnostics.StepDiagnostics`: the per-step ``adv/...`` diagnostics
  and shadow estimators, appended to TRL's ``_metrics``; they only observe.
- :func:`~mrbench.engine.training.completion_log.completion_rows`: TRL's completion log (``_logs``) as rows;
  with the diagnostics and the rewards log it makes the :class:`TrainingRecord` the cell logs.
- :mod:`mrbench.engine.training.shared_prefix` (``shared_prefix=True``): each group's prompt encoded once
  when scoring (``_get_per_token_logps_and_entropies``, for the policy and the reference model)
  and when generating on the transformers path (``model.generate``), the cache expanded to its
  ``G`` completions; the same numbers up to float rounding.
- :mod:`mrbench.engine.training.rollout_adapter`: a task's own multi-turn rollout
  (:data:`mrbench.core.rollout.Rollout`) as TRL's ``rollout_func``, handed a
  :class:`~mrbench.core.rollout.RolloutContext` built from the trainer.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from trl import GRPOTrainer

from mrbench.core.rewards_record import RewardsRecord
from mrbench.core.rollout import Rollout
from mrbench.engine.training import shared_prefix as prefix
from mrbench.engine.training.advantage_hook import AdvantageHook
from mrbench.engine.training.completion_log import completion_rows
from mrbench.engine.training.rollout_adapter import trl_rollout_func
from mrbench.engine.training.step_diagnostics import StepDiagnostics, resolve_shadows

__all__ = ["MultiRewardGRPOTrainer", "TrainingRecord", "resolve_shadows"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TrainingRecord:
    """What a training run hands its cell to log, all read at once after ``train()``.

    ``diagnostics``: the run means of the training batches' ``adv/...`` diagnostics and shadow
    comparisons (``diagnostics.json``, see :mod:`mrbench.engine.training.run_diagnostics`);
    ``completions``: the last logged generation batch, one row per completion (``B_total`` rows at
    most; :func:`~mrbench.engine.training.completion_log.completion_rows`); ``rewards``: every
    training batch's rewards ``[P, G, K]`` with the components' names and weights (``rewards.npz``).
    """

    diagnostics: dict[str, Any]
    completions: list[dict[str, Any]]
    rewards: RewardsRecord


class MultiRewardGRPOTrainer(GRPOTrainer):
    """``GRPOTrainer`` whose advantages are ``method_fn(rewards[P,G,K], weights[K], **method_params)``.

    Extra keyword arguments: ``method_fn`` (a registered method), ``method_params`` (its resolved
    hyper-parameters), ``diagnostics_every`` (compute the ``adv/...`` diagnostics every N
    generation batches; 1 = always), ``shadow_methods`` (methods compared with ``method_fn`` on
    every diagnosed batch, see :func:`~mrbench.engine.training.step_diagnostics.resolve_shadows`; None =
    every other registered method, ``()`` = none) and ``rollout`` (a task's multi-turn rollout, run
    in place of TRL's single-turn generation) and ``shared_prefix`` (encode each group's prompt once
    when scoring and generating, where the model :func:`~mrbench.engine.training.shared_prefix.supports` it;
    False: TRL's own passes). All other arguments go to ``GRPOTrainer``.

    ``advantage_hook`` and ``step_diagnostics`` are the collaborators; ``shadow_fns`` holds the
    resolved shadows (name → function, called with default hyper-parameters).
    """

    def __init__(
        self,
        *args: Any,
        method_fn: Callable[..., torch.Tensor],
        method_params: dict[str, Any] | None = None,
        diagnostics_every: int = 1,
        shadow_methods: tuple[str, ...] | None = None,
        rollout: Rollout | None = None,
        shared_prefix: bool = False,
        **kwargs: Any,
    ) -> None:
        self.advantage_hook = AdvantageHook(method_fn, method_params)
        self.step_diagnostics = StepDiagnostics(resolve_shadows(method_fn, shadow_methods), diagnostics_every)
        if rollout is not None:
            if kwargs.get("rollout_func") is not None:
                raise ValueError("pass either a task rollout or a TRL rollout_func, not both")
            kwargs["rollout_func"] = trl_rollout_func(rollout)
        super().__init__(*args, **kwargs)
        if rollout is not None and self.use_vllm:
            # A rollout returns no sampling logprobs (``logprobs`` None), so TRL has nothing to
            # correct vLLM's sampling against: train on the episodes as sampled, as without vLLM.
            self.vllm_importance_sampling_correction = False
        # After TRL's fused LM head (added in its __init__), before accelerate wraps the model.
        self.shared_prefix = shared_prefix and prefix.install(self.model)
        if self.shared_prefix and self.ref_model is not None:
            prefix.install(self.ref_model)
        if self.use_vllm and getattr(self, "vllm_generation", None) is not None:
            if prefix.vllm_prefix_caching(self.vllm_generation) is False:
                log.warning("vLLM's prefix caching is off: each of a prompt's G samples prefills it again")

    # ------------------------------------------------------------------ TRL's override points

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):  # type: ignore[override]
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        return self.advantage_hook.keep(rewards_per_func)  # gathered over processes: [B_total, K]

    def _generate_and_score_completions(self, inputs):  # type: ignore[override]
        output = super()._generate_and_score_completions(inputs)
        mode = "train" if self.model.training else "eval"
        acc = self.accelerator
        batch = self.advantage_hook.replace(
            output,
            group=self.num_generations if mode == "train" else self.num_generations_eval,
            reward_weights=self.reward_weights,
            logged=self._logs["advantages"],
            process_index=acc.process_index,
            num_processes=acc.num_processes,
            prompts=self._logs["prompt"],
        )
        self.step_diagnostics.after_batch(
            mode, batch, self._metrics[mode], self.reward_func_names, main_process=acc.is_main_process
        )
        return output

    def _get_per_token_logps_and_entropies(
        self, model, input_ids, attention_mask, logits_to_keep, *args, **kwargs
    ):  # type: ignore[override]
        if not self.shared_prefix:
            return super()._get_per_token_logps_and_entropies(
                model, input_ids, attention_mask, logits_to_keep, *args, **kwargs
            )
        # input_ids [B, P + C]: prompts (left-padded) then completions; scored as [B, C] by TRL.
        with prefix.scoring(input_ids.size(1) - logits_to_keep):
            return super()._get_per_token_logps_and_entropies(
                model, input_ids, attention_mask, logits_to_keep, *args, **kwargs
            )

    # ------------------------------------------------------------------ what the cell reads

    def training_record(self, components: Sequence[str]) -> TrainingRecord:
        """The :class:`TrainingRecord` of the training so far; ``components`` names the reward
        functions, in order (the task's reward components)."""
        weights = [float(w) for w in self.reward_weights]
        return TrainingRecord(
            diagnostics=self.step_diagnostics.accumulator.summary(list(components)),
            completions=completion_rows(self._logs),
            rewards=self.step_diagnostics.rewards.record(components, weights),
        )

    @property
    def shadow_fns(self) -> dict[str, Callable[..., Any]]:
        """The shadow methods (name → function) compared with the method in use."""
        return self.step_diagnostics.shadow_fns

    def save_running_state(self, checkpoint: Path) -> tuple[Any, int]:
        """mrbench's running state beside TRL's, for a training checkpoint
        (:meth:`~mrbench.engine.training.step_diagnostics.StepDiagnostics.save_running_state`; written by
        :mod:`mrbench.engine.cell.resume`)."""
        return self.step_diagnostics.save_running_state(checkpoint)

    def restore_running_state(self, checkpoint: Path, diagnostics: Any, batches_scored: int) -> None:
        """Inverse of :meth:`save_running_state`, when the cell resumes from ``checkpoint``."""
        self.step_diagnostics.restore_running_state(checkpoint, diagnostics, batches_scored)
