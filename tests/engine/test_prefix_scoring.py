"""Shared-prefix scoring and generation (mrbench/engine/training/shared_prefix.py) equal TRL's repeated
computation: per-token log-probabilities and entropies within 1e-4, gradients of the GRPO loss
within 1e-5 relative, three training steps within 1e-5, generation token for token; on batches
with prompts and completions of mixed lengths, in any row order."""

from __future__ import annotations

import pytest
import torch
from datasets import Dataset
from transformers import Qwen2Config, Qwen2ForCausalLM
from trl import GRPOConfig
from trl.trainer.utils import add_fused_lm_head

import mrbench.methods as methods
from mrbench.core.errors import UserError
from mrbench.engine.config import RunSpec, TrainSettings
from mrbench.engine.models.catalog import load_model, load_tokenizer
from mrbench.engine.models.tiny import TINY_PRESETS
from mrbench.engine.training import shared_prefix
from mrbench.engine.training.trainer import MultiRewardGRPOTrainer

G = 4


def tiny_shaped_model(seed: int = 0) -> Qwen2ForCausalLM:
    """A random Qwen2 of the tiny presets' kind (2048-token vocabulary), float32, training mode."""
    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=2048, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
        tie_word_embeddings=True,
    )  # fmt: skip
    return Qwen2ForCausalLM(config).train()


def mixed_batch(prompt_lens: list[int], completion_lens: list[list[int]], vocab: int, seed: int = 0):
    """``(input_ids [B, P + C], attention_mask, P)``: prompt ``i`` left-padded to ``P``, its
    completions right-padded to ``C``; the groups' rows interleaved (not consecutive)."""
    gen = torch.Generator().manual_seed(seed)
    width, keep = max(prompt_lens), max(max(c) for c in completion_lens)
    prompts = [torch.randint(1, vocab, (n,), generator=gen) for n in prompt_lens]
    rows = []
    for i, prompt in enumerate(prompts):
        for n in completion_lens[i]:
            ids = torch.zeros(width + keep, dtype=torch.long)
            mask = torch.zeros(width + keep, dtype=torch.long)
            ids[width - len(prompt) : width] = prompt
            ids[width : width + n] = torch.randint(1, vocab, (n,), generator=gen)
            mask[width - len(prompt) : width + n] = 1
            rows.append((ids, mask))
    order = torch.randperm(len(rows), generator=gen)
    ids = torch.stack([rows[i][0] for i in order])
    mask = torch.stack([rows[i][1] for i in order])
    return ids, mask, width


def score(model, ids, mask, width, shared: bool):
    """TRL's call (``_get_per_token_logps_and_entropies``): log-probs and entropies ``[B, C]``."""
    keep = ids.size(1) - width
    labels = ids.masked_fill(mask == 0, -100)
    labels[:, :-keep] = -100
    if shared:
        with shared_prefix.scoring(width):
            out = model(input_ids=ids, attention_mask=mask, labels=labels, fused_lm_head=True)
    else:
        out = model(input_ids=ids, attention_mask=mask, labels=labels, fused_lm_head=True)
    return out.log_probs[:, -keep:], out.entropy[:, -keep:]


def test_prompt_groups_finds_each_distinct_prompt_in_any_order() -> None:
    ids, mask, width = mixed_batch([5, 9, 5], [[3, 1], [2, 2], [4]], vocab=50)
    prompts, prompt_mask, row = shared_prefix.prompt_groups(ids, mask, width)
    assert prompts.shape == (3, width) and row.shape == (5,)
    assert torch.equal(prompts[row] * prompt_mask[row], ids[:, :width] * mask[:, :width])
    assert torch.equal(prompt_mask[row], mask[:, :width])


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_logps_entropies_and_gradients_equal_trls(temperature: float) -> None:
    model = tiny_shaped_model()
    add_fused_lm_head(model, temperature=temperature, outputs=("log_probs", "entropy"))
    assert shared_prefix.install(model)
    ids, mask, width = mixed_batch([23, 40, 7], [[30, 12, 1, 30], [5, 30, 30, 2], [30, 30, 17, 9]], 2048)
    valid = mask[:, width:].float()
    advantages = torch.linspace(-1.0, 1.0, ids.size(0))[:, None]
    results = []
    for shared in (False, True):
        model.zero_grad(set_to_none=True)
        logps, entropies = score(model, ids, mask, width, shared)
        # A GRPO-shaped loss: advantages times the ratio to detached log-probs.
        loss = -((torch.exp(logps - logps.detach()) * advantages) * valid).sum() / valid.sum()
        loss.backward()
        results.append((logps.detach(), entropies.detach(), [p.grad.clone() for p in model.parameters()]))
    (lp_trl, en_trl, g_trl), (lp_ours, en_ours, g_ours) = results
    assert lp_ours.shape == lp_trl.shape == valid.shape
    assert ((lp_ours - lp_trl) * valid).abs().max() <= 1e-4
    assert ((en_ours - en_trl) * valid).abs().max() <= 1e-4
    assert torch.equal(lp_ours[valid == 0], torch.zeros_like(lp_ours[valid == 0]))  # padding: 0, as TRL's
    for ours, trl in zip(g_ours, g_trl, strict=True):
        assert (ours - trl).norm() <= 1e-5 * trl.norm() + 1e-12


