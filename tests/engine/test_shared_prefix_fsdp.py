"""Shared prefixes stay off under FSDP: FSDP frees each layer's full weights after its forward pass,
and the backward of the prefix's own pass then fails ("setStorage ... storage of size 0"), as the
rehearsal of the paper preset's FSDP cells on the CPU found (``mrbench sweep --preset paper
--rehearse``)."""

from __future__ import annotations

import pytest

from mrbench.core.errors import UserError
from mrbench.engine.training import shared_prefix


def _qwen2() -> object:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
        intermediate_size=32,
    )  # fmt: skip
    return Qwen2ForCausalLM(config)


def test_auto_is_off_and_on_refused_under_fsdp(monkeypatch: pytest.MonkeyPatch) -> None:
    model = _qwen2()
    monkeypatch.delenv("ACCELERATE_USE_FSDP", raising=False)
    assert shared_prefix.enabled("auto", "standin:Qwen/Qwen2.5-7B-Instruct", model)  # supported: on
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")  # what `accelerate launch` of the fsdp preset sets
    assert not shared_prefix.enabled("auto", "standin:Qwen/Qwen2.5-7B-Instruct", model)
    with pytest.raises(UserError, match="does not work with FSDP"):
        shared_prefix.enabled("on", "standin:Qwen/Qwen2.5-7B-Instruct", model)
