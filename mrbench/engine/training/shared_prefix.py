"""Shared-prefix scoring and generation: each GRPO group's prompt encoded once, not G times.

A GRPO batch holds ``G`` completions of each prompt, and TRL 1.16 runs the whole ``[B, P + C]``
batch through the model both when it samples (prefill over ``B`` copies of the prompts) and when
it scores log-probabilities for the loss (forward and backward over ``B`` copies). Here the
distinct prompts run once, with a KV cache, and the cache, expanded to the ``B`` rows with an
index (``index_select``, so gradients from every completion flow back into the one prompt pass),
serves the completions:

- **Scoring** (:func:`install`, :func:`scoring`): inside :func:`scoring`, TRL's fused-head
  forward (``model(input_ids, attention_mask, labels, fused_lm_head=True)``, added by TRL's
  ``add_fused_lm_head``) runs as two passes: the backbone over the ``N`` distinct prompts without
  their last column (``[N, P - 1]``, TRL's left padding and positions kept), then TRL's own forward
  over the last prompt column and the completions (``[B, 1 + C]``) against the expanded cache, so
  TRL's head computes each completion token's log-probability (and entropy) from the same hidden
  state as in one pass. Both passes run inside one call of the (possibly DDP-wrapped) model.
- **Generation** (:func:`install`): ``model.generate`` on left-padded ``input_ids [B, P]`` with
  repeated rows prefills the ``N`` distinct prompts but their last column once and hands
  ``generate`` the cache expanded to ``B`` rows; ``generate`` then runs the last column and samples
  as it would have, from the same random stream.

The results equal the repeated computation up to float rounding (different matrix shapes);
positions and masks are the ones TRL and ``generate`` use. Supported: decoder-only models whose
every layer is full attention with a growing ``DynamicCache`` (:data:`MODEL_TYPES`), without
gradient checkpointing (which turns the cache off in training); anything else runs TRL's path.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import inspect
import os
import types
from collections.abc import Iterator
from typing import Any

import torch

from mrbench.core.errors import UserError

MODEL_TYPES = frozenset({"llama", "qwen2", "qwen3", "mistral"})
"""``config.model_type`` values with full attention in every layer and a ``DynamicCache``."""

_scoring_width: contextvars.ContextVar[int | None] = contextvars.ContextVar(
    "shared_prefix_width", default=None
)


def supports(model: Any) -> bool:
    """Whether ``model`` (a transformers causal LM) can take the shared-prefix path: a known
    full-attention decoder (:data:`MODEL_TYPES`), no sliding window in use."""
    config = getattr(model, "config", None)
    if config is None or getattr(config, "model_type", None) not in MODEL_TYPES:
        return False
    if getattr(config, "use_sliding_window", False) and getattr(config, "sliding_window", None):
        return False
    layer_types = getattr(config, "layer_types", None) or []
    return all(kind == "full_attention" for kind in layer_types)


def fsdp_sharded() -> bool:
    """Whether this process trains under FSDP (``accelerate launch`` of the ``fsdp`` preset sets
    ``ACCELERATE_USE_FSDP``)."""
    return os.environ.get("ACCELERATE_USE_FSDP", "").lower() in ("1", "true", "yes")


def enabled(
    setting: str, model_name: str, model: Any, *, tiny_presets: tuple[str, ...] | frozenset[str] = ()
) -> bool:
    """Whether a cell trains with shared prefixes: ``setting`` is
    :attr:`~mrbench.engine.config.TrainSettings.shared_prefix` (``on``, ``off`` or ``auto``: on
    unless ``model_name`` is one of ``tiny_presets``), for the loaded ``model``; ``on`` for a
    model that :func:`supports` says no to is a :class:`UserError`."""
    if setting == "off":
        return False
    if fsdp_sharded():
        # FSDP frees each layer's full weights after its forward pass; the backward of the prefix's
        # own pass then finds them gone ("setStorage ... storage of size 0", seen in the rehearsal of
        # the paper preset's FSDP cells on the CPU: mrbench sweep --preset paper --rehearse).
        if setting == "on":
            raise UserError(
                f"shared_prefix=on does not work with FSDP (model {model_name!r}): set shared_prefix=auto "
                "or off, or --distributed ddp"
            )
        return False
    if not supports(model):
        if setting == "on":
            kind = getattr(getattr(model, "config", None), "model_type", None)
            raise UserError(
                f"shared_prefix=on, but model {model_name!r} (model_type {kind!r}) is not one the "
                f"shared-prefix path supports ({', '.join(sorted(MODEL_TYPES))}, full attention); "
                "set shared_prefix=auto or off"
            )
        return False
    return setting == "on" or model_name not in tiny_presets


def vllm_prefix_caching(engine: Any) -> bool | None:
    """Whether TRL's colocated vLLM ``engine`` (``trainer.vllm_generation``) caches prefixes
    (vLLM's V1 engine does by default, and TRL resets that cache after each weight sync), so the
    ``G`` samples of a prompt share its prefill there too; None when it cannot be read."""
    llm = getattr(engine, "llm", None)
    config = getattr(getattr(llm, "llm_engine", None), "cache_config", None) or getattr(
        getattr(getattr(llm, "llm_engine", None), "vllm_config", None), "cache_config", None
    )
    value = getattr(config, "enable_prefix_caching", None)
    return None if value is None else bool(value)


def prompt_groups(
    input_ids: torch.Tensor, attention_mask: torch.Tensor, width: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The distinct prompts of a left-padded batch and the prompt of each row.

    ``input_ids``/``attention_mask`` ``[B, L]``, prompts in the first ``width`` columns. Returns
    ``(prompt_ids [N, width], prompt_mask [N, width], row_prompt [B])``: rows ``i`` and ``j`` share a
    prompt when their tokens and mask agree over those columns (any order in the batch).
    """
    key = input_ids[:, :width].masked_fill(attention_mask[:, :width] == 0, -1)
    unique, row_prompt = torch.unique(key, dim=0, return_inverse=True)
    prompt_mask = (unique != -1).to(attention_mask.dtype)
    return unique.clamp(min=0), prompt_mask, row_prompt


@contextlib.contextmanager
def scoring(prompt_width: int) -> Iterator[None]:
    """Within it, a fused-head forward of a model :func:`install` patched scores its batch with
    the prompts (the first ``prompt_width`` columns) encoded once per distinct prompt."""
    token = _scoring_width.set(prompt_width)
    try:
        yield
    finally:
        _scoring_width.reset(token)


def install(model: Any) -> bool:
    """Patch ``model.forward`` (after TRL's ``add_fused_lm_head``) and ``model.generate`` for the
    shared-prefix path; returns False (and patches nothing) when the model is not :func:`supports`."""
    if not supports(model):
        return False
    if getattr(model, "_mrbench_shared_prefix", False):
        return True
    fused_forward = model.forward  # TRL's, bound to the model
    original_generate = model.generate

    @functools.wraps(type(model).forward)  # generate validates its kwargs against this signature
    def forward(self: Any, *args: Any, **kwargs: Any) -> Any:
        width = _scoring_width.get()
        if width is None or args or not kwargs.get("fused_lm_head") or not _plain_text(kwargs):
            return fused_forward(*args, **kwargs)
        if self.training and _checkpointing(self):
            return fused_forward(*args, **kwargs)
        return _score(self, fused_forward, width, **kwargs)

    @functools.wraps(original_generate)
    def generate(self: Any, *args: Any, **kwargs: Any) -> Any:
        return _generate(self, original_generate, *args, **kwargs)

    model.forward = types.MethodType(forward, model)
    model.generate = types.MethodType(generate, model)
    model._mrbench_shared_prefix = True
    return True


def _checkpointing(model: Any) -> bool:
    """Whether activation (gradient) checkpointing is on: transformers turns the cache off then."""
    flag = getattr(model, "is_activation_checkpointing", None)
    return bool(flag if flag is not None else getattr(model, "is_gradient_checkpointing", False))


_TEXT_KEYS = frozenset({"input_ids", "attention_mask", "labels", "fused_lm_head", "output_router_logits"})


def _plain_text(kwargs: dict[str, Any]) -> bool:
    """Only text inputs (no images, token types, caches or positions of the caller's own)."""
    return (
        set(kwargs) <= _TEXT_KEYS
        and kwargs.get("input_ids") is not None
        and kwargs.get("attention_mask") is not None
    )


def _cache_name(backbone: Any) -> str:
    """The backbone's cache keyword: ``cache`` (transformers ≥ 5.2x) or ``past_key_values``."""
    params = inspect.signature(type(backbone).forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def _prefill(model: Any, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, **extra: Any) -> Any:
    """The backbone over ``prompt_ids``/``prompt_mask`` ``[N, W]`` with a fresh cache; returns it."""
    backbone = model.base_model
    name = _cache_name(backbone)
    out = backbone(input_ids=prompt_ids, attention_mask=prompt_mask, use_cache=True, **extra)
    return getattr(out, name)


def _score(model: Any, fused_forward: Any, width: int, **kwargs: Any) -> Any:
    """TRL's fused-head output for ``input_ids [B, L]`` whose first ``width`` columns are the
    prompts; its per-token fields are ``[B, L - width]`` (the completion columns' scores), which
    is what TRL keeps (``[:, -logits_to_keep:]``) of its ``[B, L - 1]``."""
    input_ids, attention_mask, labels = (
        kwargs.pop("input_ids"),
        kwargs.pop("attention_mask"),
        kwargs.pop("labels"),
    )
    prompt_ids, prompt_mask, row_prompt = prompt_groups(input_ids, attention_mask, width)
    if width < 2 or prompt_ids.size(0) == input_ids.size(0):  # nothing shared: TRL's own pass
        return fused_forward(input_ids=input_ids, attention_mask=attention_mask, labels=labels, **kwargs)
    cache = _prefill(model, prompt_ids[:, : width - 1], prompt_mask[:, : width - 1])
    cache.reorder_cache(row_prompt)  # [N, ...] -> [B, ...]; index_select: gradients add up per prompt
    return fused_forward(
        input_ids=input_ids[:, width - 1 :],
        attention_mask=attention_mask,
        labels=labels[:, width - 1 :],
        **{_cache_name(model.base_model): cache},
        **kwargs,
    )


def _generate(model: Any, original_generate: Any, *args: Any, **kwargs: Any) -> Any:
    """``generate`` with the distinct prompts' prefill (but their last column) run once and its
    cache expanded to the batch; ``generate`` as is when nothing is shared or the call is not a
    plain left-padded text batch."""
    input_ids, attention_mask = kwargs.get("input_ids"), kwargs.get("attention_mask")
    other = set(kwargs) - {"input_ids", "attention_mask", "generation_config", "max_new_tokens",
                           "disable_compile", "pad_token_id", "eos_token_id", "do_sample",
                           "temperature", "top_k", "top_p", "min_p", "repetition_penalty"}  # fmt: skip
    config = kwargs.get("generation_config") or model.generation_config
    if (
        args
        or other
        or input_ids is None
        or attention_mask is None
        or input_ids.dim() != 2
        or input_ids.size(1) < 2
        or (getattr(config, "num_beams", None) or 1) != 1
        or (getattr(config, "num_return_sequences", None) or 1) != 1
        or getattr(config, "cache_implementation", None) not in (None, "dynamic")
        or getattr(config, "use_cache", True) is False
    ):
        return original_generate(*args, **kwargs)
    width = input_ids.size(1)
    prompt_ids, prompt_mask, row_prompt = prompt_groups(input_ids, attention_mask, width)
    if prompt_ids.size(0) == input_ids.size(0):
        return original_generate(**kwargs)
    head_ids, head_mask = prompt_ids[:, :-1], prompt_mask[:, :-1]
    # generate's positions for a left-padded batch: the running count of real tokens, from 0.
    positions = (head_mask.long().cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        cache = _prefill(model, head_ids, head_mask, position_ids=positions)
    cache.reorder_cache(row_prompt)
    return original_generate(**kwargs, **{_cache_name(model.base_model): cache})
