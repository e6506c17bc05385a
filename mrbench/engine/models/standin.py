"""Stand-in models: a small random model of a real model's architecture family, for rehearsals.

``standin:<model>`` (e.g. ``standin:Qwen/Qwen3-8B``) names a model that loads like ``<model>``'s
family (``Qwen3ForCausalLM`` for Qwen3-*, ``Qwen2ForCausalLM`` for Qwen2/Qwen2.5 and their Coder
models) but has a few hundred thousand parameters and needs no hub: a byte-level BPE tokenizer
trained here on the tasks' demonstrations, the ChatML template (the markup of Qwen's own, without
its tool and thinking sections), random weights. ``mrbench sweep --rehearse``
(:mod:`mrbench.sweeps.rehearsal`) trains every cell of a GPU sweep with these, on the CPU, to run
its whole configuration (data, rewards, budgets, batches, reference model, checkpoints, resume,
evaluation, report) before GPUs are booked.

An untrained model would sample its end-of-sequence token once in ``vocab`` tokens and fill every
completion to its budget (thousands of tokens a rollout for the paper's budgets, hours on a CPU).
So every input embedding shares one direction ``u`` (norm :data:`SHARED`) that dominates the last
hidden state, and the end-of-sequence row of the (tied) output layer gets ``EOS_PULL · u`` more:
the model ends a completion after about :data:`MEAN_TOKENS` tokens (a geometric length). The
budgets of the configuration are kept; completions rarely reach them (the rehearsal says so).

Built once per family and cached under ``results/models/standin-<family>-<key>/``, the key over
the architecture, the recipe and the demonstrations, like the tiny presets (:mod:`.tiny`).
"""

from __future__ import annotations

import hashlib
import json
import math
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from mrbench.core.errors import UserError
from mrbench.core.model_marker import ModelMarker
from mrbench.core.standin import PREFIX, is_standin, stood_for

__all__ = ["FAMILIES", "family_of", "is_standin", "prepare_standin", "standin_name", "stood_for"]
STANDIN_VERSION = 3
MEAN_TOKENS = 12
"""Mean completion length of a stand-in (its end-of-sequence probability is 1 / MEAN_TOKENS)."""
SHARED = 1.0
"""Norm of the direction every input embedding shares (random rows have norm ≈ 0.02·√hidden)."""


@dataclass(frozen=True)
class StandinShape:
    """The architecture of a family's stand-in (the family's config class, these sizes)."""

    family: str
    # One layer of two query heads sharing one key/value head (grouped-query attention, as in the
    # family): a rehearsal's CPU time is mostly attention over the paper's long prompts (agent
    # security: ~1,190 tokens), and it grows with layers × heads.
    hidden_size: int = 32
    num_hidden_layers: int = 1
    num_attention_heads: int = 2
    num_key_value_heads: int = 1
    intermediate_size: int = 64
    vocab_size: int = 2048
    max_position_embeddings: int = 32768
    demos_per_task: int = 60
    prompts_per_task: int = 200


FAMILIES: dict[str, StandinShape] = {"qwen2": StandinShape("qwen2"), "qwen3": StandinShape("qwen3")}


def standin_name(model: str) -> str:
    """The stand-in of ``model``: ``standin:<model>`` (its family checked)."""
    family_of(model)
    return PREFIX + model


def family_of(model: str) -> str:
    """The architecture family of a real model's name: ``qwen3`` or ``qwen2`` (Qwen2, Qwen2.5 and
    their Coder/Math models); :class:`UserError` for a family without a stand-in.

    >>> family_of("Qwen/Qwen2.5-Coder-7B-Instruct"), family_of("Qwen/Qwen3-4B-Thinking-2507")
    ('qwen2', 'qwen3')
    """
    base = stood_for(model).rsplit("/", 1)[-1].lower()
    if base.startswith("qwen3"):
        return "qwen3"
    if base.startswith("qwen2"):
        return "qwen2"
    raise UserError(
        f"no stand-in for model {stood_for(model)!r}: stand-ins exist for the Qwen2/Qwen2.5 and Qwen3 "
        "families (the paper's models); rehearse a sweep of those, or run it on its real models"
    )


def eos_pull(shape: StandinShape, vocab: int) -> float:
    """The extra ``u``-component of the end-of-sequence output row that makes its probability
    1/MEAN_TOKENS: ``p = e^{a√H} / (e^{a√H} + vocab - 1)`` solved for ``a`` (the last hidden state
    ≈ ``√H · u`` after the final RMSNorm).

    >>> round(eos_pull(FAMILIES["qwen2"], 2048), 3)
    0.924
    """
    return math.log((vocab - 1) / (MEAN_TOKENS - 1)) / math.sqrt(shape.hidden_size)


