"""A tiny randomly initialised chat model for end-to-end evaluation tests (no hub, no training)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest


class TinyGenerator:
    """Minimal :class:`tasks.base.Generator`: greedy chat generation with HF ``generate``."""

    def __init__(self, model: Any, tokenizer: Any) -> None:
        self.model = model
        self.tokenizer = tokenizer

    def __call__(self, conversations: Sequence[list[dict[str, str]]], *, max_new_tokens: int) -> list[str]:
        out = []
        for conv in conversations:
            text = self.tokenizer.apply_chat_template(conv, add_generation_prompt=True, tokenize=False)
            enc = self.tokenizer(text, return_tensors="pt", add_special_tokens=False)
            ids = self.model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=False)
            out.append(self.tokenizer.decode(ids[0, enc["input_ids"].shape[1] :], skip_special_tokens=True))
        return out


@pytest.fixture(scope="session")
def tiny_generator() -> TinyGenerator:
    """Byte-level BPE trained on a few task strings + a 2-layer, 32-wide Qwen2 (random weights)."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from harness.models import train_tokenizer
    from tasks.tool_calling.data import make_demonstrations

    torch.set_num_threads(1)
    texts = [
        part
        for prompt, completion in make_demonstrations(40, seed=0)
        for part in (prompt[1]["content"], completion)
    ]
    tok = train_tokenizer(texts, vocab_size=400)
    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=1024,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        bos_token_id=tok.pad_token_id,
    )
    model = Qwen2ForCausalLM(config)
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    return TinyGenerator(model, tok)
