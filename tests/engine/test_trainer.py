"""The advantage hook: what TRL trains on is exactly the chosen method's output."""

from __future__ import annotations

import torch
from datasets import Dataset
from trl import GRPOConfig, GRPOTrainer

import mrbench.methods as methods
from mrbench.engine.models import load_model, load_tokenizer
from mrbench.engine.trainer import DiagnosticsAccumulator, MultiRewardGRPOTrainer

G = 4


class _TRLProbe(GRPOTrainer):
    """Sits between our subclass and TRL: records the advantages TRL computed itself."""

    def _generate_and_score_completions(self, inputs):
        out = super()._generate_and_score_completions(inputs)
        self.trl_advantages = out["advantages"].clone()
        return out


class _Recorder(MultiRewardGRPOTrainer, _TRLProbe):
    """Records our final advantages and the rewards they were computed from."""

    def _calculate_rewards(self, *args, **kwargs):
        rewards = super()._calculate_rewards(*args, **kwargs)
        self.seen_rewards = rewards.clone()
        return rewards

    def _generate_and_score_completions(self, inputs):
        out = super()._generate_and_score_completions(inputs)
        self.final_advantages = out["advantages"].clone()
        return out


def _length(prompts, completions, **kw):
    return [float(len(c[0]["content"])) / 10.0 for c in completions]


def _has_brace(prompts, completions, **kw):
    return [1.0 if "{" in c[0]["content"] else 0.0 for c in completions]


def _trainer(model_dir, tmp_path, method: str, params: dict) -> _Recorder:
    torch.manual_seed(0)
    tok = load_tokenizer(str(model_dir))
    rows = [{"prompt": [{"role": "user", "content": f"add {i} {i + 1}"}]} for i in range(8)]
    cfg = GRPOConfig(
        output_dir=str(tmp_path),
        max_steps=2,
        per_device_train_batch_size=2 * G,
        num_generations=G,
        max_completion_length=12,
        learning_rate=1e-3,
        logging_steps=1,
        report_to=[],
        save_strategy="no",
        use_cpu=True,
        bf16=False,
        disable_tqdm=True,
        remove_unused_columns=False,
        seed=0,
    )
    return _Recorder(
        model=load_model(str(model_dir)),
        reward_funcs=[_length, _has_brace],
        args=cfg,
        train_dataset=Dataset.from_list(rows),
        processing_class=tok,
        method_fn=methods.get_method(method).obj,
        method_params=params,
    )


def test_grpo_through_the_hook_equals_trl_builtin(micro_model_dir, tmp_path):
    trainer = _trainer(micro_model_dir, tmp_path, "grpo", {"eps": 1e-4})  # TRL's epsilon
    trainer.train()
    torch.testing.assert_close(trainer.final_advantages, trainer.trl_advantages, atol=1e-5, rtol=1e-5)


def test_other_method_replaces_advantages_and_logs(micro_model_dir, tmp_path):
    trainer = _trainer(micro_model_dir, tmp_path, "gdpo", {})
    trainer.train()
    rewards = trainer.seen_rewards.view(-1, G, 2)
    expected = methods.compute_advantages("gdpo", rewards, torch.ones(2)).reshape(-1)
    torch.testing.assert_close(trainer.final_advantages, expected.to(trainer.final_advantages.dtype))
    # The completion log shows the advantages that were trained on, not TRL's.
    logged = torch.tensor(list(trainer._logs["advantages"]))[-expected.numel() :]
    torch.testing.assert_close(logged, expected.float(), atol=1e-6, rtol=1e-6)
    history = {k for entry in trainer.state.log_history for k in entry}
    assert {"adv/sign_flip_vs_grpo", "adv/share/_length", "adv/frac_zero_var_groups"} <= history
    summary = trainer.diag_accumulator.summary(["_length", "_has_brace"])
    assert summary["steps"] == 2 and len(summary["corr_matrix"]) == 2


def test_diagnostics_accumulator_skips_undefined_values():
    acc = DiagnosticsAccumulator()
    acc.add({"corr_matrix": [[1.0, None], [None, 1.0]], "share": [1.0, None]})
    acc.add({"corr_matrix": [[1.0, 0.5], [0.5, 1.0]], "share": [0.5, 0.5]})
    summary = acc.summary(["a", "b"])
    assert summary["corr_matrix"] == [[1.0, 0.5], [0.5, 1.0]]
    assert summary["share"] == [0.75, 0.5]
    assert DiagnosticsAccumulator().summary(["a"])["steps"] == 0
