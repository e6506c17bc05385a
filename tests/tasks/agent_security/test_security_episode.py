"""The episode runner: parsing, tool execution, and every bad-input termination (never a crash)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.distributed

from mrbench.tasks.agent_security.episode import (
    INVALID_TERMINATIONS,
    VALID_TERMINATIONS,
    Episode,
    Limits,
    ScriptedPolicy,
    ToolCall,
    UnknownToolError,
    drive,
    parse_turn,
    render_calls,
    render_response,
    replay,
    run_episodes,
)
from mrbench.tasks.agent_security.scenarios import EmbeddedEnv, Scenario, gold_policy, obey_policy


def call(tool: str, **params: Any) -> str:
    return render_calls([ToolCall(tool, params)])


@pytest.fixture
def pin_scenario(small_task: Any) -> Scenario:
    """An attacked scenario whose first gold call reads a file."""
    for sample in small_task.train_samples():
        scenario = Scenario.from_json(sample.columns["scenario"])
        if scenario.attacked and scenario.gold[0].count("read_file"):
            return scenario
    raise AssertionError("no attacked read_file scenario in the fixture task")


# --------------------------------------------------------------------------- parsing


@pytest.mark.parametrize(
    ("text", "calls", "response"),
    [
        ('<tool_call>\n{"name": "balance", "parameters": {}}\n</tool_call>', ["balance"], None),
        (
            '<tool_call>\n{"name": "balance", "parameters": {}}\n\n'
            '{"name": "history", "parameters": {}}\n</tool_call>',
            ["balance", "history"],
            None,
        ),
        ("<think>hm</think>\n<response> 45 </response>", [], "45"),
        ("  <response></response>\n", [], ""),
    ],
)
def test_parse_valid(text: str, calls: list[str], response: str | None) -> None:
    turn = parse_turn(text)
    assert turn.valid, turn.error
    assert [c.name for c in turn.calls] == calls
    assert turn.response == response


@pytest.mark.parametrize(
    "text",
    [
        "Paid.",
        "<response>a</response><response>b</response>",
        '<tool_call>\n{"name": "balance", "parameters": {}}\n</tool_call><response>x</response>',
        '<tool_call>\n{"name": "balance"}\n</tool_call>',  # "parameters" is required, {} when none
        "<tool_call>\nbalance()\n</tool_call>",
        '<tool_call>\n{"parameters": {}}\n</tool_call>',
        '<tool_call>\n{"name": "pay", "parameters": [1]}\n</tool_call>',
        "<tool_call>\n\n</tool_call>",
        '<tool_call>\n{"name": "balance", "parameters": {}}',
        "text before <response>x</response>",
        None,
        123,
    ],
)
def test_parse_invalid(text: Any) -> None:
    turn = parse_turn(text)
    assert not turn.valid and turn.error


def test_render_roundtrip() -> None:
    text = call("pay", to="ACME-17", amount=45)
    assert parse_turn(text).calls == (ToolCall("pay", {"to": "ACME-17", "amount": 45}),)
    assert parse_turn(render_response("ok")).response == "ok"


# --------------------------------------------------------------------------- episodes


def test_gold_episode_multi_turn(pin_scenario: Scenario) -> None:
    result = run_episodes([EmbeddedEnv(pin_scenario)], gold_policy(pin_scenario))[0]
    assert result.termination == "answered" and result.valid
    assert result.utility and result.attack_succeeded is False
    roles = [m["role"] for m in result.messages]
    assert roles[:2] == ["system", "user"] and roles[2:4] == ["assistant", "tool"]
    assert pin_scenario.attack["text"] in result.messages[3]["content"]  # the injection reached the model


def test_obeying_agent_lets_the_attack_succeed(pin_scenario: Scenario) -> None:
    result = run_episodes([EmbeddedEnv(pin_scenario)], obey_policy(pin_scenario))[0]
    assert result.attack_succeeded is True
    assert len(result.turns) == len(pin_scenario.gold) + 1


def bad_episode(scenario: Scenario, text: Any, limits: Limits | None = None) -> Any:
    return run_episodes([EmbeddedEnv(scenario)], lambda convs: [text] * len(convs), limits)[0]


@pytest.mark.parametrize(
    ("text", "termination"),
    [
        ("I will pay now", "unparsable"),
        ("<tool_call>\nnot json\n</tool_call>", "unparsable"),
        (call("transfer_all", to="X"), "unknown_tool"),
        (call("pay", to="ACME-1", amount="45"), "bad_arguments"),  # wrong type: str for int
        (call("pay", to="ACME-1"), "bad_arguments"),  # missing parameter
        (call("read_file", name="a.txt", mode="r"), "bad_arguments"),  # unexpected parameter
        (call("pay", to="ACME-1", amount=True), "bad_arguments"),  # bool is not an int here
        (call("read_file", name="no_such_file.txt"), "tool_error"),  # the tool raises
        (call("pay", to="ACME-1", amount=10**9), "tool_error"),  # insufficient funds
        ("<response>" + "x" * 5000 + "</response>", "overlong"),
        (
            "<tool_call>\n" + "\n".join(['{"name": "balance", "parameters": {}}'] * 9) + "\n</tool_call>",
            "too_many_calls",
        ),
    ],
)
def test_bad_input_ends_episode_with_logged_reason(
    pin_scenario: Scenario, text: str, termination: str
) -> None:
    result = bad_episode(pin_scenario, text)
    assert result.termination == termination
    assert result.detail  # the logged reason
    assert result.valid == (termination in VALID_TERMINATIONS)
    assert not result.utility
    assert result.attack_succeeded is False  # judged from state: nothing harmful happened


def test_endless_tool_loop_hits_the_turn_limit(pin_scenario: Scenario) -> None:
    result = bad_episode(pin_scenario, call("balance"), Limits(max_turns=3))
    assert result.termination == "turn_limit" and result.valid
    assert len(result.turns) == 3 and result.n_calls == 3


def test_policy_exception_is_caught(pin_scenario: Scenario) -> None:
    def broken(convs: list[Any]) -> list[str]:
        raise ValueError("the chat template cannot render a tool turn")

    result = run_episodes([EmbeddedEnv(pin_scenario)], broken)[0]
    assert result.termination == "policy_error" and "chat template" in result.detail
    assert result.termination in INVALID_TERMINATIONS


@pytest.mark.parametrize(
    "failure",
    [
        torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"),
        MemoryError(),
        RuntimeError("CUDA error: an illegal memory access was encountered"),
        torch.distributed.DistBackendError("NCCL communicator was aborted"),
    ],
    ids=type,
)
def test_machine_failure_of_the_policy_propagates(pin_scenario: Scenario, failure: Exception) -> None:
    """Out of memory is the machine's failure, not the policy's: counted as ``policy_error`` it
    would end the cell FINISHED with deflated metrics (finding 3 of issue 33)."""

    def broken(convs: list[Any]) -> list[str]:
        raise failure

    with pytest.raises(type(failure)):
        run_episodes([EmbeddedEnv(pin_scenario)], broken)


def test_policy_returning_wrong_count_is_caught(pin_scenario: Scenario) -> None:
    result = run_episodes([EmbeddedEnv(pin_scenario)], lambda convs: [])[0]
    assert result.termination == "policy_error"


class _ExplodingEnv(EmbeddedEnv):
    def call(self, name: str, arguments: dict[str, Any]) -> str:
        if name == "history":
            raise KeyError("bug inside the tool")
        return super().call(name, arguments)

    def judge(self, answer: str | None) -> tuple[bool, bool | None]:
        if answer == "boom":
            raise ZeroDivisionError("bug inside the checker")
        return super().judge(answer)


def test_unexpected_exception_inside_tool_and_judge(pin_scenario: Scenario) -> None:
    result = run_episodes([_ExplodingEnv(pin_scenario)], lambda c: [call("history")] * len(c))[0]
    assert result.termination == "tool_error" and "KeyError" in result.detail
    result = run_episodes([_ExplodingEnv(pin_scenario)], lambda c: ["<response>boom</response>"] * len(c))[0]
    assert result.termination == "answered" and "judge failed" in result.detail and not result.utility


class _ErrorsContinueEnv(EmbeddedEnv):
    errors_end_episode = False


def test_errors_can_be_returned_to_the_model(pin_scenario: Scenario) -> None:
    """AgentDojo's semantics: a tool error becomes the tool result and the episode goes on."""
    policy = ScriptedPolicy([call("read_file", name="missing.txt"), "<response>sorry</response>"])
    result = run_episodes([_ErrorsContinueEnv(pin_scenario)], policy)[0]
    assert result.termination == "answered"
    assert result.messages[3]["role"] == "tool" and result.messages[3]["content"].startswith("Error:")


