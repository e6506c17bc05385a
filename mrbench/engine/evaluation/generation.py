"""Batched chat generation with a transformers model (a :class:`mrbench.core.contracts.Generator`):
greedy, as every evaluation generates, or sampled at a temperature (rollout probes)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mrbench.core.contracts import Message
from mrbench.core.errors import UserError


def require_vllm() -> None:
    """Raise :class:`UserError` unless vLLM generation (``use_vllm``) can run in this process:
    the ``vllm`` package importable and a CUDA GPU visible."""
    import importlib.util

    import torch

    if importlib.util.find_spec("vllm") is None:
        raise UserError(
            "use_vllm=true needs vLLM, an optional extra for CUDA machines: pip install 'mrbench[vllm]' "
            "(or leave use_vllm off to generate with transformers)"
        )
    if not torch.cuda.is_available():
        raise UserError("use_vllm=true needs a CUDA GPU and this process sees none; leave use_vllm off")


def vllm_context_cap(task: Any, tokenizer: Any, max_new_tokens: int, model_max: int | None) -> int:
    """vLLM's ``max_model_len`` for training ``task``: its longest chat-templated training prompt
    plus :meth:`~mrbench.core.contracts.Task.completion_budget`, at most the model's context.

    Why: left unset, vLLM reserves KV cache for the model's whole context (32k–128k tokens for the
    paper's models), which can exceed the GPU share colocated vLLM gets, and the engine refuses to
    start; a cap from the task fits it to what training can reach.
    """
    texts = [
        tokenizer.apply_chat_template(s.prompt, add_generation_prompt=True, tokenize=False)
        for s in task.train_samples()
    ]
    longest = max(len(ids) for ids in tokenizer(texts, add_special_tokens=False)["input_ids"])
    cap = longest + int(task.completion_budget(max_new_tokens))
    return min(cap, model_max) if model_max else cap


class HFGenerator:
    """Completions for chat conversations, greedy unless ``temperature`` > 0; batches with left padding.

    ``model``/``tokenizer`` are exposed so that tasks can hand them to lm-eval's HFLM (which
    generates greedily whatever ``temperature`` says).
    """

    def __init__(self, model: Any, tokenizer: Any, *, batch_size: int = 32, temperature: float = 0.0) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.temperature = temperature

    def __call__(self, conversations: Sequence[list[Message]], *, max_new_tokens: int) -> list[str]:
        """One assistant reply per conversation, in input order (special tokens stripped)."""
        import torch

        tok = self.tokenizer
        texts = [
            tok.apply_chat_template(conv, add_generation_prompt=True, tokenize=False)
            for conv in conversations
        ]
        outputs: list[str] = []
        was_training = self.model.training
        self.model.eval()
        try:
            for start in range(0, len(texts), self.batch_size):
                chunk = texts[start : start + self.batch_size]
                enc = tok(chunk, return_tensors="pt", padding=True, add_special_tokens=False).to(
                    self.model.device
                )
                with torch.no_grad():
                    out = self.model.generate(
                        **enc,
                        max_new_tokens=max_new_tokens,
                        **(
                            {"do_sample": True, "temperature": self.temperature, "top_k": 0}
                            if self.temperature > 0
                            else {"do_sample": False}
                        ),
                        pad_token_id=tok.pad_token_id,
                        eos_token_id=tok.eos_token_id,
                    )
                new_tokens = out[:, enc["input_ids"].shape[1] :]
                outputs.extend(tok.batch_decode(new_tokens, skip_special_tokens=True))
        finally:
            if was_training:
                self.model.train()
        return outputs
