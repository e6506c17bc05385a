"""Sampled completions for evaluation: ``n`` per conversation, at a fixed seed.

Greedy decoding shows only the policy's single most likely answer, which a few GRPO steps
rarely change; sampling at the training temperature shows how *likely* a correct answer has
become. :func:`sample_completions` draws them from the model the harness hands to
:meth:`~mrbench.tasks.code_generation.task.CodeGenerationTask.evaluate` (its ``model`` and
``tokenizer``), with pure ancestral sampling (no top-k, top-p or repetition penalty), as TRL
draws GRPO rollouts.

The seed is fixed per evaluation and torch's global random state is restored afterwards, so
(1) two checkpoints are evaluated with the same random numbers (common random numbers: close
checkpoints draw mostly the same answers, so their difference reflects their weights more than
the luck of the draw), and (2) evaluating does not shift the training run's own random stream.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mrbench.core.contracts import Message

ROWS_PER_CALL = 128
"""Sequences generated per ``model.generate`` call (prompts per call × ``n``)."""


def sample_completions(
    model: Any,
    tokenizer: Any,
    conversations: Sequence[list[Message]],
    *,
    n: int,
    max_new_tokens: int,
    temperature: float,
    seed: int,
) -> list[list[str]]:
    """``n`` sampled assistant replies per conversation, in input order (special tokens stripped).

    Prompts go through the tokenizer's chat template, left-padded, ``max(1, ROWS_PER_CALL // n)``
    prompts per call; each call's ``input_ids`` is ``(prompts, prompt_len)`` and its output
    ``(prompts × n, prompt_len + new_len)``, the ``n`` samples of a prompt adjacent.
    The result is a deterministic function of (model weights, conversations, ``n``, ``seed``) on
    a given device.
    """
    import torch

    if n < 1 or temperature <= 0:
        raise ValueError(f"sampling needs n >= 1 and temperature > 0, got n={n}, temperature={temperature}")
    texts = [
        tokenizer.apply_chat_template(conv, add_generation_prompt=True, tokenize=False)
        for conv in conversations
    ]
    per_call = max(1, ROWS_PER_CALL // n)
    flat: list[str] = []
    was_training = bool(model.training)
    model.eval()
    try:
        with torch.random.fork_rng(devices=list(range(torch.cuda.device_count()))):
            torch.manual_seed(seed)
            for start in range(0, len(texts), per_call):
                enc = tokenizer(
                    texts[start : start + per_call],
                    return_tensors="pt",
                    padding=True,
                    padding_side="left",
                    add_special_tokens=False,
                ).to(model.device)
                with torch.no_grad():
                    out = model.generate(
                        **enc,
                        do_sample=True,
                        temperature=temperature,
                        top_k=0,
                        top_p=1.0,
                        repetition_penalty=1.0,
                        num_return_sequences=n,
                        max_new_tokens=max_new_tokens,
                        pad_token_id=tokenizer.pad_token_id,
                        eos_token_id=tokenizer.eos_token_id,
                    )
                new_tokens = out[:, enc["input_ids"].shape[1] :]
                flat.extend(tokenizer.batch_decode(new_tokens, skip_special_tokens=True))
    finally:
        model.train(was_training)
    return [flat[i * n : (i + 1) * n] for i in range(len(texts))]
