"""Fixtures for the agent-security tests: a small embedded task and a locally trained tokenizer."""

from __future__ import annotations

from typing import Any

import pytest

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@pytest.fixture(scope="session")
def small_task() -> Any:
    from tasks.agent_security import agent_security

    return agent_security(n_train=60, n_eval=40, seed=3)


@pytest.fixture(scope="session")
def tokenizer(small_task: Any) -> Any:
    """Byte-level BPE trained on the task's demonstrations, with a Qwen-like chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    texts = []
    for prompt, completion in small_task.demonstrations(200, 0):
        texts.extend(m["content"] for m in prompt)
        texts.append(completion)
    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=600,
        special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    core.train_from_iterator(texts, trainer=trainer)
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core,
        bos_token="<|endoftext|>",
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        padding_side="left",
    )
    tok.chat_template = CHAT_TEMPLATE
    return tok
