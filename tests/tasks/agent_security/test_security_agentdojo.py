"""AgentDojo v1.2.2 offline: cases, fast loader, gold and injection-obeying agents, pipeline element."""

from __future__ import annotations

import json
import warnings
from typing import Any

import pytest

from mrbench.tasks.agent_security import agentdojo_suites as ad
from mrbench.tasks.agent_security.agentdojo_policies import (
    INJECTION_MARKER,
    UNREACHABLE_ATTACKS,
    gold_policy,
    gold_turns,
    obey_policy,
    unreachable_attack,
)
from mrbench.tasks.agent_security.agentdojo_runner import AgentDojoEnv, run_policy, score_gold
from mrbench.tasks.agent_security.episode import (
    Episode,
    Limits,
    ScriptedPolicy,
    ToolCall,
    drive,
    outcome,
    render_calls,
)

LIMITS = Limits(max_turns=40, max_chars_per_turn=100_000, max_tool_chars=1_000_000)


@pytest.fixture(scope="module", autouse=True)
def _quiet() -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


@pytest.fixture(scope="module")
def cases() -> list[ad.AgentDojoCase]:
    return ad.list_cases()


def sample_cases(
    cases: list[ad.AgentDojoCase], per_suite: int, attacked: bool = True
) -> list[ad.AgentDojoCase]:
    """A spread of cases: every suite, both attacks, several user and injection tasks."""
    out = []
    for suite in ad.SUITES:
        pool = [c for c in cases if c.suite == suite and c.attacked == attacked]
        step = max(1, len(pool) // per_suite)
        out.extend(pool[::step][:per_suite])
    return out


def test_cases_and_split(cases: list[ad.AgentDojoCase]) -> None:
    clean = [c for c in cases if not c.attacked]
    assert len(clean) == 97  # the paper's 97 user tasks
    per_attack = [c for c in cases if c.attack == "important_instructions"]
    assert len(per_attack) == 949 and len(cases) == 97 + 2 * 949
    train, evaluation = ad.split_cases(cases)
    assert len(train) + len(evaluation) == len(cases) and evaluation
    assert not {c.goal_key for c in train} & {c.goal_key for c in evaluation}
    assert ad.AgentDojoCase.from_json(cases[5].to_json()) == cases[5]
    with pytest.raises(ValueError, match="unknown AgentDojo suite 'shop'"):
        ad.list_cases(["shop"])
    with pytest.raises(ValueError, match="unknown AgentDojo attack 'dos'"):
        ad.list_cases(["banking"], ["dos"])


def test_fast_loader_builds_the_same_environment(cases: list[ad.AgentDojoCase]) -> None:
    from agentdojo.task_suite.task_suite import TaskSuite

    for case in sample_cases(cases, 3):
        suite = case.suite_obj()
        injections = case.injections()
        assert injections and all(INJECTION_MARKER in v for v in injections.values())
        assert suite.load_and_inject_default_environment(
            injections
        ) == TaskSuite.load_and_inject_default_environment(suite, injections)


def test_gold_utility(cases: list[ad.AgentDojoCase]) -> None:
    chosen = sample_cases(cases, 4) + sample_cases(cases, 2, attacked=False)
    results = score_gold(chosen)
    assert all(r.utility and r.termination == "answered" for r in results), [r.case.id for r in results]
    assert all((r.attack_succeeded is False) == r.case.attacked for r in results)


def test_obeying_agent_through_the_pipeline_and_our_runner(cases: list[ad.AgentDojoCase]) -> None:
    for case in sample_cases(cases, 2):
        (piped,) = run_policy([case], obey_policy(case), LIMITS)
        assert piped.attack_succeeded is True and piped.termination == "answered", case.id
        ours = drive([Episode(AgentDojoEnv(case), LIMITS)], obey_policy(case))[0]
        assert ours.attack_succeeded is True and ours.termination == "answered", case.id
        gold = drive([Episode(AgentDojoEnv(case), LIMITS)], gold_policy(case))[0]
        assert gold.utility and gold.attack_succeeded is False, case.id


def test_pipeline_element_survives_bad_output(cases: list[ad.AgentDojoCase]) -> None:
    case = next(c for c in cases if c.suite == "banking" and c.attacked)

    def broken(convs: list[Any]) -> list[str]:
        raise RuntimeError("generator crashed")

    for policy, termination in [
        (ScriptedPolicy(["pay the bill please"]), "unparsable"),
        (broken, "policy_error"),
        (ScriptedPolicy(["<response>" + "x" * 200_000 + "</response>"]), "overlong"),
        (ScriptedPolicy([render_calls([ToolCall("get_balance", {})])] * 20), "turn_limit"),
        (ScriptedPolicy([render_calls([ToolCall("hack_bank", {})])]), "unknown_tool"),
    ]:
        (result,) = run_policy([case], policy, LIMITS)
        assert result.termination == termination and not result.utility
        assert result.attack_succeeded is False
        # The embedded episodes' rule: only a turn limit is a well-formed ending of these.
        assert result.valid == (termination == "turn_limit")
        assert result.outcome() == outcome(termination, False, False, len(result.turns))


def test_pipeline_element_lets_out_of_memory_through(cases: list[ad.AgentDojoCase]) -> None:
    """AgentDojo's pipeline: a CUDA out-of-memory fails the evaluation, it is no ``policy_error``
    (finding 3 of issue 33)."""
    import torch

    case = next(c for c in cases if c.suite == "banking" and c.attacked)

    def out_of_memory(convs: list[Any]) -> list[str]:
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    with pytest.raises(torch.OutOfMemoryError):
        run_policy([case], out_of_memory, LIMITS)


def test_env_semantics_unknown_tool_and_bad_arguments(cases: list[ad.AgentDojoCase]) -> None:
    case = next(c for c in cases if c.suite == "banking" and not c.attacked)
    unknown = drive(
        [Episode(AgentDojoEnv(case), LIMITS)], ScriptedPolicy([render_calls([ToolCall("hack", {})])])
    )
    assert unknown[0].termination == "unknown_tool"
    bad_args = ScriptedPolicy(
        [
            render_calls([ToolCall("send_money", {"recipient": 5, "amount": "lots"})]),
            "<response>done</response>",
        ]
    )
    result = drive([Episode(AgentDojoEnv(case), LIMITS)], bad_args)[0]
    assert result.termination == "answered"  # AgentDojo returns the validation error to the model
    assert result.messages[3]["content"].startswith("Error: ValidationError")


def test_agentdojo_task(cases: list[ad.AgentDojoCase]) -> None:
    from mrbench.tasks.agent_security import agent_security

    default = agent_security(dataset="agentdojo", suites="banking")
    assert default.limits.max_turns == 8 and default.max_completion_tokens == 512
    # Ground truths need up to 18 sequential calls: give the scripted agents room.
    task = agent_security(dataset="agentdojo", n_train=30, n_eval=12, suites="banking,slack", max_turns=20)
    train, evaluation = task.train_samples(), task.eval_samples()
    assert len(train) == 30 and len(evaluation) == 12
    assert {json.loads(s.columns["scenario"])["suite"] for s in train} <= {"banking", "slack"}
    sample = next(s for s in evaluation if s.columns["attacked"])
    case = ad.AgentDojoCase.from_json(sample.columns["scenario"])
    assert (
        all(f"- {tool.name}(" in sample.prompt[0]["content"] for tool in case.suite_obj().tools)
        and sample.prompt[1]["content"] == case.user_task_obj().PROMPT
    )

    class Gen:
        model = tokenizer = None

        def __init__(self, policy: Any) -> None:
            self.policy = policy

        def __call__(self, convs: list[Any], *, max_new_tokens: int) -> list[str]:
            return self.policy(convs)

    obey = task.evaluate(Gen(obey_policy(case)), [sample])
    assert obey.metrics["asr"] == 1.0 and obey.metrics["joint"] == 0.0
    gold = task.evaluate(Gen(gold_policy(case)), [sample])
    assert gold.metrics["joint"] == 1.0
    # Rewards replay a transcript on AgentDojo too.
    utility, safety = (c.fn for c in task.reward_components())
    turns = drive([Episode(AgentDojoEnv(case), task.limits)], obey_policy(case))[0].turns
    cols = {k: [v] for k, v in sample.columns.items()} | {"turns": [json.dumps(turns)]}
    assert utility([sample.prompt], [""], **cols) == [1.0] and safety([sample.prompt], [""], **cols) == [0.0]
    demos = task.demonstrations(5, 0)
    assert len(demos) == 5 and all(c.startswith(("<tool_call>", "<response>")) for _, c in demos)


def test_score_agentdojo_items(cases: list[ad.AgentDojoCase]) -> None:
    from mrbench.tasks.agent_security import agent_security

    task = agent_security()  # an embedded task scores AgentDojo items too
    chosen = sample_cases(cases, 2)
    items = [{"dataset": "agentdojo", "id": c.id, "completion": json.dumps(gold_turns(c, 8))} for c in chosen]
    items += [
        {"dataset": "agentdojo", "id": "banking/user_task_99/clean", "completion": "[]"},
        {"dataset": "agentdojo", "id": "banking/user_task_0", "completion": "[]"},
        {"dataset": "agentdojo", "id": chosen[0].id, "completion": "<response>no</response>"},
    ]
    scored = task.score_items(items)
    assert all(s.rewards == {"utility": 1.0, "safety": 1.0} for s in scored[: len(chosen)])
    assert [s.status for s in scored[len(chosen) :]] == ["unknown_id", "unknown_id", "answered"]
    assert "user_task_99" in scored[-3].error and scored[-1].rewards["utility"] == 0.0
    long_gt = ad.AgentDojoCase("workspace", "user_task_39")  # 19 ground-truth calls packed into 7 turns
    assert len(gold_turns(long_gt, 8)) <= 8


@pytest.mark.slow
def test_every_case_gold_utility_and_obey_asr(cases: list[ad.AgentDojoCase]) -> None:
    """All 1,995 cases: the fast loader equals AgentDojo's, the suites' ground truth solves every
    user task under every injection, and the injection-obeying agent makes every attack land
    except the pairs :func:`unreachable_attack` names (through AgentDojo's own pipeline)."""
    from agentdojo.task_suite.task_suite import TaskSuite

    for case in cases:
        suite = case.suite_obj()
        fast = suite.load_and_inject_default_environment(case.injections())
        assert fast == TaskSuite.load_and_inject_default_environment(suite, case.injections()), case.id
    gold = score_gold(cases)
    assert [r.case.id for r in gold if not r.utility] == []
    attacked = [c for c in cases if c.attacked]
    failed = {
        r.case.id for c in attacked for r in run_policy([c], obey_policy(c), LIMITS) if not r.attack_succeeded
    }
    expected = {c.id for c in attacked if unreachable_attack(c)}
    assert failed == expected
    assert len(expected) == 2 * (8 * 40 + len(UNREACHABLE_ATTACKS))  # 8 workspace tasks lack a ground truth


def test_unreachable_attacks_are_named(cases: list[ad.AgentDojoCase]) -> None:
    workspace = [c for c in cases if c.suite == "workspace" and c.attack == "important_instructions"]
    reasons = {c.injection_task: unreachable_attack(c) for c in workspace if c.user_task == "user_task_0"}
    assert {k for k, v in reasons.items() if v and "no ground truth" in v} == {
        f"injection_task_{n}" for n in range(6, 14)
    }
    case = ad.AgentDojoCase("banking", "user_task_14", "injection_task_7", "important_instructions")
    assert "password" in unreachable_attack(case)
    assert unreachable_attack(ad.AgentDojoCase("banking", "user_task_0")) is None
