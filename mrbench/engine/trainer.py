"""TRL glue: a ``GRPOTrainer`` whose advantages come from a registered mrbench method.

TRL 1.16 has no advantage hook, so the subclass
1. keeps the gathered ``rewards_per_func`` ``[B_total, K]`` that ``_calculate_rewards`` returns,
2. lets ``_generate_and_score_completions`` run unchanged (generation, reward calls, KL inputs,
   TRL's own reward logging), then
3. recomputes the advantages from the kept rewards with the chosen method, on whole groups of the
   global batch, slices them to this process (:func:`mrbench.engine.distributed.local_slice`, the
   rows TRL's ``process_slice`` gives it), and replaces ``advantages`` in the returned batch, plus
   the tail of ``_logs["advantages"]`` so that logged completions show what was trained on.

Everything else (loss, clipping, KL, optimisation) is TRL's.

Shadow estimators: with the diagnostics, every other registered method (or the ones named in
``shadow_methods``) is run with its default hyper-parameters on the same rewards, and compared
with the method in use (``adv/shadow/<method>/...`` and ``adv/resolution``, see
:mod:`mrbench.core.layout`). They only observe: what TRL trains on is the method in use. A
shadow that raises on a batch is left out of that batch, with one warning per method per run.

This module is the one place that touches TRL's internals: besides the advantage hook it reads
the completion log (:meth:`MultiRewardGRPOTrainer.completion_log`) and runs a task's own
multi-turn rollout (:data:`mrbench.core.rollout.Rollout`) as TRL's ``rollout_func``, handing it
a :class:`~mrbench.core.rollout.RolloutContext` built from the trainer.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

import torch
from trl import GRPOTrainer

from mrbench.core import layout
from mrbench.core.contracts import completion_text
from mrbench.core.rollout import Rollout, RolloutBatch, RolloutContext, TokenGenerate
from mrbench.engine.distributed import local_slice
from mrbench.engine.run_diagnostics import DiagnosticsAccumulator
from mrbench.methods import METHODS
from mrbench.methods.diagnostics import diagnostics, shadow_diagnostics

log = logging.getLogger(__name__)

# Keys TRL reads from a ``rollout_func`` result; a rollout's own columns must not shadow them.
_TRL_ROLLOUT_KEYS = frozenset({"prompt_ids", "completion_ids", "logprobs", "env_mask"})


def resolve_shadows(
    method_fn: Callable[..., Any], names: Iterable[str] | None
) -> dict[str, Callable[..., Any]]:
    """The shadow methods of a run: name → function, without the method in use (``method_fn``).

    ``names`` None: every registered method (plugins of the ``mrbench.methods`` entry-point group
    included; one that cannot be loaded is left out); otherwise exactly those (an unknown name
    raises :class:`mrbench.core.errors.UnknownNameError` here, before training starts).
    """
    entries = METHODS.catalog()[0] if names is None else [METHODS.get(name) for name in names]
    return {entry.name: entry.obj for entry in entries if entry.obj is not method_fn}


class MultiRewardGRPOTrainer(GRPOTrainer):
    """``GRPOTrainer`` whose advantages are ``method_fn(rewards[P,G,K], weights[K], **method_params)``.

    Extra keyword arguments: ``method_fn`` (a registered method), ``method_params`` (its resolved
    hyper-parameters), ``diagnostics_every`` (compute the ``adv/...`` diagnostics every N
    generation batches; 1 = always), ``shadow_methods`` (methods compared with ``method_fn`` on
    every diagnosed batch, see :func:`resolve_shadows`; None = every other registered method,
    ``()`` = none) and ``rollout`` (a task's multi-turn rollout, run in place of TRL's
    single-turn generation). All other arguments go to ``GRPOTrainer``.

    ``shadow_fns`` holds the resolved shadows (name → function, called with default
    hyper-parameters).
    """

    def __init__(
        self,
        *args: Any,
        method_fn: Callable[..., torch.Tensor],
        method_params: dict[str, Any] | None = None,
        diagnostics_every: int = 1,
        shadow_methods: tuple[str, ...] | None = None,
        rollout: Rollout | None = None,
        **kwargs: Any,
    ) -> None:
        self.method_fn = method_fn
        self.method_params = dict(method_params or {})
        self.diagnostics_every = max(1, diagnostics_every)
        self.diag_accumulator = DiagnosticsAccumulator()
        self.shadow_fns = resolve_shadows(method_fn, shadow_methods)
        self._shadows_warned: set[str] = set()
        self._kept_rewards: torch.Tensor | None = None
        self._batches_scored = 0
        if rollout is not None:
            if kwargs.get("rollout_func") is not None:
                raise ValueError("pass either a task rollout or a TRL rollout_func, not both")
            kwargs["rollout_func"] = self._trl_rollout_func(rollout)
        super().__init__(*args, **kwargs)
        if rollout is not None and self.use_vllm:
            # A rollout returns no sampling logprobs (``logprobs`` None), so TRL has nothing to
            # correct vLLM's sampling against: train on the episodes as sampled, as without vLLM.
            self.vllm_importance_sampling_correction = False

    # ------------------------------------------------------------------ multi-turn rollouts

    def rollout_context(self) -> RolloutContext:
        """What a task's rollout may use for the next generation batch (see :mod:`mrbench.core.rollout`).

        ``max_new_tokens`` is ``GRPOConfig.max_completion_length`` (read as the per-turn budget);
        ``max_length`` is the model's ``max_position_embeddings`` when its config has one, or vLLM's
        context when that is smaller (an episode stops before the engine would refuse it).
        """
        config = getattr(self.model, "config", None)
        limits = [getattr(config, "max_position_embeddings", None)]
        if self.use_vllm:
            limits.append(getattr(self.args, "vllm_max_model_length", None))
        known = [n for n in limits if n]
        return RolloutContext(
            tokenizer=self.processing_class,
            generate=self._policy_sampler(),
            max_new_tokens=self.max_completion_length,
            eos_token_ids=tuple(self.eos_token_ids),
            max_length=min(known) if known else None,
            any_live=self._any_live,
        )

    def _any_live(self, live: bool) -> bool:
        """Whether any process of the cell still has a live episode (a max over processes: every
        process calls it once per turn; see :attr:`~mrbench.core.rollout.RolloutContext.any_live`)."""
        acc = self.accelerator
        if acc.num_processes == 1:
            return live
        flag = torch.tensor([1 if live else 0], device=acc.device)
        return bool(acc.reduce(flag, reduction="sum").item() > 0)

    def _policy_sampler(self) -> TokenGenerate:
        """Sampling with the model being trained and the run's generation settings.

        With ``use_vllm``: TRL's colocated vLLM engine (:meth:`_vllm_sampler`). Otherwise each call
        left-pads its ``B`` sequences into ``input_ids`` ``[B, W]`` and returns the ``B`` rows of
        transformers' ``generate`` output past column ``W`` (new tokens, EOS then padding when a
        row ended early).
        """
        from trl.models.utils import unwrap_model_for_generation

        if self.use_vllm:
            return self._vllm_sampler()
        tokenizer = self.processing_class
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        config, overrides = self.generation_config, self.generation_kwargs

        def generate(batch: list[list[int]], max_new_tokens: int) -> list[list[int]]:
            device = self.accelerator.device
            width = max(len(ids) for ids in batch)
            input_ids = torch.full((len(batch), width), pad, dtype=torch.long)
            attention = torch.zeros((len(batch), width), dtype=torch.long)
            for row, ids in enumerate(batch):
                input_ids[row, width - len(ids) :] = torch.tensor(ids, dtype=torch.long)
                attention[row, width - len(ids) :] = 1
            with (
                unwrap_model_for_generation(
                    self.model_wrapped, self.accelerator, generation_kwargs=overrides
                ) as model,
                torch.no_grad(),
            ):
                out = model.generate(
                    input_ids=input_ids.to(device),
                    attention_mask=attention.to(device),
                    generation_config=config,
                    max_new_tokens=max_new_tokens,
                )
            return [row.tolist() for row in out[:, width:].cpu()]

        return generate

    def _vllm_sampler(self) -> TokenGenerate:
        """Sampling through TRL's colocated vLLM engine (``self.vllm_generation.llm``).

        TRL loads the policy's current weights into the engine before it calls the rollout
        (``GRPOTrainer._generate``), so every turn samples from the policy being trained. Each
        call sends its ``B`` sequences as token-id prompts, one sample each, with the sampling
        settings TRL gives vLLM for its own generation (temperature, top-p, top-k, min-p,
        repetition penalty, ``generation_kwargs``), ``max_new_tokens`` and every id of
        ``eos_token_ids`` as a stop token. vLLM returns the outputs in prompt order, and a stop
        token stays the last id of its output, as :data:`~mrbench.core.rollout.TokenGenerate` asks.

        Only one engine per process, without sleep mode: several tensor-parallel ranks would have
        to call the engine together, turn for turn, which a rollout whose episodes end at different
        turns cannot promise.
        """
        from vllm import SamplingParams

        engine = self.vllm_generation
        if engine.mode != "colocate" or engine.tensor_parallel_size != 1 or engine.enable_sleep_mode:
            raise ValueError(
                "a task's multi-turn rollout generates through vLLM only with vllm_mode='colocate', "
                "vllm_tensor_parallel_size=1 and vllm_enable_sleep_mode=False"
            )
        settings = {
            "temperature": engine.temperature,
            "top_p": engine.top_p,
            "top_k": engine.top_k,
            "min_p": 0.0 if engine.min_p is None else engine.min_p,
            "repetition_penalty": engine.repetition_penalty,
            **engine.generation_kwargs,
        }
        stop = list(self.eos_token_ids)

        def generate(batch: list[list[int]], max_new_tokens: int) -> list[list[int]]:
            params = SamplingParams(n=1, max_tokens=max_new_tokens, stop_token_ids=stop, **settings)
            prompts = [{"prompt_token_ids": list(ids)} for ids in batch]
            outputs = engine.llm.generate(prompts, sampling_params=params, use_tqdm=False)
            return [list(output.outputs[0].token_ids) for output in outputs]

        return generate

    def _trl_rollout_func(self, rollout: Rollout) -> Callable[[list[Any], Any], dict[str, Any]]:
        """``rollout`` in TRL's ``rollout_func(prompts, trainer) -> dict`` form.

        TRL passes this process's ``B`` prompts (each already repeated per generation) and reads
        ``prompt_ids``, ``completion_ids``, ``logprobs`` (``None``: no importance-sampling
        correction) and ``env_mask`` (multiplied into the loss mask); every other key reaches the
        reward functions as a column.
        """

        def rollout_func(prompts: list[Any], trainer: Any) -> dict[str, Any]:
            batch = rollout(prompts, self.rollout_context())
            return self._trl_rollout_output(batch, len(prompts))

        rollout_func.__name__ = getattr(rollout, "__name__", "rollout")
        return rollout_func

    @staticmethod
    def _trl_rollout_output(batch: RolloutBatch, n_prompts: int) -> dict[str, Any]:
        if len(batch.prompt_ids) != n_prompts:
            raise ValueError(f"the rollout returned {len(batch.prompt_ids)} episodes for {n_prompts} prompts")
        clash = _TRL_ROLLOUT_KEYS & set(batch.columns)
        if clash:
            raise ValueError(f"rollout columns {sorted(clash)} would shadow the trainer's own fields")
        return {
            "prompt_ids": batch.prompt_ids,
            "completion_ids": batch.completion_ids,
            "logprobs": None,
            "env_mask": batch.env_mask,
            **batch.columns,
        }

    # ------------------------------------------------------------------ advantage hook

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):  # type: ignore[override]
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self._kept_rewards = rewards_per_func  # gathered over processes: [B_total, K]
        return rewards_per_func

    def _generate_and_score_completions(self, inputs):  # type: ignore[override]
        output = super()._generate_and_score_completions(inputs)
        if self._kept_rewards is None:  # pragma: no cover - TRL always scores before returning
            raise RuntimeError("TRL did not call _calculate_rewards; the advantage hook cannot apply")
        mode = "train" if self.model.training else "eval"
        group = self.num_generations if mode == "train" else self.num_generations_eval
        rewards = self._kept_rewards.detach().float().cpu()
        k = rewards.shape[1]
        grouped = rewards.view(-1, group, k)  # [P, G, K]
        weights = self.reward_weights.detach().float().cpu()
        advantages = self.method_fn(grouped, weights, **self.method_params).reshape(-1)  # [B_total]

        # Whole groups of the global batch were scored above; this process trains on its own rows.
        n_local = output["advantages"].shape[0]
        acc = self.accelerator
        local = local_slice(advantages, n_local, acc.process_index, acc.num_processes)
        output["advantages"] = local.to(device=output["advantages"].device, dtype=output["advantages"].dtype)

        # TRL appended this batch's GRPO advantages to its completion log; show ours instead.
        logged = self._logs["advantages"]
        tail = min(len(logged), advantages.numel())
        values = advantages.tolist()[-tail:] if tail else []
        for offset, value in enumerate(values):
            logged[len(logged) - tail + offset] = value

        # Diagnostics and shadows see the gathered batch; only the main process's logs are kept.
        if acc.is_main_process and self._batches_scored % self.diagnostics_every == 0:
            self._log_diagnostics(mode, grouped, weights, advantages.view(-1, group))
        self._batches_scored += 1
        self._kept_rewards = None
        return output

    def _log_diagnostics(
        self, mode: str, rewards: torch.Tensor, weights: torch.Tensor, adv: torch.Tensor
    ) -> None:
        """Append this batch's ``adv/...`` values to TRL's per-step metrics.

        ``rewards`` ``[P, G, K]``, ``weights`` ``[K]``, ``adv`` ``[P, G]`` (the method in use).
        """
        shadows, compared = self._shadow_step(rewards, weights, adv)
        # The grpo shadow (default eps) is what diagnostics() would compute for its sign flips.
        diag = {**diagnostics(rewards, weights, adv, grpo_advantages=shadows.get("grpo")), **compared}
        metrics = self._metrics[mode]
        for key in (
            "mean_offdiag_corr",
            "frac_zero_var_groups",
            "denominator_mean",
            "sign_flip_vs_grpo",
            "adv_abs_mean",
            "adv_std",
            "adv_max_abs",
        ):
            value = diag.get(key)
            if value is not None:
                metrics[layout.adv_metric(key.removeprefix("adv_"))].append(float(value))
        for name, share in zip(self.reward_func_names, diag.get("share") or [], strict=False):
            if share is not None:  # undefined when no group has any spread in the advantages
                metrics[layout.adv_share(name)].append(float(share))
        if compared["resolution"] is not None:  # undefined when no group has two distinct reward vectors
            metrics[layout.ADV_RESOLUTION].append(compared["resolution"])
        for name, stats in compared["shadow"].items():
            for stat, value in stats.items():
                if value is not None:
                    metrics[layout.shadow_metric(name, stat)].append(value)
        if mode == "train":
            self.diag_accumulator.add(diag)

    def _shadow_step(
        self, rewards: torch.Tensor, weights: torch.Tensor, adv: torch.Tensor
    ) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        """Run the shadow methods on ``rewards`` ``[P, G, K]`` and compare them with ``adv`` ``[P, G]``.

        Returns the shadows' advantages (name → ``[P, G]``; a shadow that raised or returned
        another shape is left out) and :func:`~mrbench.methods.diagnostics.shadow_diagnostics`.
        """
        shadows: dict[str, torch.Tensor] = {}
        for name, fn in self.shadow_fns.items():
            try:
                out = torch.as_tensor(fn(rewards, weights))
                if out.shape != adv.shape:
                    raise ValueError(f"returned shape {tuple(out.shape)}, expected {tuple(adv.shape)}")
            except Exception as exc:  # a shadow only observes: it must never stop training
                if name not in self._shadows_warned:
                    self._shadows_warned.add(name)
                    log.warning(
                        "shadow method %r is skipped on a batch it cannot handle (%s: %s); "
                        "further failures of it are skipped without a warning",
                        name,
                        type(exc).__name__,
                        exc,
                    )
                continue
            shadows[name] = out
        return shadows, shadow_diagnostics(rewards, adv, shadows)

    # ------------------------------------------------------------------ completion log

    def completion_log(self) -> list[dict[str, Any]]:
        """The last logged generation batch, one row per completion (``B_total`` rows at most).

        Row: ``{"prompt": last prompt message's text, "completion": assistant text,
        "rewards": {component: value or None}, "advantage": the advantage trained on}``.
        """
        logs = self._logs
        prompts, completions = list(logs["prompt"]), list(logs["completion"])
        advantages = list(logs["advantages"])
        rewards = {name: list(values) for name, values in logs["rewards"].items()}
        rows = []
        for i, (prompt, completion) in enumerate(zip(prompts, completions, strict=False)):
            last_user = prompt[-1]["content"] if isinstance(prompt, list) and prompt else str(prompt)
            rows.append(
                {
                    "prompt": last_user,
                    "completion": completion_text(completion),
                    "rewards": {n: values[i] if i < len(values) else None for n, values in rewards.items()},
                    "advantage": advantages[i] if i < len(advantages) else None,
                }
            )
        return rows