def test_bf16_autocast_stays_within_bfloat16_rounding() -> None:
    model = tiny_shaped_model(seed=1)
    add_fused_lm_head(model, outputs=("log_probs", "entropy"))
    shared_prefix.install(model)
    ids, mask, width = mixed_batch([20, 31], [[25, 4, 25, 10], [25, 25, 1, 7]], 2048, seed=1)
    valid = mask[:, width:].bool()
    with torch.no_grad():
        fp32, _ = score(model, ids, mask, width, shared=False)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            trl, _ = score(model, ids, mask, width, shared=False)
            ours, _ = score(model, ids, mask, width, shared=True)
    trl_error = (trl - fp32)[valid].abs().max()
    # bfloat16 has 8 bits of mantissa: both passes are as far from float32 as each other.
    assert (ours - trl)[valid].abs().max() <= max(4 * trl_error, 0.05)
    assert (ours - fp32)[valid].abs().max() <= max(4 * trl_error, 0.05)


def test_nothing_shared_or_unsupported_runs_trls_pass() -> None:
    model = tiny_shaped_model()
    add_fused_lm_head(model, outputs=("log_probs", "entropy"))
    shared_prefix.install(model)
    calls = []
    backbone_forward = model.model.forward
    model.model.forward = lambda *a, **k: calls.append(k["input_ids"].shape) or backbone_forward(*a, **k)
    ids, mask, width = mixed_batch([6, 9], [[4, 4], [3, 4]], 2048)
    score(model, ids, mask, width, shared=True)
    assert calls == [(2, width - 1), (4, 1 + ids.size(1) - width)]  # 2 prompts once, then 4 completions
    calls.clear()
    ids, mask, width = mixed_batch([6, 9], [[4], [3]], 2048)  # one completion per prompt
    score(model, ids, mask, width, shared=True)
    assert calls == [tuple(ids.shape)]

    class Other:  # a model type without a growing full-attention cache
        config = type("C", (), {"model_type": "gemma3"})()

    assert not shared_prefix.supports(Other())
    assert not shared_prefix.enabled("auto", "gemma", Other())
    with pytest.raises(UserError, match="shared_prefix=on"):
        shared_prefix.enabled("on", "gemma", Other())
    assert shared_prefix.enabled("auto", "some/hub-model", model)
    assert not shared_prefix.enabled("auto", next(iter(TINY_PRESETS)), model, tiny_presets=TINY_PRESETS)
    assert shared_prefix.enabled("on", next(iter(TINY_PRESETS)), model, tiny_presets=TINY_PRESETS)
    assert not shared_prefix.enabled("off", "some/hub-model", model)


def test_generation_prefills_each_prompt_once_and_samples_the_same_tokens() -> None:
    model = tiny_shaped_model(seed=2).eval()
    add_fused_lm_head(model)
    shared_prefix.install(model)
    ids, mask, width = mixed_batch([7, 12], [[1] * G, [1] * G], 2048, seed=2)
    ids, mask = ids[:, :width], mask[:, :width]
    config = model.generation_config
    config.update(
        do_sample=True, temperature=1.0, top_k=0, max_new_tokens=10, pad_token_id=0, eos_token_id=None
    )
    calls = []
    backbone_forward = model.model.forward
    model.model.forward = lambda *a, **k: calls.append(k["input_ids"].shape) or backbone_forward(*a, **k)
    torch.manual_seed(7)
    ours = model.generate(input_ids=ids, attention_mask=mask, generation_config=config)
    assert calls[0] == (2, width - 1) and calls[1] == (2 * G, 1)  # prompts once, then each row's last token
    torch.manual_seed(7)
    trl = type(model).generate(model, input_ids=ids, attention_mask=mask, generation_config=config)
    assert torch.equal(ours, trl)


