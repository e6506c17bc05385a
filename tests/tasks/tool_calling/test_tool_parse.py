"""Parsing tool-calling answers: structure detection and call extraction edge cases."""

from __future__ import annotations

import pytest

from mrbench.tasks.tool_calling.parse import extract_calls, parse_answer

CALL = '{"name":"get_weather","parameters":{"city":"Paris"}}'


@pytest.mark.parametrize(
    ("text", "structure"),
    [
        (f"<think></think>\n<tool_call>\n{CALL}\n</tool_call>", "tool_call"),
        (f"  <think>plan</think><tool_call>{CALL}</tool_call>\n", "tool_call"),  # whitespace is free
        (f"<think>a\nb</think>\n\n<tool_call>\n{CALL}\n{CALL}\n</tool_call>", "tool_call"),
        ("<think></think>\n<response>Hi there</response>", "response"),
        ("<think></think><response></response>", "response"),  # empty response is still a response
        (f"<tool_call>\n{CALL}\n</tool_call>", "malformed"),  # no think block
        (f"<think></think>\n<tool_call>\n{CALL}\n</tool_call> trailing", "malformed"),
        (f"preamble <think></think>\n<tool_call>\n{CALL}\n</tool_call>", "malformed"),
        (f"<think></think>\n<tool_call>\n{CALL}\n</tool_call>\n<response>x</response>", "malformed"),
        (f"<think></think>\n<tool_call>\n{CALL}\n</tool_call><tool_call>\n{CALL}\n</tool_call>", "malformed"),
        ("<think></think>\n<tool_call>\n\n</tool_call>", "malformed"),  # empty call block
        ("<think></think>\n<tool_call>\nget_weather(city='Paris')\n</tool_call>", "malformed"),
        (f"<think></think>\n<tool_call>\n{CALL}", "malformed"),  # truncated by the token budget
        ("<think><think></think><response>x</response>", "malformed"),
        ("<think></think>\n<response>a <tool_call> b</response>", "malformed"),
        ("", "malformed"),
    ],
)
def test_structure(text: str, structure: str) -> None:
    assert parse_answer(text).structure == structure


def test_calls_are_read_even_when_the_format_is_off() -> None:
    # Credit for the call itself does not depend on the think block (reference behaviour).
    parsed = parse_answer(f"Sure! <tool_call>\n{CALL}\n</tool_call> done")
    assert parsed.structure == "malformed"
    assert parsed.calls == [{"name": "get_weather", "parameters": {"city": "Paris"}}]


def test_no_block_means_no_calls_and_bad_block_means_unparsable() -> None:
    assert extract_calls("<think></think>\n<response>ok</response>") == []
    assert extract_calls("<tool_call>\n{not json}\n</tool_call>") is None
    assert extract_calls('<tool_call>\n{"name": 1, "parameters": {}}\n</tool_call>') is None
    assert extract_calls('<tool_call>\n{"name": "f", "parameters": [1]}\n</tool_call>') is None
    assert extract_calls('<tool_call>\n["f", {}]\n</tool_call>') is None
    assert extract_calls('<tool_call>\n{"name": "f"}\n</tool_call>') is None  # "parameters" is required


def test_only_the_first_call_block_counts() -> None:
    text = f'<tool_call>\n{CALL}\n</tool_call>\n<tool_call>\n{{"name":"x","parameters":{{}}}}\n</tool_call>'
    assert extract_calls(text) == [{"name": "get_weather", "parameters": {"city": "Paris"}}]


def test_extra_call_keys_are_dropped_and_blank_lines_ignored() -> None:
    text = '<tool_call>\n\n{"name": "f", "parameters": {"x": 1}, "id": 7}\n   \n</tool_call>'
    assert extract_calls(text) == [{"name": "f", "parameters": {"x": 1}}]


@pytest.mark.parametrize(
    "garbage",
    [
        None,
        3.5,
        float("nan"),
        ["not", "text"],
        "<tool_call>" * 50,
        "<tool_call>\n" + "[" * 5000 + "\n</tool_call>",
    ],
)
def test_garbage_never_raises(garbage: object) -> None:
    parsed = parse_answer(garbage)
    assert parsed.structure == "malformed"
    assert parsed.calls in ([], None)


def test_think_and_response_text_are_exposed() -> None:
    parsed = parse_answer("<think>no tool needed</think>\n<response>Hello!</response>")
    assert (parsed.think, parsed.response, parsed.calls) == ("no tool needed", "Hello!", [])
