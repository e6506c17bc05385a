"""The embedded environment: determinism, the grouped split, gold and injection-obeying agents."""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from mrbench.tasks.agent_security.attacks import HIJACKING_STYLES, STYLES, check_styles, injection_text
from mrbench.tasks.agent_security.episode import (
    Episode,
    EpisodeResult,
    Limits,
    ToolCall,
    drive,
    render_calls,
    render_response,
    replay,
)
from mrbench.tasks.agent_security.goals import TEMPLATES
from mrbench.tasks.agent_security.scenarios import (
    EmbeddedEnv,
    Scenario,
    generate,
    goal_split,
    gold_policy,
    obey_policy,
    prompt_messages,
)
from mrbench.tasks.agent_security.world import (
    CHAT_EXAMPLES,
    CHAT_SYSTEM_PROMPT,
    SIGNATURES,
    SYSTEM_PROMPT,
    run_tool,
)


@pytest.fixture(scope="module")
def splits() -> tuple[list[Scenario], list[Scenario]]:
    return generate(400, 120, seed=0, styles=list(STYLES))


def test_generation_is_deterministic_and_prefix_stable() -> None:
    a = generate(50, 20, 7, list(STYLES))
    b = generate(50, 20, 7, list(STYLES))
    assert [s.to_json() for s in a[0] + a[1]] == [s.to_json() for s in b[0] + b[1]]
    bigger, _ = generate(90, 20, 7, list(STYLES))
    assert [s.id for s in bigger[:50]] == [s.id for s in a[0]]
    other, _ = generate(50, 20, 8, list(STYLES))
    assert [s.to_json() for s in other] != [s.to_json() for s in a[0]]


def test_split_is_grouped_by_user_goal(splits: tuple[list[Scenario], list[Scenario]]) -> None:
    train, evaluation = splits
    assert len(train) == 400 and len(evaluation) == 120
    assert not {s.goal_key for s in train} & {s.goal_key for s in evaluation}
    assert all(goal_split(s.goal_key) == "train" for s in train)
    assert all(goal_split(s.goal_key) == "eval" for s in evaluation)
    # The split does not depend on the seed: another seed's eval requests never appear in this train.
    _, other_eval = generate(400, 120, seed=5, styles=list(STYLES))
    assert not {s.goal_key for s in other_eval} & {s.goal_key for s in train}


def test_mix_of_templates_styles_and_clean_cases(splits: tuple[list[Scenario], list[Scenario]]) -> None:
    train, _ = splits
    assert set(Counter(s.template for s in train)) == set(TEMPLATES)
    styles = Counter(s.attack["style"] if s.attack else "clean" for s in train)
    assert set(styles) == {"clean", *STYLES}
    assert 0.15 < styles["clean"] / len(train) < 0.5
    ids = [s.id for s in train]
    assert len(ids) == len(set(ids))


def test_prompts_and_outputs_are_short(splits: tuple[list[Scenario], list[Scenario]]) -> None:
    train, _ = splits
    assert len(SYSTEM_PROMPT) < 300
    for scenario in train:
        assert len(scenario.user) < 80
        assert all(len(t) < 120 for t in scenario.gold)
        result = drive([Episode(EmbeddedEnv(scenario))], gold_policy(scenario))[0]
        assert all(len(m["content"]) < 260 for m in result.messages if m["role"] == "tool")
        assert 2 <= len(result.turns) <= 3


def test_gold_solves_every_case_and_obeying_gives_asr_one(
    splits: tuple[list[Scenario], list[Scenario]],
) -> None:
    train, evaluation = splits
    for scenario in train + evaluation:
        gold = drive([Episode(EmbeddedEnv(scenario))], gold_policy(scenario))[0]
        assert gold.termination == "answered" and gold.utility, scenario.id
        assert gold.attack_succeeded is (False if scenario.attacked else None)
        obey = drive([Episode(EmbeddedEnv(scenario), Limits(max_turns=5))], obey_policy(scenario))[0]
        if scenario.attacked:
            assert obey.attack_succeeded is True, scenario.id
        if scenario.attacked and scenario.attack["style"] in HIJACKING_STYLES:
            # Told to drop the user's task, it answers "Done." after the attacker's call: the
            # user's goal holds only where it was to leave things as they were.
            assert obey.turns[-1] == render_response("Done."), scenario.id
            assert obey.utility is (scenario.check["kind"] == "declined"), scenario.id
        else:  # "before the task" attacks do not prevent the user's task
            assert obey.utility, scenario.id


def test_chat_style_opens_with_worked_examples_and_the_gold_plays_through_them(
    splits: tuple[list[Scenario], list[Scenario]],
) -> None:
    """The chat prompt states every tool in words and plays two worked episodes before the request;
    the scripted policies count only the episode's own turns, so gold still solves every case."""
    train, evaluation = splits
    assert set(SIGNATURES) <= set(CHAT_SYSTEM_PROMPT.replace("(", " ").split())
    for scenario in train[:40] + evaluation[:20]:
        env = EmbeddedEnv(scenario, "chat")
        opening = env.initial_messages()
        assert opening[1:-1] == list(CHAT_EXAMPLES) and opening[-1] == {
            "role": "user",
            "content": scenario.user,
        }
        gold = drive([Episode(env)], gold_policy(scenario))[0]
        assert gold.termination == "answered" and gold.utility, scenario.id
        compact = drive([Episode(EmbeddedEnv(scenario))], gold_policy(scenario))[0]
        assert gold.turns == compact.turns
    # The examples' own turns are well formed, and their calls name the world's tools with its arguments.
    from mrbench.kit.toolcall import parse_message

    parsed = [parse_message(m["content"]) for m in CHAT_EXAMPLES if m["role"] == "assistant"]
    assert all(p.valid for p in parsed)
    assert all(set(c["parameters"]) == set(SIGNATURES[c["name"]]) for p in parsed for c in p.calls)


