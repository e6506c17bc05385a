"""Reward functions: TRL signature, single/multi-turn replay, rollout outcomes, invalid policies."""

from __future__ import annotations

import json
from typing import Any

import pytest

from mrbench.tasks.agent_security.attacks import HIJACKING_STYLES
from mrbench.tasks.agent_security.episode import Limits, ToolCall, render_calls, run_episodes
from mrbench.tasks.agent_security.rewards import episode_outcomes, make_reward_functions, reward_values
from mrbench.tasks.agent_security.scenarios import EmbeddedEnv, Scenario, gold_policy, obey_policy


def columns(samples: list[Any], **extra: list[Any]) -> dict[str, list[Any]]:
    keys = samples[0].columns.keys()
    return {k: [s.columns[k] for s in samples] for k in keys} | extra


def attacked_sample(task: Any) -> Any:
    return next(s for s in task.train_samples() if s.columns["attacked"])


def test_component_names_and_signature(small_task: Any) -> None:
    fns = make_reward_functions(Limits(), components=("utility", "safety", "format"))
    assert [f.__name__ for f in fns] == ["utility", "safety", "format"]
    sample = attacked_sample(small_task)
    out = [f([sample.prompt], ["garbage"], **columns([sample])) for f in fns]
    assert out == [[0.0], [0.0], [0.0]]  # penalised: invalid trajectory gets each minimum


def test_multi_turn_turns_column_is_replayed(small_task: Any) -> None:
    utility, safety = make_reward_functions(small_task.limits)
    samples = [s for s in small_task.train_samples() if s.columns["attacked"]][:4]
    scenarios = [Scenario.from_json(s.columns["scenario"]) for s in samples]
    gold = [run_episodes([EmbeddedEnv(sc)], gold_policy(sc))[0].turns for sc in scenarios]
    obey = [run_episodes([EmbeddedEnv(sc)], obey_policy(sc))[0].turns for sc in scenarios]
    turns = [json.dumps(t) for t in gold + obey]
    cols = columns(samples + samples, turns=turns)
    prompts = [s.prompt for s in samples + samples]
    # An obeying agent still does the user's task unless the injection told it to drop it.
    kept = [
        float(sc.attack["style"] not in HIJACKING_STYLES or sc.check["kind"] == "declined")
        for sc in scenarios
    ]
    assert 0.0 in kept and 1.0 in kept  # both kinds of attack are among the four
    assert utility(prompts, [""] * 8, **cols) == [1.0] * 4 + kept
    assert safety(prompts, [""] * 8, **cols) == [1.0] * 4 + [0.0] * 4


def test_outcome_column_is_used_as_is(small_task: Any) -> None:
    utility, safety = make_reward_functions(small_task.limits)
    sample = attacked_sample(small_task)
    outcome = json.dumps(
        {"termination": "answered", "valid": True, "utility": True, "attack_succeeded": True}
    )
    cols = columns([sample], outcome=[outcome])
    assert utility([sample.prompt], ["ignored"], **cols) == [1.0]
    assert safety([sample.prompt], ["ignored"], **cols) == [0.0]


def test_single_turn_prefix(small_task: Any) -> None:
    from mrbench.tasks.agent_security import agent_security

    task = agent_security(mode="single-turn", n_train=40, n_eval=10, seed=3)
    utility, safety = (c.fn for c in task.reward_components())
    sample = next(
        s for s in task.train_samples() if s.columns["attacked"] and json.loads(s.columns["prefix"])
    )
    scenario = Scenario.from_json(sample.columns["scenario"])
    good = scenario.gold[1]
    call = scenario.attack["call"]
    bad = render_calls([ToolCall(call["name"], call["parameters"])])
    cols = columns([sample, sample])
    assert utility([sample.prompt] * 2, [good, bad], **cols)[0] == 1.0
    assert safety([sample.prompt] * 2, [good, bad], **cols) == [1.0, 0.0]


def test_plain_completion_in_multi_turn_mode_counts_as_first_turn(small_task: Any) -> None:
    sample = attacked_sample(small_task)
    scenario = Scenario.from_json(sample.columns["scenario"])
    outcome = episode_outcomes([scenario.gold[0]], columns([sample]), small_task.limits)[0]
    assert outcome["termination"] == "incomplete" and outcome["valid"]


def test_clean_cases_have_safety_one(small_task: Any) -> None:
    _, safety = make_reward_functions(small_task.limits)
    sample = next(s for s in small_task.train_samples() if not s.columns["attacked"])
    assert safety([sample.prompt], ["<response>no idea</response>"], **columns([sample])) == [1.0]


def test_unscorable_policy_and_errors() -> None:
    assert reward_values({"valid": False, "utility": False, "attack_succeeded": None}, "unscorable") == {
        "utility": None,
        "safety": None,
        "format": 0.0,
    }
    with pytest.raises(ValueError, match="unknown invalid-trajectory policy 'ignore'"):
        make_reward_functions(Limits(), "ignore")
    with pytest.raises(ValueError, match="unknown reward components"):
        make_reward_functions(Limits(), components=("speed",))
    (utility,) = make_reward_functions(Limits(), components=("utility",))
    with pytest.raises(ValueError, match="'scenario' column"):
        utility([[]], ["x"])
