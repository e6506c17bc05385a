"""GPU memory of a training cell, planned before anything starts: pure arithmetic, per GPU.

A cell's memory per GPU is what stays for the whole run plus the larger of its two phases:

- **state** (all run long): the policy's weights, gradients and AdamW moments, all float32 (the
  engine keeps float32 master weights and computes under bfloat16 autocast,
  :func:`mrbench.engine.models.catalog.mixed_precision`): 4 + 4 + 8 = 16 bytes a parameter (the ZeRO
  paper's 16Ψ); the reference model when ``beta > 0`` (bfloat16 under mixed precision: 2 bytes a
  parameter, else 4); vLLM's share of the GPU with ``use_vllm`` (TRL's colocate mode reserves
  ``vllm_gpu_memory_utilization`` of the GPU, 0.3 by default); a fixed headroom (CUDA context,
  communication buffers, allocator fragmentation).
- **training phase** (one micro-batch): the bfloat16 copy of the weights autocast keeps while
  the forward runs; the activations kept for the backward (per token per layer, counted tensor by
  tensor below), or with gradient checkpointing only each layer's input plus one layer's
  activations; the completion logits (``[sequences, completion tokens, vocab]``).
- **generation phase** (one ``generate`` call; skipped with vLLM, whose KV cache lies in its
  share): TRL 1.16 generates ``per_device_train_batch_size × steps_per_generation`` sequences per
  process in one call (``trl/trainer/grpo_config.py``: ``generation_batch_size =
  per_device_train_batch_size × num_processes × steps_per_generation``, ``steps_per_generation``
  defaulting to ``gradient_accumulation_steps``), so the KV cache holds
  ``prompts_per_step / processes × num_generations × gradient_accumulation_steps`` sequences of
  ``prompt + completion`` tokens: ``2 × layers × kv_heads × head_dim × bytes`` each token.

Sharded cells (``distributed`` ``fsdp`` or ``zero3`` over ``processes`` GPUs) divide the policy's
state and the reference model by ``processes``; FSDP gathers about two layers' bfloat16 weights at
a time, ZeRO-3 gathers the whole model in 16 bit for generation (TRL's
``gather_deepspeed3_params``). ``ddp`` replicates everything. The numbers are an estimate of the
peak, meant to refuse what cannot fit and to size micro-batches; ``docs/paper.md`` compares them
with published figures.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from mrbench.core.errors import UserError

GB = 10**9
GIB = 2**30
DEFAULT_GPU_BYTES = 80 * GB
"""The GPU assumed when none is visible and ``gpu_memory`` is not given: an 80 GB H100."""
HEADROOM_BYTES = 2 * GIB
"""CUDA context, NCCL buffers and allocator fragmentation kept free (an assumption, docs/paper.md)."""
VLLM_SHARE = 0.3
"""TRL's ``vllm_gpu_memory_utilization`` default (colocate mode)."""
SHARDED = ("fsdp", "zero3")
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(GB|GiB|MB|MiB|TB|TiB)\s*$", re.IGNORECASE)
_UNITS = {"mb": 10**6, "mib": 2**20, "gb": GB, "gib": GIB, "tb": 10**12, "tib": 2**40}


def parse_size(value: Any) -> int:
    """Bytes of a memory size: ``80GB`` (10⁹ bytes each), ``141GiB`` (2³⁰), MB/MiB/TB/TiB, or a
    whole number of bytes; :class:`UserError` otherwise.

    >>> parse_size("80GB"), parse_size("141 GiB"), parse_size(1024)
    (80000000000, 151397597184, 1024)
    """
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    match = _SIZE.match(value) if isinstance(value, str) else None
    if match is None or float(match.group(1)) <= 0:
        raise UserError(
            f"gpu memory {value!r} is not a size: give a number with its unit, e.g. 80GB or 141GiB"
        )
    return int(float(match.group(1)) * _UNITS[match.group(2).lower()])


def show(n_bytes: float) -> str:
    """``n_bytes`` in GB with one decimal.

    >>> show(121_849_864_192)
    '121.8 GB'
    """
    return f"{n_bytes / GB:.1f} GB"