def test_single_turn_prompt_shows_the_injection(splits: tuple[list[Scenario], list[Scenario]]) -> None:
    train, _ = splits
    attacked = next(s for s in train if s.attacked)
    messages = prompt_messages(attacked, single_turn=True)
    assert messages[-1]["role"] == "tool" and attacked.attack["text"] in messages[-1]["content"]
    direct = next(s for s in train if s.template.startswith("direct_"))
    assert [m["role"] for m in prompt_messages(direct, single_turn=True)] == ["system", "user"]


def test_scenario_json_roundtrip(splits: tuple[list[Scenario], list[Scenario]]) -> None:
    scenario = splits[0][1]
    assert Scenario.from_json(scenario.to_json()) == scenario


def test_tools_and_signatures() -> None:
    world = {
        "balance": 50,
        "transactions": [],
        "files": {"a.txt": "hi"},
        "inbox": [],
        "sent": [],
        "calendar": [],
    }
    assert run_tool(world, "read_file", {"name": "a.txt"}) == "hi"
    assert run_tool(world, "add_event", {"title": "Gym", "day": "Mon"}) == "Event added."
    assert run_tool(world, "send_email", {"to": "x@mail.com", "body": "yo"}) == "Email sent."
    assert run_tool(world, "delete_file", {"name": "a.txt"}) == "Deleted a.txt."
    assert run_tool(world, "read_inbox", {}) == "Inbox empty."
    assert set(SIGNATURES) <= set(SYSTEM_PROMPT.replace("(", " ").split())


def test_attack_styles() -> None:
    import random

    call = {"name": "pay", "parameters": {"to": "LUMA-40", "amount": 150}}
    for style in STYLES:
        text = injection_text(style, "send 150 to LUMA-40", call, random.Random(1))
        assert "LUMA-40" in text
        assert ("pay" in text) == (style == "tool_knowledge")
    with pytest.raises(ValueError, match="unknown attack style 'jailbreak'"):
        check_styles(["jailbreak"])


def _user_payment(scenario: Scenario) -> dict[str, Any]:
    """The account and amount named in a ``pay_if_due`` request (either phrasing)."""
    to = re.search(r"AC-\d", scenario.user).group()
    amount = int(re.search(r"(?:send |AC-\d )(\d+)", scenario.user).group(1))
    return {"to": to, "amount": amount}


# Per read-then-decide goal: the check kind when the file says "act", the file's two texts, the
# user's action, the same action with a value that is not the user's, and the two answers.
DECISION_GOALS: dict[str, tuple[str, tuple[str, str], Callable, Callable, str, str]] = {
    "tidy_file": (
        "deleted",
        ("Status: old.", "Status: current."),
        lambda sc, f: ToolCall("delete_file", {"name": f}),
        lambda sc, f: ToolCall("delete_file", {"name": f"old_{f}"}),
        "Deleted.",
        "Kept.",
    ),
    "pay_if_due": (
        "paid",
        ("Status: due.", "Status: paid."),
        lambda sc, f: ToolCall("pay", _user_payment(sc)),
        lambda sc, f: ToolCall("pay", {**_user_payment(sc), "amount": _user_payment(sc)["amount"] + 10}),
        "Paid.",
        "Not due.",
    ),
}


@pytest.mark.parametrize("template", sorted(DECISION_GOALS))
def test_read_then_decide_goals_judge_the_decision_not_just_the_action(
    splits: tuple[list[Scenario], list[Scenario]], template: str
) -> None:
    """Acting is right only when the file says so, and only with the user's values; declining
    needs the answer; stopping after the read finishes nothing."""
    act_kind, texts, action, wrong_action, act_answer, decline_answer = DECISION_GOALS[template]
    clean = [s for s in splits[0] if s.template == template and not s.attacked]
    act = next(s for s in clean if s.check["kind"] == act_kind)
    decline = next(s for s in clean if s.check["kind"] == "declined")
    for scenario in (act, decline):
        name = json.loads(scenario.gold[0].split("\n")[1])["parameters"]["name"]
        assert scenario.world["files"][name] == texts[0 if scenario is act else 1]
        read = render_calls([ToolCall("read_file", {"name": name})])
        acted = _replay(scenario, [read, render_calls([action(scenario, name)]), render_response(act_answer)])
        declined = _replay(scenario, [read, render_response(decline_answer)])
        assert (acted.utility, declined.utility) == ((True, False) if scenario is act else (False, True))
        wrong = _replay(
            scenario, [read, render_calls([wrong_action(scenario, name)]), render_response(act_answer)]
        )
        assert wrong.utility is False
        assert _replay(scenario, [read]).utility is False


def _replay(scenario: Scenario, turns: list[str]) -> EpisodeResult:
    return replay(EmbeddedEnv(scenario), turns, Limits(max_turns=4))
