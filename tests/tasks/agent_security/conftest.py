"""Fixtures for the agent-security tests: a small embedded task and a locally trained tokenizer."""

from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture(scope="session")
def small_task() -> Any:
    from mrbench.tasks.agent_security import agent_security

    return agent_security(n_train=60, n_eval=40, seed=3, prompt_style="compact")  # the tiny models' prompts


@pytest.fixture(scope="session")
def tokenizer(small_task: Any) -> Any:
    """Byte-level BPE trained on the task's demonstrations, with the tiny models' chat template."""
    from mrbench.engine.models.tiny import train_tokenizer

    texts = []
    for prompt, completion in small_task.demonstrations(200, 0):
        texts.extend(m["content"] for m in prompt)
        texts.append(completion)
    tok = train_tokenizer(texts, vocab_size=600)
    return tok
