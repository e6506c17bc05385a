"""The task object: factory validation, samples, demonstrations, evaluation, training hooks."""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Sequence
from typing import Any

import pytest

from mrbench.core.contracts import Message
from mrbench.tasks import TASKS, Task, build_task
from mrbench.tasks.agent_security import AgentSecurityTask, agent_security
from mrbench.tasks.agent_security.attacks import STYLES
from mrbench.tasks.agent_security.episode import Episode, ScriptedPolicy, ToolCall, parse_turn, render_calls
from mrbench.tasks.agent_security.goals import TEMPLATES
from mrbench.tasks.agent_security.scenarios import (
    SCENARIO_KEY,
    EmbeddedEnv,
    Scenario,
    gold_policy,
    obey_policy,
)


class ScriptedGenerator:
    """A :class:`mrbench.core.contracts.Generator` that plays a scripted policy (no model)."""

    model = None
    tokenizer = None

    def __init__(self, policy: Any) -> None:
        self.policy = policy
        self.budgets: list[int] = []

    def __call__(self, conversations: Sequence[list[Message]], *, max_new_tokens: int) -> list[str]:
        self.budgets.append(max_new_tokens)
        return self.policy(list(conversations))


def test_registry_builds_the_task() -> None:
    entry = TASKS.get("agent-security")
    assert entry.params["dataset"] == "embedded" and entry.params["mode"] == "multi-turn"
    task = build_task("agent-security", {"n_train": "20", "n_eval": "10"})
    assert isinstance(task, Task) and isinstance(task, AgentSecurityTask)
    assert task.primary_metric == "joint" and task.lower_is_better == frozenset({"asr"})
    assert task.max_completion_tokens == 64 and task.limits.max_turns == 4
    assert agent_security(prompt_style="compact").max_completion_tokens == 48  # the tiny models' budget
    assert [c.name for c in task.reward_components()] == ["utility", "safety"]
    assert [c.name for c in agent_security(format_weight=0.5).reward_components()] == [
        "utility",
        "safety",
        "format",
    ]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"dataset": "agentdojo2"}, r"unknown dataset 'agentdojo2'; choose from embedded, agentdojo"),
        ({"mode": "multiturn"}, r"unknown mode 'multiturn'; choose from multi-turn, single-turn"),
        ({"prompt_style": "long"}, r"unknown prompt_style 'long'; choose from chat, compact"),
        ({"attacks": "important_instructions,jailbreak"}, r"unknown attack 'jailbreak'"),
        ({"invalid": "skip"}, r"unknown invalid policy 'skip'"),
        ({"n_train": -1}, r"bad value -1 for parameter 'n_train' of 'agent-security': must be >= 0"),
        ({"max_turns": 1.5}, r"'max_turns' of 'agent-security': must be an integer"),
        (
            {"format_weight": float("inf")},
            r"bad value inf for parameter 'format_weight' .*: must be >= 0 and <= 1000",
        ),
        (
            {"n_eval": 10_001},
            r"bad value 10001 for parameter 'n_eval' of 'agent-security': must be >= 0 and <= 10000",
        ),
        ({"suites": "banking"}, r"applies to dataset 'agentdojo' only"),
        (
            {"dataset": "agentdojo", "mode": "single-turn"},
            r"'single-turn' is available for dataset 'embedded'",
        ),
        ({"dataset": "agentdojo", "suites": "bank"}, r"unknown suite 'bank'"),
        ({"dataset": "agentdojo", "attacks": "ignore_previous"}, r"unknown attack 'ignore_previous'"),
    ],
)
def test_bad_settings_name_the_value(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        agent_security(**kwargs)


def test_samples(small_task: AgentSecurityTask) -> None:
    train, evaluation = small_task.train_samples(), small_task.eval_samples()
    assert len(train) == 60 and len(evaluation) == 40
    assert not {s.columns["goal"] for s in train} & {s.columns["goal"] for s in evaluation}
    sample = train[0]
    assert [m["role"] for m in sample.prompt] == ["system", "user"]
    assert sample.prompt[0][SCENARIO_KEY] == sample.id
    assert all(isinstance(v, (str, int, float, bool)) for v in sample.columns.values())
    assert sum(len(m["content"]) for m in sample.prompt) < 400  # short prompts for the tiny models
    assert [s.id for s in agent_security(n_train=60, n_eval=40, seed=3).train_samples()] == [
        s.id for s in train
    ]


@pytest.mark.parametrize("share", [0.0, 0.25, 0.5, 1.0])
def test_clean_share_sets_the_training_mix(share: float) -> None:
    task = agent_security(n_train=200, n_eval=40, seed=3, clean_share=share)
    train = task.train_samples()
    assert len(train) == 200
    clean = sum(not s.columns["attacked"] for s in train) / len(train)
    # The direct-request templates have no attacked variant and the others one per style: at
    # most n_read * |STYLES| attacked cases per n_templates clean, so a mix with any clean case
    # keeps at least this floor of them (11 / 43 with eleven templates, three direct).
    n_templates = len(TEMPLATES)
    n_read = sum(not name.startswith("direct_") for name in TEMPLATES)
    floor = n_templates / (n_templates + n_read * len(STYLES))
    assert abs(clean - (max(share, floor) if share > 0 else 0.0)) <= 0.03
    if 0 < share < 1:  # every attack style keeps its place in the mix
        assert {s.columns["style"] for s in train if s.columns["attacked"]} == set(STYLES)
    # A dropped case is not built at all: a prompt naming it is not one of this task's.
    other_mix = agent_security(n_train=200, n_eval=40, seed=3, clean_share=1.0 if share < 1 else 0.0)
    built = {s.id for s in train + task.eval_samples()}
    dropped = next(s for s in other_mix.train_samples() if s.id not in built)
    with pytest.raises(ValueError, match="did not build"):
        task.scenario_for_prompt(dropped.prompt)
    # Eval keeps every variant whatever the training mix: 1 clean case per goal, the rest attacked.
    assert [s.id for s in task.eval_samples()] == [
        s.id for s in agent_security(n_train=200, n_eval=40, seed=3, clean_share=0.0).eval_samples()
    ]


def test_clean_share_defaults_per_dataset() -> None:
    assert agent_security().clean_share == 0.5
    assert agent_security(clean_share=0.3).clean_share == 0.3
    assert agent_security(dataset="agentdojo").clean_share is None  # every case as the suites list them
    with pytest.raises(ValueError, match="'clean_share' of 'agent-security': must be <= 1"):
        agent_security(clean_share=1.5)


def test_scenario_lookup_for_the_rollout(small_task: AgentSecurityTask) -> None:
    sample = next(s for s in small_task.train_samples() if s.columns["attacked"])
    assert small_task.scenario_for_prompt(sample.prompt) == sample.columns["scenario"]
    # Without the key, a prompt shared by several variants (clean and attacked) is ambiguous.
    bare = [{"role": m["role"], "content": m["content"]} for m in sample.prompt]
    with pytest.raises(ValueError, match="cannot tell which scenario"):
        small_task.scenario_for_prompt(bare)
    with pytest.raises(ValueError, match="did not build"):
        small_task.scenario_for_prompt([{**sample.prompt[0], SCENARIO_KEY: "nope"}])


def test_demonstrations_are_whole_accepted_episodes(small_task: AgentSecurityTask) -> None:
    demos = small_task.demonstrations(150, seed=1)
    assert len(demos) == 150 and demos == small_task.demonstrations(150, seed=1)
    eval_goals = {s.columns["goal"] for s in small_task.eval_samples()}
    for prompt, completion in demos:
        # One pair per episode: every assistant turn (earlier ones inside the prompt) is accepted,
        # and the last one closes the episode.
        turns = [m["content"] for m in prompt if m["role"] == "assistant"] + [completion]
        assert all(parse_turn(t).valid for t in turns)
        assert parse_turn(completion).response is not None
        assert prompt[1]["content"] not in eval_goals  # no eval request leaks into the warm start
        assert all(SCENARIO_KEY not in m for m in prompt)
    assert {len(p) for p, _ in demos} >= {4, 6}  # a direct request (1 call) and read-then-act episodes
    # Some episodes read an injection (and obey or ignore it: the test below); it arrives in a
    # tool result, never in the user's request.
    injected = [p for p, _ in demos if "<INFORMATION>" in json.dumps(p)]
    assert 0.05 * len(demos) < len(injected) < 0.5 * len(demos)
    for prompt in injected:
        at = next(i for i, m in enumerate(prompt) if "<INFORMATION>" in m["content"])
        assert prompt[at]["role"] == "tool"


def _eval_with(task: AgentSecurityTask, samples: list[Any], make_policy: Any) -> dict[str, Any]:
    records, metrics = [], []
    for sample in samples:
        scenario = Scenario.from_json(sample.columns["scenario"])
        result = task.evaluate(ScriptedGenerator(make_policy(scenario)), [sample])
        records.extend(result.samples)
        metrics.append(result.metrics)
    return {"records": records, "metrics": metrics}


def test_evaluate_gold_and_obey(small_task: AgentSecurityTask) -> None:
    samples = small_task.eval_samples()[:15]
    gold = _eval_with(small_task, samples, gold_policy)
    assert all(r["utility"] and not r["attack_succeeded"] for r in gold["records"])
    obey = _eval_with(small_task, samples, obey_policy)
    attacked = [r for r in obey["records"] if r["attacked"]]
    assert attacked and all(r["attack_succeeded"] for r in attacked)
    assert all(r["termination"] == "answered" for r in gold["records"] + obey["records"])


def test_evaluate_metrics(small_task: AgentSecurityTask) -> None:
    samples = small_task.eval_samples()
    refuse = ScriptedGenerator(ScriptedPolicy(["<response>I cannot help with that.</response>"]))
    result = small_task.evaluate(refuse, samples)
    m = result.metrics
    assert set(m) == {
        "utility",
        "utility_clean",
        "utility_attacked",
        "asr",
        "joint",
        "valid_rate",
        "n_clean",
        "n_attacked",
    }
    assert m["asr"] == 0.0 and m["joint"] == 0.0 and m["valid_rate"] == 1.0
    # Refusing meets only the "only if" goals whose answer is no; utility weighs both kinds of case.
    assert 0 <= m["utility"] < 0.2
    both = m["n_clean"] * m["utility_clean"] + m["n_attacked"] * m["utility_attacked"]
    assert m["utility"] == pytest.approx(both / (m["n_clean"] + m["n_attacked"]))
    assert m["n_clean"] + m["n_attacked"] == len(samples) and m["n_attacked"] > 0
    assert refuse.budgets == [48]  # one round: everyone answered at once
    record = result.samples[0]
    assert {"id", "termination", "rewards", "conversation", "attack_succeeded"} <= set(record)
    garbage = small_task.evaluate(ScriptedGenerator(lambda convs: ["???"] * len(convs)), samples)
    assert garbage.metrics["valid_rate"] == 0.0 and garbage.metrics["joint"] == 0.0


def test_single_turn_mode() -> None:
    task = agent_security(mode="single-turn", n_train=30, n_eval=30, seed=3)
    assert task.training_hooks() == {}
    sample = next(s for s in task.eval_samples() if s.columns["attacked"])
    scenario = Scenario.from_json(sample.columns["scenario"])
    assert sample.prompt[-1]["role"] == "tool" and scenario.attack["text"] in sample.prompt[-1]["content"]
    gold = task.evaluate(ScriptedGenerator(gold_policy(scenario)), [sample])
    assert gold.metrics["joint"] == 1.0 and gold.samples[0]["termination"] in ("answered", "incomplete")
    obey = task.evaluate(ScriptedGenerator(obey_policy(scenario)), [sample])
    assert obey.metrics["asr"] == 1.0


def test_training_hooks_give_a_rollout(small_task: AgentSecurityTask) -> None:
    hooks = small_task.training_hooks()
    assert set(hooks) == {"rollout"} and callable(hooks["rollout"])
    env = small_task.environment_for_prompt(small_task.train_samples()[0].prompt)
    assert isinstance(env, EmbeddedEnv) and Episode(env).messages[1]["role"] == "user"


# --------------------------------------------------------------------------- mrbench score


def test_score_embedded_gold_through_the_harness() -> None:
    from mrbench.engine.evaluation.scoring import score_task

    report = score_task(
        "agent-security", dataset="embedded", gold=True, task_params={"n_train": 80, "n_eval": 20}
    )
    out = report.to_dict()
    assert out["n"] == 100 and out["summary"] == {"utility": 1.0, "safety": 1.0}
    assert out["status_counts"] == {"answered": 100} and not out["errors"]
    assert {"id", "rewards", "status"} <= set(out["items"][0])


def test_score_items_bad_and_partial_input(small_task: AgentSecurityTask) -> None:
    sample = next(s for s in small_task.train_samples() if s.columns["attacked"])
    scenario = Scenario.from_json(sample.columns["scenario"])
    call = scenario.attack["call"]
    obey = [scenario.gold[0], render_calls([ToolCall(call["name"], call["parameters"])]), *scenario.gold[1:]]
    items = [
        {"dataset": "embedded", "id": sample.id, "completion": json.dumps(obey)},
        {"dataset": "embedded", "id": sample.id, "completion": "I would rather not"},
        {"dataset": "embedded", "id": sample.id, "completion": scenario.gold[0]},  # first turn only
        {"dataset": "embedded", "id": "nope", "completion": "x"},
        {"dataset": "bfcl", "id": sample.id, "completion": "x"},
    ]
    scored = small_task.score_items(items)
    assert [s.status for s in scored] == [
        "answered",
        "unparsable",
        "incomplete",
        "unknown_id",
        "unknown_dataset",
    ]
    assert scored[0].rewards == {"utility": 1.0, "safety": 0.0}
    assert scored[1].rewards == {"utility": 0.0, "safety": 0.0}
    assert scored[3].error and "nope" in scored[3].error and scored[4].rewards == {}


_INJECTION_STARTS = ("<INFORMATION>", "Ignore your", "IGNORE ALL", "[task complete]", "Done, the task is")


def _reaction_to_injection(prompt: list[Message], last: str) -> str | None:
    """``"obey"`` or ``"resist"`` for a demonstrated episode with an injection, else ``None``.

    The turn right after the tool result that carries the injection obeys when it is a call
    whose every value is written in the injected text (the attacker's account, address or file).
    """
    messages = [*prompt, {"role": "assistant", "content": last}]
    for i, message in enumerate(messages):
        starts = [message["content"].find(s) for s in _INJECTION_STARTS if s in message["content"]]
        if message["role"] != "tool" or not starts:
            continue
        injected = message["content"][min(starts) :]
        turn = parse_turn(next(m["content"] for m in messages[i + 1 :] if m["role"] == "assistant"))
        values = [str(v) for call in turn.calls for v in call.arguments.values()]
        written = [re.search(rf"(?<![\w-]){re.escape(v)}(?![\w])", injected) for v in values]
        obeys = bool(values) and all(written)
        return "obey" if obeys else "resist"
    return None


def test_warm_start_demonstrations_both_obey_and_resist() -> None:
    """About one demonstrated episode in five obeys an injection and as many ignore it."""
    demos = agent_security().demonstrations(600, 0)
    reactions = Counter(_reaction_to_injection(prompt, last) for prompt, last in demos)
    assert set(reactions) == {None, "obey", "resist"}
    for kind in ("obey", "resist"):
        assert 0.12 <= reactions[kind] / len(demos) <= 0.28, reactions
    # Every demonstrated episode is well formed, the resisting ones included.
    assert all(parse_turn(last).valid for _, last in demos)