def _config(shape: StandinShape, tok: Any) -> Any:
    """The family's config class with ``shape``'s sizes and ``tok``'s special ids."""
    from transformers import Qwen2Config, Qwen3Config

    kwargs: dict[str, Any] = {
        "vocab_size": len(tok),
        "hidden_size": shape.hidden_size,
        "num_hidden_layers": shape.num_hidden_layers,
        "num_attention_heads": shape.num_attention_heads,
        "num_key_value_heads": shape.num_key_value_heads,
        "intermediate_size": shape.intermediate_size,
        "max_position_embeddings": shape.max_position_embeddings,
        "tie_word_embeddings": True,
        "bos_token_id": tok.convert_tokens_to_ids("<|endoftext|>"),
        "eos_token_id": tok.convert_tokens_to_ids("<|im_end|>"),
        "pad_token_id": tok.pad_token_id,
    }
    if shape.family == "qwen3":
        return Qwen3Config(head_dim=shape.hidden_size // shape.num_attention_heads, **kwargs)
    return Qwen2Config(**kwargs)


def build_standin(
    shape: StandinShape, out_dir: Path, demos: list[tuple[list[dict], str]], prompts: list[str] = ()
) -> dict[str, Any]:
    """Train the tokenizer on ``demos`` and ``prompts`` (texts, :func:`task_prompts`), build the model
    of ``shape.family`` with its end-of-sequence pull (module docstring), save both to ``out_dir``;
    returns what ``mrbench_model.json`` records."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from mrbench.engine.models.tiny import CHAT_TEMPLATE, check_tokenizer_round_trip, train_tokenizer

    texts = [m["content"] for prompt, _ in demos for m in prompt] + [c for _, c in demos]
    texts.extend(prompts)
    texts.extend(CHAT_TEMPLATE.split("{%"))
    trained = train_tokenizer(texts, shape.vocab_size)
    config = _config(shape, trained)
    out_dir.mkdir(parents=True, exist_ok=True)
    config.save_pretrained(out_dir)  # first: AutoTokenizer picks the family's tokenizer class from it
    trained.save_pretrained(out_dir)
    tok = AutoTokenizer.from_pretrained(str(out_dir))
    check_tokenizer_round_trip(trained, tok, texts[:: max(1, len(texts) // 100)])
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config)
    gen = torch.Generator().manual_seed(0)
    u = torch.randn(shape.hidden_size, generator=gen)
    u = u / u.norm()
    with torch.no_grad():
        embeddings = model.get_input_embeddings().weight  # [V, H], tied to the output layer
        embeddings += SHARED * u
        embeddings[config.eos_token_id] += eos_pull(shape, len(tok)) * u
    for key in ("eos_token_id", "pad_token_id", "bos_token_id"):
        setattr(model.generation_config, key, getattr(config, key))
    config.architectures = [type(model).__name__]  # TRL builds the reference model (beta > 0) from it
    config.save_pretrained(out_dir)
    model.generation_config.save_pretrained(out_dir)
    # Not model.save_pretrained: in a rank > 0 of a multi-process cell (the first to take the lock
    # may be any rank) transformers writes no weights at all.
    from safetensors.torch import save_model

    save_model(model, str(out_dir / "model.safetensors"), metadata={"format": "pt"})
    return {
        "standin": shape.family,
        "architecture": type(model).__name__,
        "parameters": sum(p.numel() for p in model.parameters()),
        "mean_completion_tokens": MEAN_TOKENS,
    }


def task_prompts(per_task: int) -> list[str]:
    """The texts of the first ``per_task`` training prompts of every built-in task at its default
    settings (a task whose package is missing is left out).

    Why: the tiny models' demonstrations use compact settings, so a tokenizer trained on them alone
    has never seen most words of the full prompts (agent security's tool descriptions and
    environments) and cuts them into pieces: 1,404 tokens for an AgentDojo prompt that the same
    pre-tokenizer, with every word of the task in its vocabulary, cuts into about 1,190 (Qwen's
    real tokenizer shares that pre-tokenizer and knows those words). Sequence lengths, and so a
    rehearsal's memory and time, then follow the real model's more closely.
    """
    import mrbench.tasks as tasks

    texts: list[str] = []
    for name in tasks.TASKS.builtin_names():
        try:
            task = tasks.build_task(name, {})
        except ImportError:
            continue
        try:
            samples = task.train_samples()[:per_task]
        finally:
            task.close()
        texts.extend(m["content"] for sample in samples for m in sample.prompt)
    return texts


def cache_key(shape: StandinShape) -> str:
    """Hash of the stand-in's recipe. The demonstrations its tokenizer is trained on are not in it:
    collecting them costs seconds at every cell start, and a stand-in only needs a tokenizer that
    cuts the tasks' text, not the latest one (bump :data:`STANDIN_VERSION` to rebuild)."""
    payload = json.dumps({"v": STANDIN_VERSION, "shape": asdict(shape)}, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:12]


def prepare_standin(name: str, root: Path) -> str:
    """The folder of stand-in ``name`` under ``root``, built on first use (file-locked, renamed into
    place when complete); every model of one family shares it."""
    from filelock import FileLock

    from mrbench.engine.models.tiny import collect_demonstrations

    shape = FAMILIES[family_of(name)]
    final = root / f"standin-{shape.family}-{cache_key(shape)}"
    root.mkdir(parents=True, exist_ok=True)
    with FileLock(str(root / f".{final.name}.lock")):
        if ModelMarker.present(final):
            return str(final)
        tmp = root / f".building-{final.name}"
        shutil.rmtree(tmp, ignore_errors=True)
        demos, _used = collect_demonstrations(shape.demos_per_task, seed=0)
        meta = build_standin(shape, tmp, demos, task_prompts(shape.prompts_per_task))
        ModelMarker(meta.pop("task_settings", {}), meta).write(tmp)
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)
    return str(final)
