"""The one parser of the tool-call format: strict messages, lenient call extraction, call lines."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mrbench.kit import toolcall
from mrbench.kit.toolcall import (
    CallFormatError,
    call_block,
    extract_calls,
    first_block,
    parse_call_block,
    parse_call_line,
    parse_message,
    response_block,
)

CALL = '{"name": "get_weather", "parameters": {"city": "Paris"}}'
PARSED = {"name": "get_weather", "parameters": {"city": "Paris"}}


# --------------------------------------------------------------------------- call lines and blocks


def test_a_call_line_keeps_name_and_parameters_only() -> None:
    assert parse_call_line(CALL) == PARSED
    assert parse_call_line('  {"name": "f", "parameters": {}, "id": 7}  ') == {"name": "f", "parameters": {}}


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("get_weather(city='Paris')", "call line is not JSON: \"get_weather(city='Paris')\""),
        ("{not json}", "call line is not JSON"),
        ('["f", {}]', "call line has no string 'name'"),
        ('{"name": 1, "parameters": {}}', "call line has no string 'name'"),
        ('{"parameters": {}}', "call line has no string 'name'"),
        ('{"name": "balance"}', "call 'balance' has no 'parameters' object"),
        ('{"name": "pay", "parameters": [1]}', "'parameters' of 'pay' is not an object"),
        ('{"name": "pay", "parameters": null}', "'parameters' of 'pay' is not an object"),
        ("[" * 5000, "call line is not JSON"),  # too deep for json: no RecursionError escapes
    ],
)
def test_a_bad_call_line_says_why(line: str, message: str) -> None:
    with pytest.raises(CallFormatError) as info:
        parse_call_line(line)
    assert str(info.value).startswith(message)


def test_a_block_has_one_call_per_non_blank_line_and_at_least_one() -> None:
    block = f"\n\n{CALL}\n   \n" + '{"name": "b", "parameters": {"x": 1}}\n'
    assert parse_call_block(block) == [PARSED, {"name": "b", "parameters": {"x": 1}}]
    for empty in ("", "\n\n", "  \n "):
        with pytest.raises(CallFormatError, match=r"empty <tool_call> block"):
            parse_call_block(empty)
    with pytest.raises(CallFormatError, match="not JSON"):
        parse_call_block(f"{CALL}\noops")  # one bad line spoils the block


# --------------------------------------------------------------------------- whole messages


@pytest.mark.parametrize(
    ("text", "shape", "think"),
    [
        (f"<tool_call>\n{CALL}\n</tool_call>", "tool_call", None),
        (f"<tool_call>{CALL}</tool_call>", "tool_call", None),
        (f"  <think>plan</think>\n\n<tool_call>\n{CALL}\n</tool_call>\n", "tool_call", "plan"),
        (f"<think>a\nb</think><tool_call>\n{CALL}\n{CALL}\n</tool_call>", "tool_call", "a\nb"),
        ("<response>45</response>", "response", None),
        ("<think></think> <response></response>", "response", ""),
    ],
)
def test_well_formed_messages(text: str, shape: str, think: str | None) -> None:
    message = parse_message(text)
    assert message.valid and message.error is None, message.error
    assert message.shape == shape and message.think == think
    assert (message.response is not None) == (shape == "response")
    assert all(call == PARSED for call in message.calls) and bool(message.calls) == (shape == "tool_call")
    assert parse_message(text, require_think=True).valid == (think is not None)


def test_response_text_is_kept_as_written() -> None:
    assert parse_message("<response> 45 \n</response>").response == " 45 \n"


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("Paid.", "not a single <tool_call> or <response> block"),
        ("", "not a single <tool_call> or <response> block"),
        ("text before <response>x</response>", "not a single"),
        ("<response>x</response> text after", "not a single"),
        (f"<tool_call>\n{CALL}", "not a single"),  # cut off by the token budget
        ("<response>a</response><response>b</response>", "more than one block"),
        (f"<tool_call>\n{CALL}\n</tool_call><response>x</response>", "not a single"),
        (f"<tool_call>\n{CALL}\n</tool_call><tool_call>\n{CALL}\n</tool_call>", "more than one block"),
        ("<think><think></think><response>x</response>", "more than one block"),
        ("<response>a <tool_call> b</response>", "more than one block"),
        ("<think>x</think><think>y</think><response>z</response>", "more than one block"),
        ("<tool_call>\n\n</tool_call>", "empty <tool_call> block"),
        ("<tool_call>\nbalance()\n</tool_call>", "call line is not JSON"),
        ('<tool_call>\n{"name": "balance"}\n</tool_call>', "call 'balance' has no 'parameters' object"),
        ('<tool_call>\n{"name": "pay", "parameters": [1]}\n</tool_call>', "'parameters' of 'pay'"),
        (None, "not text: NoneType"),
        (123, "not text: int"),
        (["not", "text"], "not text: list"),
        ("<tool_call>" * 50, "not a single"),
        ("<tool_call>\n" + "[" * 5000 + "\n</tool_call>", "call line is not JSON"),
    ],
)
def test_malformed_messages_say_why(text: Any, error: str) -> None:
    for require_think in (False, True):
        message = parse_message(text, require_think=require_think)
        assert not message.valid and message.shape is None and message.calls == ()
        assert message.error
    assert parse_message(text).error.startswith(error)


def test_a_required_think_block_must_come_first() -> None:
    error = "not a <think> block, then a single <tool_call> or <response> block"
    assert parse_message(f"<tool_call>\n{CALL}\n</tool_call>", require_think=True).error == error
    assert parse_message("<response>x</response><think></think>", require_think=True).error == error
    assert parse_message("<think></think><response>x</response>", require_think=True).shape == "response"


# --------------------------------------------------------------------------- lenient reading


def test_extract_calls_reads_the_first_block_wherever_it_is() -> None:
    assert extract_calls(f"Sure! <tool_call>\n{CALL}\n</tool_call> done") == [PARSED]
    other = '{"name": "x", "parameters": {}}'
    assert extract_calls(f"<tool_call>{CALL}</tool_call><tool_call>{other}</tool_call>") == [PARSED]
    assert extract_calls("<think></think><response>ok</response>") == []
    assert extract_calls("") == []


@pytest.mark.parametrize(
    ("text", "error"),
    [
        (f"<tool_call>\n{CALL}", "unclosed <tool_call> block"),
        ("<tool_call>\n{not json}\n</tool_call>", "call line is not JSON"),
        ("<tool_call></tool_call>", "empty <tool_call> block"),
    ],
)
def test_extract_calls_refuses_a_bad_first_block(text: str, error: str) -> None:
    with pytest.raises(CallFormatError, match=error):
        extract_calls(text)


def test_first_block_finds_each_kind() -> None:
    text = "<think>t</think> x <response>r</response> <tool_call>c</tool_call>"
    assert [first_block(text, b) for b in ("think", "response", "tool_call")] == ["t", "r", "c"]
    assert first_block("<response>never closed", "response") is None


# --------------------------------------------------------------------------- writing


_TEXT = st.text(st.characters(blacklist_characters="<"), max_size=8)  # no tag can appear inside
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | _TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_TEXT, inner, max_size=3),
    max_leaves=6,
)
_CALLS = st.lists(
    st.fixed_dictionaries({"name": _TEXT, "parameters": st.dictionaries(_TEXT, _JSON, max_size=3)}),
    min_size=1,
    max_size=4,
)


@given(_CALLS, st.booleans())
def test_written_calls_parse_back(calls: list[dict[str, Any]], compact: bool) -> None:
    separators = (",", ":") if compact else (", ", ": ")
    text = call_block([json.dumps(c, separators=separators) for c in calls])
    assert parse_message(text).calls == tuple(calls)
    assert extract_calls(text) == calls


@given(st.text(st.characters(blacklist_characters="<")))
def test_a_written_response_parses_back(answer: str) -> None:
    message = parse_message(response_block(answer))
    assert message.shape == "response" and message.response == answer


# Pieces whose shuffles reach every branch of the pattern: tags, whitespace, text, a call line.
_PIECES = st.sampled_from(["<think>", "</think>", "<tool_call>", "</tool_call>", "<response>", "</response>"])
_TEXT = st.lists(st.one_of(_PIECES, st.sampled_from([" ", "\n", "x", CALL])), max_size=12).map("".join)


@given(_TEXT, st.booleans())
def test_the_linear_shape_check_agrees_with_the_message_pattern(text: str, require_think: bool) -> None:
    """``_shaped`` (used on text with repeated tags, where the pattern would backtrack over every
    closing tag) decides exactly what the anchored pattern decides."""
    assert toolcall._shaped(text, require_think) == bool(toolcall._MESSAGE[require_think].match(text))


@given(_TEXT, st.sampled_from(["think", "tool_call", "response"]))
def test_first_block_is_the_first_complete_block_a_search_finds(text: str, block: str) -> None:
    match = re.search(rf"<{block}>(.*?)</{block}>", text, re.DOTALL)
    assert first_block(text, block) == (match.group(1) if match else None)  # type: ignore[arg-type]
