"""Shared fixtures: a micro Qwen2 model + locally trained tokenizer, built once per test session."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from harness.models import TinyPreset, build_tiny_model

# Smaller than the smallest preset and warm-started briefly: enough for trainer plumbing tests.
MICRO = TinyPreset(32, 1, 2, 1, 64, sft_steps=30, sft_lr=5e-3, vocab_size=400, max_position_embeddings=256)


def micro_demos(n: int = 200, seed: int = 0) -> list[tuple[list[dict], str]]:
    """Toy 'add' tool-call demonstrations: (prompt messages, completion)."""
    rng = random.Random(seed)
    demos = []
    for _ in range(n):
        a, b = rng.randint(0, 9), rng.randint(0, 9)
        prompt = [{"role": "system", "content": "Call add."}, {"role": "user", "content": f"add {a} {b}"}]
        demos.append((prompt, f'<tool_call>{{"name": "add", "a": {a}, "b": {b}}}</tool_call>'))
    return demos


@pytest.fixture(scope="session")
def micro_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("micro-model")
    build_tiny_model(MICRO, out, micro_demos(), seed=0)
    return out