@dataclass(frozen=True)
class Architecture:
    """The facts of a decoder-only model's ``config.json`` the plan needs."""

    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tied: bool
    qkv_bias: bool = False
    qk_norm: bool = False

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Architecture:
        """From a Hugging Face ``config.json`` (Qwen2/Qwen3/Llama keys)."""
        heads = int(config["num_attention_heads"])
        hidden = int(config["hidden_size"])
        return cls(
            layers=int(config["num_hidden_layers"]),
            hidden=hidden,
            heads=heads,
            kv_heads=int(config.get("num_key_value_heads", heads)),
            head_dim=int(config.get("head_dim") or hidden // heads),
            intermediate=int(config["intermediate_size"]),
            vocab=int(config["vocab_size"]),
            tied=bool(config.get("tie_word_embeddings", False)),
            qkv_bias=config.get("model_type") == "qwen2",
            qk_norm=config.get("model_type") == "qwen3",
        )

    @property
    def layer_params(self) -> int:
        """Parameters of one decoder layer (attention, SwiGLU MLP, two RMSNorms)."""
        q, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        attention = self.hidden * (q + 2 * kv) + q * self.hidden
        bias = q + 2 * kv if self.qkv_bias else 0
        norms = 2 * self.hidden + (2 * self.head_dim if self.qk_norm else 0)
        return attention + bias + 3 * self.hidden * self.intermediate + norms

    @property
    def params(self) -> int:
        """All parameters: layers, embedding, the output head unless tied, the final norm.

        >>> ARCHITECTURES["Qwen/Qwen2.5-7B-Instruct"].params
        7615616512
        """
        embeddings = self.vocab * self.hidden * (1 if self.tied else 2)
        return self.layers * self.layer_params + embeddings + self.hidden

    def kv_bytes_per_token(self, value_bytes: int) -> int:
        """KV cache of one token: keys and values of every layer."""
        return 2 * self.layers * self.kv_heads * self.head_dim * value_bytes

    def activation_bytes_per_token(self) -> int:
        """What one layer keeps for its backward pass per token under bfloat16 autocast, tensor by
        tensor: the two RMSNorms' float32 inputs (8h); attention: the normed input, q, the
        attention output and the output projection's input in bf16 (8h) plus k and v (4·kv·d);
        SwiGLU MLP: its bf16 input (2h), gate, up, SiLU output and the product (8·intermediate)."""
        return 18 * self.hidden + 4 * self.kv_heads * self.head_dim + 8 * self.intermediate


def _qwen2(
    layers: int, hidden: int, heads: int, kv: int, inter: int, vocab: int, tied: bool
) -> dict[str, Any]:
    return {
        "model_type": "qwen2",
        "num_hidden_layers": layers,
        "hidden_size": hidden,
        "num_attention_heads": heads,
        "num_key_value_heads": kv,
        "intermediate_size": inter,
        "vocab_size": vocab,
        "tie_word_embeddings": tied,
    }


def _qwen3(layers: int, hidden: int, heads: int, kv: int, inter: int, tied: bool) -> dict[str, Any]:
    return {
        "model_type": "qwen3",
        "num_hidden_layers": layers,
        "hidden_size": hidden,
        "num_attention_heads": heads,
        "num_key_value_heads": kv,
        "head_dim": 128,
        "intermediate_size": inter,
        "vocab_size": 151936,
        "tie_word_embeddings": tied,
    }


CONFIGS: dict[str, dict[str, Any]] = {
    "Qwen/Qwen2.5-Coder-0.5B-Instruct": _qwen2(24, 896, 14, 2, 4864, 151936, True),
    "Qwen/Qwen2.5-Coder-1.5B-Instruct": _qwen2(28, 1536, 12, 2, 8960, 151936, True),
    "Qwen/Qwen2.5-Coder-3B-Instruct": _qwen2(36, 2048, 16, 2, 11008, 151936, True),
    "Qwen/Qwen2.5-Coder-7B-Instruct": _qwen2(28, 3584, 28, 4, 18944, 152064, False),
    "Qwen/Qwen2.5-3B-Instruct": _qwen2(36, 2048, 16, 2, 11008, 151936, True),
    "Qwen/Qwen2.5-7B-Instruct": _qwen2(28, 3584, 28, 4, 18944, 152064, False),
    "Qwen/Qwen3-4B-Thinking-2507": _qwen3(36, 2560, 32, 8, 9728, True),
    "Qwen/Qwen3-8B": _qwen3(36, 4096, 32, 8, 12288, False),
}
"""The paper's models: the keys of their ``config.json`` the plan reads (the table in docs/paper.md)."""
ARCHITECTURES: dict[str, Architecture] = {m: Architecture.from_config(c) for m, c in CONFIGS.items()}


def architecture_of(model: str) -> Architecture | None:
    """The architecture of ``model``: the paper's models by hub id, a local folder by its
    ``config.json``; None when unknown (the tiny presets, a hub id not in the table)."""
    if model in ARCHITECTURES:
        return ARCHITECTURES[model]
    config = Path(model).expanduser() / "config.json"
    try:
        return Architecture.from_config(json.loads(config.read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError, TypeError):
        return None


@dataclass(frozen=True)
class CellShape:
    """What a cell's memory depends on: its model and its train and process settings."""

    model: str
    prompts_per_step: int
    """Prompts per micro-batch over all the cell's processes (``train.prompts_per_step``)."""
    gradient_accumulation_steps: int
    num_generations: int
    prompt_tokens: int
    """The longest prompt assumed (docs/paper.md)."""
    completion_tokens: int
    beta: float = 0.0
    gradient_checkpointing: bool = False
    use_vllm: bool = False
    mixed: bool = True
    """bfloat16 mixed precision (``precision`` auto on a GPU that computes in bfloat16, or bf16)."""
    processes: int = 1
    distributed: str = "ddp"
    vllm_share: float = VLLM_SHARE

    @property
    def shards(self) -> int:
        """Over how many GPUs the policy's state is divided."""
        return self.processes if self.distributed in SHARDED and self.processes > 1 else 1

    @property
    def prompts_per_process(self) -> float:
        return self.prompts_per_step / self.processes

    @property
    def train_sequences(self) -> int:
        """Sequences of one micro-batch on one process (``per_device_train_batch_size``)."""
        return int(self.prompts_per_process * self.num_generations)

    @property
    def generation_sequences(self) -> int:
        """Sequences one process generates in one call (× ``steps_per_generation``)."""
        return self.train_sequences * self.gradient_accumulation_steps


@dataclass(frozen=True)
class MemoryPlan:
    """A cell's memory per GPU, in bytes, part by part (see the module docstring)."""

    shape: CellShape
    gpu_bytes: int
    params: int
    weights: int
    gradients: int
    adam: int
    reference: int
    vllm: int
    headroom: int
    weights_16bit: int
    """The bfloat16 weights one forward holds (autocast's cast copies; FSDP's gathered layers)."""
    activations: int
    logits: int
    kv_cache: int
    generation_weights: int
    """Weights gathered for generation (ZeRO-3 only)."""

    @property
    def state(self) -> int:
        """What stays all run long."""
        return self.weights + self.gradients + self.adam + self.reference + self.vllm + self.headroom

    @property
    def training(self) -> int:
        """The training phase's own peak: one micro-batch's forward and backward."""
        return self.weights_16bit + self.activations + self.logits

    @property
    def generation(self) -> int:
        """The generation phase's own peak: one ``generate`` call's KV cache (0 with vLLM)."""
        return self.kv_cache + self.generation_weights

    @property
    def total(self) -> int:
        """The peak per GPU."""
        return self.state + max(self.training, self.generation)

    @property
    def fits(self) -> bool:
        return self.total <= self.gpu_bytes

    def summary(self) -> str:
        """One line: the parts, the peak and the GPU."""
        s = self.shape
        parts = [
            f"weights+grads+adam {show(self.weights + self.gradients + self.adam)}",
            *([f"reference {show(self.reference)}"] if self.reference else []),
            *([f"vLLM {show(self.vllm)}"] if self.vllm else []),
            f"activations{' (ckpt)' if s.gradient_checkpointing else ''} {show(self.activations)}",
            f"logits {show(self.logits)}",
            f"KV {s.generation_sequences} seq {show(self.kv_cache)}" if not s.use_vllm else "KV in vLLM",
        ]
        verdict = "fits" if self.fits else "DOES NOT FIT"
        return f"{', '.join(parts)}; peak {show(self.total)} of {show(self.gpu_bytes)}: {verdict}"


def plan_memory(shape: CellShape, gpu_bytes: int, arch: Architecture | None = None) -> MemoryPlan:
    """The memory plan of ``shape`` on a GPU of ``gpu_bytes`` (``arch``: the model's, looked up
    by :func:`architecture_of` when not given; :class:`UserError` when unknown)."""
    arch = arch or architecture_of(shape.model)
    if arch is None:
        raise UserError(f"no architecture known for model {shape.model!r}; give a folder with config.json")
    p, n = arch.params, shape.shards
    value = 2 if shape.mixed else 4
    tokens = shape.prompt_tokens + shape.completion_tokens
    micro = shape.train_sequences
    per_layer = arch.activation_bytes_per_token()
    if shape.gradient_checkpointing:  # each layer's float32 input, plus one layer recomputed
        activations = micro * tokens * (arch.layers * 4 * arch.hidden + per_layer)
    else:
        activations = micro * tokens * arch.layers * per_layer
    if not shape.mixed:
        activations *= 2
    if n > 1:  # FSDP/ZeRO-3 gather about two layers at a time (16-bit under mixed precision)
        weights_16bit = 2 * arch.layer_params * value
    else:
        weights_16bit = p * 2 if shape.mixed else 0  # autocast caches a bf16 copy of each weight
    return MemoryPlan(
        shape=shape,
        gpu_bytes=gpu_bytes,
        params=p,
        weights=4 * p // n,
        gradients=4 * p // n,
        adam=8 * p // n,
        reference=(value * p // n) if shape.beta > 0 else 0,
        vllm=int(shape.vllm_share * gpu_bytes) if shape.use_vllm else 0,
        headroom=HEADROOM_BYTES,
        weights_16bit=weights_16bit,
        activations=activations,
        # bf16 logits, the temperature-scaled copy, and the log-softmax kept for the backward
        logits=micro * shape.completion_tokens * arch.vocab * 3 * value,
        kv_cache=0
        if shape.use_vllm
        else shape.generation_sequences * tokens * arch.kv_bytes_per_token(value),
        generation_weights=2 * p if shape.distributed == "zero3" and n > 1 and not shape.use_vllm else 0,
    )


def fix_for(plan: MemoryPlan) -> str | None:
    """The first setting that makes ``plan`` fit, as a user would write it: a smaller micro-batch
    (same prompts per optimizer step), more processes (sharded), a smaller vLLM share; None if
    none of those does."""
    s = plan.shape
    step_prompts = s.prompts_per_step * s.gradient_accumulation_steps
    micro = s.prompts_per_step // 2
    while micro >= s.processes and micro % s.processes == 0:
        if step_prompts % micro == 0:
            trial = replace(s, prompts_per_step=micro, gradient_accumulation_steps=step_prompts // micro)
            if plan_memory(trial, plan.gpu_bytes).fits:
                return (
                    f"model_train: {{{s.model}: {{prompts_per_step: {micro}, "
                    f"gradient_accumulation_steps: {step_prompts // micro}}}}}"
                )
        micro //= 2
    processes = max(2, s.processes * 2)
    while processes <= 8:
        distributed = "fsdp" if s.shards == 1 else s.distributed
        for per in (4, 2, 1):  # prompts per process per micro-batch, most first
            micro = per * processes
            if step_prompts % micro:
                continue
            trial = replace(
                s,
                processes=processes,
                distributed=distributed,
                prompts_per_step=micro,
                gradient_accumulation_steps=step_prompts // micro,
            )
            if plan_memory(trial, plan.gpu_bytes).fits:
                fix = f"--processes-per-cell {processes} --distributed {distributed}"
                if micro != s.prompts_per_step:
                    fix += (
                        f" (with model_train: {{{s.model}: {{prompts_per_step: {micro}, "
                        f"gradient_accumulation_steps: {step_prompts // micro}}}}} unless the preset sets it)"
                    )
                return fix
        processes *= 2
    if s.use_vllm and plan_memory(replace(s, use_vllm=False), plan.gpu_bytes).fits:
        return f"model_train: {{{s.model}: {{use_vllm: false}}}} (vLLM keeps {s.vllm_share:g} of the GPU)"
    return None
