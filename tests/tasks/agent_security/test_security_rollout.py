"""Multi-turn training rollouts: token assembly, the env mask, and real GRPO steps through TRL.

The training steps run the engine's trainer (a ``trl.GRPOTrainer`` subclass), which builds the
rollout's context and runs the task's rollout as TRL's ``rollout_func``.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

import pytest

from mrbench.core.rollout import RolloutBatch, RolloutContext
from mrbench.tasks.agent_security.episode import Limits, replay
from mrbench.tasks.agent_security.rewards import build_environment
from mrbench.tasks.agent_security.rollout import (
    chat_ids,
    make_rollout,
    run_token_episodes,
    tool_suffix_ids,
)
from mrbench.tasks.agent_security.scenarios import Scenario


def scripted_tokens(tokenizer: Any, prompt_ids: list[list[int]], plans: list[list[str]]) -> Any:
    """A token generator that plays each episode's plan (found by its prompt prefix)."""
    eos = tokenizer.eos_token_id
    marker = tokenizer("<|im_start|>assistant", add_special_tokens=False)["input_ids"]

    def generate(batch: list[list[int]], max_new_tokens: int) -> list[list[int]]:
        out = []
        for ids in batch:
            i = next(k for k, p in enumerate(prompt_ids) if ids[: len(p)] == p)
            tail = ids[len(prompt_ids[i]) :]
            turn = sum(1 for k in range(len(tail)) if tail[k : k + len(marker)] == marker)
            text = plans[i][min(turn, len(plans[i]) - 1)]
            out.append([*tokenizer(text, add_special_tokens=False)["input_ids"][:max_new_tokens], eos])
        return out

    return generate


def test_tool_suffix_is_what_the_template_renders(tokenizer: Any) -> None:
    suffix = tool_suffix_ids(tokenizer, [{"role": "tool", "content": "Balance: 12."}])
    assert tokenizer.decode(suffix) == "\n<|im_start|>tool\nBalance: 12.<|im_end|>\n<|im_start|>assistant\n"


def test_token_episodes_mask_tool_results(small_task: Any, tokenizer: Any) -> None:
    samples = [s for s in small_task.train_samples() if s.columns["attacked"]][:3]
    # The scripted generator tells episodes apart by their prompt: no two may share a request.
    attacked_goals = {s.columns["goal"] for s in samples}
    clean = [s for s in small_task.train_samples() if not s.columns["attacked"]]
    samples += [s for s in clean if s.columns["goal"] not in attacked_goals][:2]
    assert len({s.columns["goal"] for s in samples}) == len(samples)
    scenarios = [Scenario.from_json(s.columns["scenario"]) for s in samples]
    envs = [build_environment(s.columns["scenario"]) for s in samples]
    prompt_ids = [chat_ids(tokenizer, env.initial_messages(), add_generation_prompt=True) for env in envs]
    garbage = "I refuse to use tools"
    plans = [list(sc.gold) for sc in scenarios[:-1]] + [[garbage]]
    generate = scripted_tokens(tokenizer, prompt_ids, plans)
    envs = [build_environment(s.columns["scenario"]) for s in samples]
    got_prompts, completions, masks, results = run_token_episodes(
        envs,
        tokenizer,
        generate,
        limits=small_task.limits,
        max_new_tokens=64,
        eos_token_ids=[tokenizer.eos_token_id],
    )
    assert got_prompts == prompt_ids
    for prompt, ids, mask, result, scenario in zip(
        prompt_ids, completions, masks, results, scenarios, strict=True
    ):
        assert len(ids) == len(mask)
        model_text = tokenizer.decode([t for t, m in zip(ids, mask, strict=True) if m])
        assert model_text == "".join(f"{t}<|im_end|>" for t in result.turns)
        # prompt + completion is exactly the chat-templated conversation (minus the template's last "\n").
        full = tokenizer.apply_chat_template(result.messages, tokenize=False)
        assert tokenizer.decode(prompt + ids) + "\n" == full
        assert replay(build_environment(scenario.to_json()), result.turns).outcome() == result.outcome()
    assert all(r.termination == "answered" and r.utility for r in results[:-1])
    assert all(0 in m for m in masks[:-1])
    assert not results[0].attack_succeeded
    assert results[-1].termination == "unparsable" and set(masks[-1]) == {1}


def test_token_budget_stops_episodes(small_task: Any, tokenizer: Any) -> None:
    sample = next(s for s in small_task.train_samples() if s.columns["attacked"])
    scenario = Scenario.from_json(sample.columns["scenario"])
    env = build_environment(sample.columns["scenario"])
    prompt = chat_ids(tokenizer, env.initial_messages(), add_generation_prompt=True)
    generate = scripted_tokens(tokenizer, [prompt], [list(scenario.gold)])
    _, _, _, results = run_token_episodes(
        [env],
        tokenizer,
        generate,
        limits=Limits(),
        max_new_tokens=64,
        eos_token_ids=[tokenizer.eos_token_id],
        max_length=len(prompt) + 90,
    )
    assert results[0].termination == "budget" and results[0].valid