def _rows() -> list[dict]:
    return [
        {"prompt": [{"role": "user", "content": f"add {i} {i * 37 % 1000}" + " please" * (i % 3)}]}
        for i in range(8)
    ]


def _reward(prompts, completions, **kw):
    return [float(len(c[0]["content"]) % 7) for c in completions]


def _trainer(model_dir, tmp_path, shared: bool, **config) -> MultiRewardGRPOTrainer:
    settings = {
        "output_dir": str(tmp_path / ("on" if shared else "off")),
        "max_steps": 3,
        "per_device_train_batch_size": 2 * G,
        "num_generations": G,
        "max_completion_length": 16,
        "learning_rate": 1e-3,
        "logging_steps": 1,
        "report_to": [],
        "save_strategy": "no",
        "use_cpu": True,
        "bf16": False,
        "gradient_checkpointing": False,
        "disable_tqdm": True,
        "remove_unused_columns": False,
        "seed": 0,
        **config,
    }
    if settings.get("beta"):
        settings["model_init_kwargs"] = {"dtype": "float32", "device_map": None}
    return MultiRewardGRPOTrainer(
        model=load_model(str(model_dir)),
        reward_funcs=[_reward],
        args=GRPOConfig(**settings),
        train_dataset=Dataset.from_list(_rows()),
        processing_class=load_tokenizer(str(model_dir)),
        method_fn=methods.get_method("grpo").obj,
        method_params={"eps": 1e-4},
        shadow_methods=(),
        shared_prefix=shared,
    )


VARIANTS = {
    "default": {},
    # reference model (beta > 0), old log-probs (num_iterations 2), entropy masking, another loss
    "kl+old+entropy-mask+dr_grpo": {
        "beta": 0.04,
        "num_iterations": 2,
        "top_entropy_quantile": 0.5,
        "loss_type": "dr_grpo",
    },
    "bnpo": {"loss_type": "bnpo"},
}


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_three_training_steps_equal_the_repeated_computation(micro_model_dir, tmp_path, variant) -> None:
    torch.set_num_threads(1)
    trained = {}
    for shared in (False, True):
        trainer = _trainer(micro_model_dir, tmp_path, shared, **VARIANTS[variant])
        assert trainer.shared_prefix is shared
        trainer.train()
        trained[shared] = trainer
    off, on = trained[False], trained[True]
    assert off._logs["completion"] == on._logs["completion"]  # the same samples
    for (name, a), (_, b) in zip(off.model.named_parameters(), on.model.named_parameters(), strict=True):
        assert (a - b).abs().max() <= 1e-5, name
    losses = [[r["loss"] for r in t.state.log_history if "loss" in r] for t in (off, on)]
    assert len(losses[0]) == 3 and losses[0] == pytest.approx(losses[1], abs=1e-5)


def test_grpo_loss_gradient_equals_on_a_generated_batch(micro_model_dir, tmp_path) -> None:
    torch.set_num_threads(1)
    trainer = _trainer(micro_model_dir, tmp_path, True, beta=0.04, top_entropy_quantile=0.8)
    inputs = trainer._prepare_inputs([row for row in _rows()[:2] for _ in range(G)])
    lengths = inputs["completion_mask"].sum(-1)
    assert len(set(inputs["prompt_mask"].sum(-1).tolist())) == 2  # prompts of two lengths
    assert inputs["ref_per_token_logps"] is not None
    grads = {}
    for shared in (False, True):
        trainer.shared_prefix = shared
        trainer.model.zero_grad(set_to_none=True)
        trainer._compute_loss(trainer.model, inputs).backward()
        grads[shared] = {n: p.grad.clone() for n, p in trainer.model.named_parameters()}
    assert lengths.min() >= 1
    for name, trl in grads[False].items():
        assert (grads[True][name] - trl).norm() <= 1e-5 * trl.norm() + 1e-12, name


def test_the_setting_is_checked_and_kept_out_of_the_run_key() -> None:
    assert TrainSettings().shared_prefix == "auto"
    with pytest.raises(UserError, match="shared_prefix='yes'"):
        TrainSettings(shared_prefix="yes")
    base = RunSpec("grpo", "tool-calling", "tiny", 0)
    off = RunSpec("grpo", "tool-calling", "tiny", 0, train=TrainSettings(shared_prefix="off"))
    assert off.run_key() == base.run_key()  # float rounding only: the same cell
    assert "shared_prefix" not in base.to_dict()["train"] and "train.shared_prefix" not in base.flat_params()
    assert RunSpec.from_dict(off.to_dict()).train.shared_prefix == "off"  # how a worker gets it
    assert off.flat_params()["train.shared_prefix"] == "off"