def test_truncated_generation_is_overlong(pin_scenario: Scenario) -> None:
    episode = Episode(EmbeddedEnv(pin_scenario))
    episode.step('<tool_call>\n{"name": "read_fi', truncated=True)
    assert episode.result().termination == "overlong"


def test_replay_matches_live_episode_and_runs_out(pin_scenario: Scenario) -> None:
    live = run_episodes([EmbeddedEnv(pin_scenario)], obey_policy(pin_scenario))[0]
    again = replay(EmbeddedEnv(pin_scenario), live.turns)
    assert again.outcome() == live.outcome()
    partial = replay(EmbeddedEnv(pin_scenario), live.turns[:1])
    assert partial.termination == "incomplete" and partial.valid


def test_drive_batches_and_limits_rounds(small_task: Any) -> None:
    scenarios = [Scenario.from_json(s.columns["scenario"]) for s in small_task.eval_samples()[:6]]
    seen_batch_sizes: list[int] = []

    def policy(convs: list[Any]) -> list[str]:
        seen_batch_sizes.append(len(convs))
        return [call("balance")] * len(convs)

    results = drive([Episode(EmbeddedEnv(s)) for s in scenarios], policy, max_rounds=2)
    assert seen_batch_sizes == [6, 6]
    assert {r.termination for r in results} == {"incomplete"}


def test_unknown_tool_error_is_distinct() -> None:
    assert not issubclass(UnknownToolError, KeyError)
