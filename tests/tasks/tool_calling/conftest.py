"""A tiny randomly initialised chat model for end-to-end evaluation tests (no hub, no training)."""

from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture(scope="session")
def tiny_generator(random_generator: Any) -> Any:
    """Byte-level BPE trained on a few task strings + a 2-layer, 32-wide Qwen2 (random weights)."""
    from mrbench.engine.models.tiny import train_tokenizer
    from mrbench.tasks.tool_calling.data import make_demonstrations

    texts = [
        part
        for prompt, completion in make_demonstrations(40, seed=0)
        for part in (prompt[1]["content"], completion)
    ]
    return random_generator(train_tokenizer(texts, vocab_size=400))
