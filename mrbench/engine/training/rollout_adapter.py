"""A task's multi-turn rollout (:data:`mrbench.core.rollout.Rollout`) as TRL's ``rollout_func``.

TRL 1.16 calls ``rollout_func(prompts, trainer)`` in place of its single-turn generation
(``GRPOTrainer._generate``) and reads ``prompt_ids``, ``completion_ids``, ``logprobs`` and
``env_mask`` from the result; every other key reaches the reward functions as a column.
:func:`trl_rollout_func` wraps a task's rollout in that form and hands it a
:class:`~mrbench.core.rollout.RolloutContext` built from the trainer (:func:`rollout_context`),
whose ``generate`` samples from the policy being trained (:func:`policy_sampler`): transformers'
``generate`` on TRL's unwrapped model, or TRL's colocated vLLM engine (:func:`vllm_sampler`).

The functions read these attributes of a ``GRPOTrainer``: ``model``, ``model_wrapped``,
``accelerator``, ``args``, ``processing_class``, ``max_completion_length``, ``eos_token_ids``,
``generation_config``, ``generation_kwargs``, ``use_vllm`` and ``vllm_generation``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

from mrbench.core.rollout import Rollout, RolloutBatch, RolloutContext, TokenGenerate

# Keys TRL reads from a ``rollout_func`` result; a rollout's own columns must not shadow them.
TRL_ROLLOUT_KEYS = frozenset({"prompt_ids", "completion_ids", "logprobs", "env_mask"})


def trl_rollout_func(rollout: Rollout) -> Callable[[list[Any], Any], dict[str, Any]]:
    """``rollout`` in TRL's ``rollout_func(prompts, trainer) -> dict`` form.

    TRL passes this process's ``B`` prompts (each already repeated per generation) and the trainer,
    and reads ``prompt_ids``, ``completion_ids``, ``logprobs`` (``None``: no importance-sampling
    correction) and ``env_mask`` (multiplied into the loss mask); every other key reaches the
    reward functions as a column.
    """

    def rollout_func(prompts: list[Any], trainer: Any) -> dict[str, Any]:
        batch = rollout(prompts, rollout_context(trainer))
        return trl_rollout_output(batch, len(prompts))

    rollout_func.__name__ = getattr(rollout, "__name__", "rollout")
    return rollout_func


def trl_rollout_output(batch: RolloutBatch, n_prompts: int) -> dict[str, Any]:
    """``batch`` as the dict TRL reads, checked first: one episode per prompt, no column named
    like one of TRL's own keys (:data:`TRL_ROLLOUT_KEYS`)."""
    if len(batch.prompt_ids) != n_prompts:
        raise ValueError(f"the rollout returned {len(batch.prompt_ids)} episodes for {n_prompts} prompts")
    clash = TRL_ROLLOUT_KEYS & set(batch.columns)
    if clash:
        raise ValueError(f"rollout columns {sorted(clash)} would shadow the trainer's own fields")
    return {
        "prompt_ids": batch.prompt_ids,
        "completion_ids": batch.completion_ids,
        "logprobs": None,
        "env_mask": batch.env_mask,
        **batch.columns,
    }


def rollout_context(trainer: Any) -> RolloutContext:
    """What a task's rollout may use for the next generation batch (see :mod:`mrbench.core.rollout`).

    ``max_new_tokens`` is ``GRPOConfig.max_completion_length`` (read as the per-turn budget);
    ``max_length`` is the model's ``max_position_embeddings`` when its config has one, or vLLM's
    context when that is smaller (an episode stops before the engine would refuse it).
    """
    config = getattr(trainer.model, "config", None)
    limits = [getattr(config, "max_position_embeddings", None)]
    if trainer.use_vllm:
        limits.append(getattr(trainer.args, "vllm_max_model_length", None))
    known = [n for n in limits if n]
    return RolloutContext(
        tokenizer=trainer.processing_class,
        generate=policy_sampler(trainer),
        max_new_tokens=trainer.max_completion_length,
        eos_token_ids=tuple(trainer.eos_token_ids),
        max_length=min(known) if known else None,
        any_live=functools.partial(any_live, trainer),
    )


def any_live(trainer: Any, live: bool) -> bool:
    """Whether any process of the cell still has a live episode (a max over processes: every
    process calls it once per turn; see :attr:`~mrbench.core.rollout.RolloutContext.any_live`)."""
    acc = trainer.accelerator
    if acc.num_processes == 1:
        return live
    flag = torch.tensor([1 if live else 0], device=acc.device)
    return bool(acc.reduce(flag, reduction="sum").item() > 0)


def policy_sampler(trainer: Any) -> TokenGenerate:
    """Sampling with the model being trained and the run's generation settings.

    With ``use_vllm``: TRL's colocated vLLM engine (:func:`vllm_sampler`). Otherwise each call
    left-pads its ``B`` sequences into ``input_ids`` ``[B, W]`` and returns the ``B`` rows of
    transformers' ``generate`` output past column ``W`` (new tokens, EOS then padding when a
    row ended early).
    """
    from trl.models.utils import unwrap_model_for_generation

    if trainer.use_vllm:
        return vllm_sampler(trainer)
    tokenizer = trainer.processing_class
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    config, overrides = trainer.generation_config, trainer.generation_kwargs

    def generate(batch: list[list[int]], max_new_tokens: int) -> list[list[int]]:
        device = trainer.accelerator.device
        width = max(len(ids) for ids in batch)
        input_ids = torch.full((len(batch), width), pad, dtype=torch.long)
        attention = torch.zeros((len(batch), width), dtype=torch.long)
        for row, ids in enumerate(batch):
            input_ids[row, width - len(ids) :] = torch.tensor(ids, dtype=torch.long)
            attention[row, width - len(ids) :] = 1
        with (
            unwrap_model_for_generation(
                trainer.model_wrapped, trainer.accelerator, generation_kwargs=overrides
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


def vllm_sampler(trainer: Any) -> TokenGenerate:
    """Sampling through TRL's colocated vLLM engine (``trainer.vllm_generation.llm``).

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

    engine = trainer.vllm_generation
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
    stop = list(trainer.eos_token_ids)

    def generate(batch: list[list[int]], max_new_tokens: int) -> list[list[int]]:
        params = SamplingParams(n=1, max_tokens=max_new_tokens, stop_token_ids=stop, **settings)
        prompts = [{"prompt_token_ids": list(ids)} for ids in batch]
        outputs = engine.llm.generate(prompts, sampling_params=params, use_tqdm=False)
        return [list(output.outputs[0].token_ids) for output in outputs]

    return generate