def test_generation_failure_propagates(small_task: Any, tokenizer: Any) -> None:
    """A failing ``generate`` (out of memory, a vLLM error) is not the episode's fault: the error
    reaches the trainer, which ends the cell, instead of scoring an empty episode."""
    sample = small_task.train_samples()[0]

    def broken(batch: list[list[int]], n: int) -> list[list[int]]:
        raise RuntimeError("device lost")

    with pytest.raises(RuntimeError, match="device lost"):
        run_token_episodes(
            [build_environment(sample.columns["scenario"])],
            tokenizer,
            broken,
            limits=Limits(),
            max_new_tokens=8,
            eos_token_ids=[tokenizer.eos_token_id],
        )


# --------------------------------------------------------------------------- a real GRPOTrainer


def _train(task: Any, generator: Any, tmp_path: Any, rollout: Any, steps: int = 1) -> Any:
    """``steps`` GRPO steps of ``generator``'s random model (and tokenizer) on the task's first prompts."""
    import torch
    from datasets import Dataset
    from trl import GRPOConfig

    import mrbench.methods as methods
    from mrbench.engine.training.trainer import MultiRewardGRPOTrainer

    torch.set_num_threads(1)
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    samples = task.train_samples()[:8]
    dataset = Dataset.from_list([{"prompt": s.prompt, **s.columns} for s in samples])
    args = GRPOConfig(
        output_dir=str(tmp_path),
        use_cpu=True,
        bf16=False,
        max_steps=steps,
        num_generations=4,
        per_device_train_batch_size=8,
        max_completion_length=48,
        report_to=[],
        logging_steps=1,
        save_strategy="no",
        remove_unused_columns=False,
        gradient_checkpointing=False,
        beta=0.0,
        temperature=1.0,
        seed=0,
        disable_tqdm=True,
    )
    trainer = MultiRewardGRPOTrainer(
        model=generator.model,
        reward_funcs=[c.fn for c in task.reward_components()],
        args=args,
        train_dataset=dataset,
        processing_class=generator.tokenizer,
        method_fn=methods.get_method("grpo").obj,
        rollout=rollout,
    )
    trainer.train()
    return trainer


def test_grpo_trainer_trains_on_multi_turn_rollouts(
    small_task: Any, tokenizer: Any, random_generator: Any, tmp_path: Any
) -> None:
    """Scripted turns through the real trainer: multi-turn completions with tool tokens masked."""
    captured: list[RolloutBatch] = []

    # Half of the rollouts follow the gold plan (utility 1), half emit garbage (utility 0).
    def generate(batch: list[list[int]], n: int) -> list[list[int]]:
        out = []
        for k, ids in enumerate(batch):
            text = tokenizer.decode(ids)
            user = text.split("<|im_start|>user\n", 1)[1].split("<|im_end|>", 1)[0]
            sample = next(s for s in small_task.train_samples() if s.prompt[1]["content"] == user)
            scenario = Scenario.from_json(sample.columns["scenario"])
            turn = text.count("<|im_start|>assistant") - 1
            good = k % 2 == 0 or turn > 0  # at turn 0 every group gets both kinds
            plan = scenario.gold if good else ["no"]
            reply = tokenizer(plan[min(turn, len(plan) - 1)], add_special_tokens=False)["input_ids"]
            out.append([*reply, tokenizer.eos_token_id])
        return out

    base = make_rollout(small_task.environment_for_prompt, small_task.limits)

    def rollout(prompts: list[Any], context: RolloutContext) -> RolloutBatch:
        out = base(prompts, dataclasses.replace(context, generate=generate))
        captured.append(out)
        return out

    trainer = _train(small_task, random_generator(tokenizer), tmp_path, rollout)
    out = captured[0]
    assert len(out.completion_ids) == 8
    assert any(0 in m for m in out.env_mask)  # tool results were inserted and masked
    outcomes = [json.loads(o) for o in out.columns["outcome"]]
    assert {o["termination"] for o in outcomes} >= {"answered"}
    logs = trainer.state.log_history[0]
    assert "rewards/utility/mean" in logs and "rewards/safety/mean" in logs
    # TRL counts only model tokens (env_mask = 1) in the completion length it logs.
    model_tokens = [sum(m) for m in out.env_mask]
    assert logs["completions/mean_length"] == pytest.approx(sum(model_tokens) / len(model_tokens))


def test_grpo_trainer_with_the_model_generating(
    small_task: Any, tokenizer: Any, random_generator: Any, tmp_path: Any
) -> None:
    """The default rollout: the (random) model samples every turn through transformers."""
    hooks = small_task.training_hooks()
    trainer = _train(small_task, random_generator(tokenizer), tmp_path, hooks["rollout"])
    logs = trainer.state.log_history[0]
    assert logs["rewards/utility/mean"] == 0.0  # a random model solves nothing…
    assert "loss" in logs  # …but the step ran end to end
