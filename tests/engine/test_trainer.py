"""The TRL adapter: what TRL trains on is exactly the chosen method's output; completion log; rollouts."""

from __future__ import annotations

import logging

import pytest
import torch
from datasets import Dataset
from trl import GRPOConfig, GRPOTrainer

import mrbench.methods as methods
from mrbench.core import layout
from mrbench.core.errors import UnknownNameError
from mrbench.core.records import BatchDiagnostics, ShadowComparison, ShadowStats
from mrbench.core.rollout import RolloutBatch, RolloutContext
from mrbench.engine.models.catalog import load_model, load_tokenizer
from mrbench.engine.training.rollout_adapter import trl_rollout_output
from mrbench.engine.training.run_diagnostics import DiagnosticsAccumulator
from mrbench.engine.training.step_diagnostics import resolve_shadows
from mrbench.engine.training.trainer import MultiRewardGRPOTrainer

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


def _config(tmp_path) -> GRPOConfig:
    return GRPOConfig(
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


def _rows() -> list[dict]:
    return [{"prompt": [{"role": "user", "content": f"add {i} {i + 1}"}]} for i in range(8)]


def _trainer(model_dir, tmp_path, method: str, params: dict, reward_funcs=None, **kwargs) -> _Recorder:
    torch.manual_seed(0)
    tok = load_tokenizer(str(model_dir))
    rows = _rows()
    return _Recorder(
        model=load_model(str(model_dir)),
        reward_funcs=reward_funcs or [_length, _has_brace],
        args=_config(tmp_path),
        train_dataset=Dataset.from_list(rows),
        processing_class=tok,
        method_fn=methods.get_method(method).obj,
        method_params=params,
        **kwargs,
    )


def _step_logs(trainer) -> list[dict]:
    """TRL's per-step log entries (the final summary entry has no loss)."""
    return [entry for entry in trainer.state.log_history if "loss" in entry]


SHADOW_RANGES = {"sign_agree": (0.0, 1.0), "rank_corr": (-1.0, 1.0), "resolution": (0.0, 1.0)}


def test_grpo_through_the_hook_equals_trl_builtin(micro_model_dir, tmp_path):
    trainer = _trainer(micro_model_dir, tmp_path, "grpo", {"eps": 1e-4})  # TRL's epsilon
    trainer.train()
    torch.testing.assert_close(trainer.final_advantages, trainer.trl_advantages, atol=1e-5, rtol=1e-5)

    # Every other registered method shadows every step, its comparisons in range.
    others = [name for name in methods.METHODS.names() if name != "grpo"]
    assert list(trainer.shadow_fns) == others
    steps = _step_logs(trainer)
    assert len(steps) == 2
    for logs in steps:
        assert 0.0 < logs[layout.ADV_RESOLUTION] <= 1.0
        for name in others:
            for stat, (low, high) in SHADOW_RANGES.items():
                assert low <= logs[layout.shadow_metric(name, stat)] <= high, (name, stat)
        # CorrGRPO keeps GRPO's centred numerator and rescales each group: same signs and order.
        assert logs[layout.shadow_metric("corrgrpo", "sign_agree")] == 1.0
        assert logs[layout.shadow_metric("corrgrpo", "rank_corr")] == pytest.approx(1.0)
        assert logs[layout.shadow_metric("corrgrpo", "resolution")] == logs[layout.ADV_RESOLUTION]
    summary = trainer.training_record(["_length", "_has_brace"]).diagnostics
    assert list(summary["shadow"]) == others and summary["shadow"]["corrgrpo"]["sign_agree"] == 1.0
    assert all(stats["steps"] == 2 for stats in summary["shadow"].values())
    assert 0.0 < summary["resolution"] <= 1.0


# Per group of G = 4 rollouts: reward vectors [1, 0], [0, 1], [0, 1], [0, 0] by position. GRPO's
# totals 1, 1, 1, 0 give 2 advantages for 3 vectors; GDPO's per-component z-scores tell [1, 0] from
# [0, 1] because the two components have different group statistics.
COLLAPSING = ((1.0, 0.0), (0.0, 1.0), (0.0, 1.0), (0.0, 0.0))


def _first_bit(prompts, completions, **kw):
    return [COLLAPSING[i % G][0] for i in range(len(completions))]


def _second_bit(prompts, completions, **kw):
    return [COLLAPSING[i % G][1] for i in range(len(completions))]


def test_grpo_collapses_binary_vectors_that_gdpo_resolves(micro_model_dir, tmp_path):
    trainer = _trainer(micro_model_dir, tmp_path, "grpo", {}, reward_funcs=[_first_bit, _second_bit])
    trainer.train()
    for logs in _step_logs(trainer):
        grpo, gdpo = logs[layout.ADV_RESOLUTION], logs[layout.shadow_metric("gdpo", "resolution")]
        assert grpo <= gdpo
        assert grpo == pytest.approx(2 / 3) and gdpo == 1.0
        assert logs[layout.shadow_metric("corrgrpo", "sign_agree")] == 1.0
    summary = trainer.training_record(["_first_bit", "_second_bit"]).diagnostics
    assert summary["resolution"] == pytest.approx(2 / 3) and summary["shadow"]["gdpo"]["resolution"] == 1.0


def _raises(rewards, weights):
    raise RuntimeError("cannot handle this batch")


def _wrong_shape(rewards, weights):
    return torch.zeros(rewards.shape[0])


def test_failing_shadow_is_skipped_with_one_warning(micro_model_dir, tmp_path, caplog):
    trainer = _trainer(micro_model_dir, tmp_path, "gdpo", {}, shadow_methods=("corrgrpo", "gdpo"))
    assert list(trainer.shadow_fns) == ["corrgrpo"]  # the method in use is never its own shadow
    trainer.shadow_fns.update({"boom": _raises, "flat": _wrong_shape})
    with caplog.at_level(logging.WARNING, logger="mrbench.engine.training.step_diagnostics"):
        trainer.train()
    assert trainer.state.global_step == 2
    warnings = [
        r.getMessage() for r in caplog.records if r.name == "mrbench.engine.training.step_diagnostics"
    ]
    assert len(warnings) == 2  # one per failing method, not one per step
    assert "'boom'" in warnings[0] and "cannot handle" in warnings[0] and "'flat'" in warnings[1]
    for logs in _step_logs(trainer):
        assert layout.shadow_metric("corrgrpo", "sign_agree") in logs
        skipped = (layout.ADV_SHADOW + "boom/", layout.ADV_SHADOW + "flat/")
        assert not any(key.startswith(skipped) for key in logs)
    assert set(trainer.training_record(["a", "b"]).diagnostics["shadow"]) == {"corrgrpo"}


def test_resolve_shadows_names_and_switch():
    grpo = methods.get_method("grpo").obj
    others = [name for name in methods.METHODS.names() if name != "grpo"]
    assert list(resolve_shadows(grpo, None)) == others
    assert resolve_shadows(grpo, ()) == {}
    assert resolve_shadows(grpo, ("grpo", "gdpo")) == {"gdpo": methods.get_method("gdpo").obj}
    with pytest.raises(UnknownNameError):
        resolve_shadows(grpo, ("no-such-method",))


def test_other_method_replaces_advantages_and_logs(micro_model_dir, tmp_path):
    trainer = _trainer(micro_model_dir, tmp_path, "gdpo", {})
    trainer.train()
    rewards = trainer.seen_rewards.view(-1, G, 2)
    expected = methods.compute_advantages("gdpo", rewards, torch.ones(2)).reshape(-1)
    torch.testing.assert_close(trainer.final_advantages, expected.to(trainer.final_advantages.dtype))
    # The completion log shows the advantages that were trained on, not TRL's.
    logged = torch.tensor(list(trainer._logs["advantages"]))[-expected.numel() :]
    torch.testing.assert_close(logged, expected.float(), atol=1e-6, rtol=1e-6)
    record = trainer.training_record(["_length", "_has_brace"])
    rows = record.completions
    assert len(rows) == len(trainer._logs["prompt"]) and rows[-1]["prompt"].startswith("add ")
    assert set(rows[-1]["rewards"]) == {"_length", "_has_brace"}
    torch.testing.assert_close(torch.tensor([r["advantage"] for r in rows])[-expected.numel() :], logged)
    history = {k for entry in trainer.state.log_history for k in entry}
    assert {"adv/sign_flip_vs_grpo", "adv/share/_length", "adv/frac_zero_var_groups"} <= history
    summary = record.diagnostics
    assert summary["steps"] == 2 and len(summary["corr_matrix"]) == 2
    # Every training batch's rewards [T, P, G, K], named and weighted as the trainer's reward functions.
    assert record.rewards.components == ("_length", "_has_brace") and record.rewards.weights == (1.0, 1.0)
    assert record.rewards.rewards.shape[0] == 2 and record.rewards.rewards.shape[2:] == (G, 2)
    seen = trainer.seen_rewards.view(-1, G, 2)[-record.rewards.rewards.shape[1] :]
    torch.testing.assert_close(torch.from_numpy(record.rewards.rewards[-1].astype("float32")), seen.float())


def _batch(corr: list, share: list) -> BatchDiagnostics:
    return BatchDiagnostics(None, corr, share, 0.0, None, None, 0.0, 0.0, 0.0, 0.0)


def test_diagnostics_accumulator_skips_undefined_values():
    acc = DiagnosticsAccumulator()
    undefined = ShadowStats(None, None, None)
    acc.add(
        _batch([[1.0, None], [None, 1.0]], [1.0, None]),
        ShadowComparison(None, {"gdpo": ShadowStats(1.0, None, 0.5), "x": undefined}),
    )
    acc.add(
        _batch([[1.0, 0.5], [0.5, 1.0]], [0.5, 0.5]),
        ShadowComparison(0.5, {"gdpo": ShadowStats(0.5, 0.25, 1.0)}),
    )
    summary = acc.summary(["a", "b"])
    assert summary["corr_matrix"] == [[1.0, 0.5], [0.5, 1.0]]
    assert summary["share"] == [0.75, 0.5]
    assert summary["resolution"] == 0.5
    assert summary["shadow"] == {
        "gdpo": {"sign_agree": 0.75, "rank_corr": 0.25, "resolution": 0.75, "steps": 2},
        "x": {**undefined.to_json(), "steps": 1},
    }
    empty = DiagnosticsAccumulator().summary(["a"])
    assert empty["steps"] == 0 and empty["resolution"] is None and empty["shadow"] == {}


def test_the_running_state_a_checkpoint_keeps_restores_what_was_saved(tmp_path):
    """What a training checkpoint keeps beside TRL's state (the diagnostics' running sums, through
    JSON as the resume marker holds them, the rewards so far and the batch count) comes back equal."""
    import json

    import numpy as np

    from mrbench.engine.training.step_diagnostics import StepDiagnostics

    saved = StepDiagnostics({})
    saved.accumulator.add(
        _batch([[1.0, None], [None, 1.0]], [1.0, None]),
        ShadowComparison(0.5, {"gdpo": ShadowStats(1.0, None, 0.5)}),
    )
    saved.rewards.add(np.arange(12.0).reshape(2, 3, 2), [7, 8])
    saved.batches_scored = 3
    diagnostics, batches = saved.save_running_state(tmp_path)
    restored = StepDiagnostics({})
    restored.restore_running_state(tmp_path, json.loads(json.dumps(diagnostics)), batches)
    assert restored.accumulator.summary(["a", "b"]) == saved.accumulator.summary(["a", "b"])
    assert restored.batches_scored == 3
    np.testing.assert_array_equal(restored.rewards.batches[0], saved.rewards.batches[0])
    with pytest.raises(ValueError, match="not the state of a DiagnosticsAccumulator"):
        DiagnosticsAccumulator.from_json({"__class__": "_Mean", "state": {"total": 0.0, "count": 0}})
    with pytest.raises(ValueError, match=r"unknown class 'os\.system'"):
        DiagnosticsAccumulator.from_json({"__class__": "os.system", "state": {}})


# --------------------------------------------------------------------------- task rollouts

ENV_TEXT = " [env]"


def _one_turn_rollout(seen: list[RolloutContext]):
    """A one-turn rollout with an environment suffix: model turn (mask 1), then ENV_TEXT (mask 0)."""

    def rollout(prompts: list[list[dict]], context: RolloutContext) -> RolloutBatch:
        seen.append(context)
        tok = context.tokenizer
        prompt_ids = [
            tok(
                tok.apply_chat_template(p, tokenize=False, add_generation_prompt=True),
                add_special_tokens=False,
            )["input_ids"]
            for p in prompts
        ]
        outputs = context.generate(prompt_ids, context.max_new_tokens)
        env = tok(ENV_TEXT, add_special_tokens=False)["input_ids"]
        completions, masks = [], []
        for ids in outputs:
            cut = next((k for k, t in enumerate(ids) if t in context.eos_token_ids), len(ids) - 1)
            turn = list(ids[: cut + 1])
            completions.append(turn + env)
            masks.append([1] * len(turn) + [0] * len(env))
        return RolloutBatch(
            prompt_ids, completions, masks, columns={"episode": [f"e{i}" for i in range(len(prompts))]}
        )

    return rollout


def _sees_env_and_column(prompts, completions, episode, **kw):
    assert len(episode) == len(completions) and all(e.startswith("e") for e in episode)
    return [1.0 if "[env]" in c[0]["content"] else 0.0 for c in completions]


def test_task_rollout_runs_as_trl_rollout_func(micro_model_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")  # TRL flags every rollout_func as experimental
    torch.manual_seed(0)
    tok = load_tokenizer(str(micro_model_dir))
    seen: list[RolloutContext] = []
    trainer = MultiRewardGRPOTrainer(
        model=load_model(str(micro_model_dir)),
        reward_funcs=[_sees_env_and_column, _has_brace],
        args=_config(tmp_path),
        train_dataset=Dataset.from_list(_rows()),
        processing_class=tok,
        method_fn=methods.get_method("grpo").obj,
        rollout=_one_turn_rollout(seen),
    )
    trainer.train()
    context = seen[0]
    assert context.tokenizer is trainer.processing_class and context.max_new_tokens == 12
    assert (
        tok.eos_token_id in context.eos_token_ids and context.max_length == 256
    )  # the micro model's context
    logs = trainer.state.log_history[0]
    assert logs["rewards/_sees_env_and_column/mean"] == 1.0  # the columns and env tokens reached the rewards
    # TRL counts only the model's tokens (mask 1) in the completion lengths it logs.
    assert logs["completions/max_length"] <= 12


def test_rollout_output_is_checked_before_trl_reads_it():
    batch = RolloutBatch([[1], [2]], [[3], [4]], [[1], [1]], columns={"outcome": ["a", "b"]})
    out = trl_rollout_output(batch, 2)
    assert out["logprobs"] is None and out["env_mask"] == [[1], [1]] and out["outcome"] == ["a", "b"]
    with pytest.raises(ValueError, match="2 episodes for 3 prompts"):
        trl_rollout_output(batch, 3)
    clash = RolloutBatch([[1]], [[3]], [[1]], columns={"logprobs": [0.0]})
    with pytest.raises(ValueError, match="shadow"):
        trl_rollout_output(clash, 1)


def test_rollout_and_rollout_func_exclude_each_other(micro_model_dir, tmp_path):
    with pytest.raises(ValueError, match="not both"):
        MultiRewardGRPOTrainer(
            model=load_model(str(micro_model_dir)),
            reward_funcs=[_has_brace],
            args=_config(tmp_path),
            train_dataset=Dataset.from_list(_rows()),
            processing_class=load_tokenizer(str(micro_model_dir)),
            method_fn=methods.get_method("grpo").obj,
            rollout=_one_turn_rollout([]),
            rollout_func=lambda prompts, trainer: {},
        )
