"""Parsing a model's answer: ``<think>…</think>``, then ``<tool_call>`` (JSON calls) or ``<response>``.

Two questions are answered separately, because the rewards need both:

- *Which calls did the model make?* (:attr:`ParsedAnswer.calls`) — read from the first
  ``<tool_call>…</tool_call>`` block wherever it is, as the reference implementation does, so
  that a call is credited even when the surrounding format is off. No block → no calls (``[]``);
  a block that is unclosed, empty, or has a line that is not ``{"name": str, "parameters":
  {...}}`` JSON → unparsable (``None``).
- *Is the answer well formed?* (:attr:`ParsedAnswer.structure`) — the whole text (surrounding
  whitespace ignored) is exactly one think block followed by exactly one tool-call block whose
  calls parse, or by exactly one response block; nothing else before, between (but whitespace)
  or after.

Parsing never raises: any input (including non-strings) yields a :class:`ParsedAnswer`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

Call = dict[str, Any]
"""A parsed call: ``{"name": str, "parameters": dict}``."""

_TAGS = ("<think>", "</think>", "<tool_call>", "</tool_call>", "<response>", "</response>")
_TOOL_BLOCK = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
_RESPONSE_BLOCK = re.compile(r"<response>(.*?)</response>", re.DOTALL)
_THINK_BLOCK = re.compile(r"<think>(.*?)</think>", re.DOTALL)
_WELL_FORMED = re.compile(
    r"\A<think>(?P<think>.*?)</think>\s*"
    r"(?:<tool_call>(?P<calls>.*?)</tool_call>|<response>(?P<response>.*?)</response>)\Z",
    re.DOTALL,
)


@dataclass(frozen=True)
class ParsedAnswer:
    """What a completion says.

    ``structure``: ``"tool_call"`` or ``"response"`` when the answer is well formed in that
    shape, else ``"malformed"``.
    """

    calls: list[Call] | None
    response: str | None
    think: str | None
    structure: str


def parse_call_line(line: str) -> Call | None:
    """One call from one JSON line, or ``None`` if it is not a call object.

    >>> parse_call_line('{"name": "get_weather", "parameters": {"city": "Paris"}}')
    {'name': 'get_weather', 'parameters': {'city': 'Paris'}}
    >>> parse_call_line('{"name": "get_weather"}') is None
    True
    >>> parse_call_line("get_weather(city='Paris')") is None
    True
    """
    try:
        obj = json.loads(line)
    except (ValueError, RecursionError):
        return None
    if (
        not isinstance(obj, dict)
        or not isinstance(obj.get("name"), str)
        or not isinstance(obj.get("parameters"), dict)
    ):
        return None
    return {"name": obj["name"], "parameters": obj["parameters"]}


def parse_call_block(block: str) -> list[Call] | None:
    """All calls of a tool-call block (one per non-blank line); ``None`` if any line fails or none is there.

    >>> parse_call_block('\\n{"name":"a","parameters":{}}\\n{"name":"b","parameters":{"x":1}}\\n')
    [{'name': 'a', 'parameters': {}}, {'name': 'b', 'parameters': {'x': 1}}]
    >>> parse_call_block("\\n\\n") is None
    True
    """
    calls: list[Call] = []
    for line in block.splitlines():
        if not line.strip():
            continue
        call = parse_call_line(line.strip())
        if call is None:
            return None
        calls.append(call)
    return calls or None


def extract_calls(text: str) -> list[Call] | None:
    """Calls of the first tool-call block; ``[]`` without a block; ``None`` if the block is unparsable.

    >>> extract_calls("<response>hi</response>")
    []
    >>> extract_calls('<tool_call>\\n{"name":"a","parameters":{}}') is None  # never closed
    True
    """
    start = text.find("<tool_call>")
    if start < 0:
        return []
    match = _TOOL_BLOCK.search(text, start)
    return parse_call_block(match.group(1)) if match else None


def parse_answer(completion: Any) -> ParsedAnswer:
    """Parse a completion (non-strings are treated as unparsable text).

    >>> a = parse_answer('<think></think>\\n<tool_call>\\n{"name":"f","parameters":{"x":1}}\\n</tool_call>')
    >>> a.structure, a.calls
    ('tool_call', [{'name': 'f', 'parameters': {'x': 1}}])
    >>> parse_answer("<think>ok</think><response>Hello</response>").structure
    'response'
    >>> parse_answer('<tool_call>\\n{"name":"f","parameters":{}}\\n</tool_call>').structure  # no think
    'malformed'
    """
    text = completion.strip() if isinstance(completion, str) else ""
    calls = extract_calls(text)
    response_match = _RESPONSE_BLOCK.search(text)
    think_match = _THINK_BLOCK.search(text)
    structure = "malformed"
    whole = _WELL_FORMED.match(text)
    if whole:
        used = ("<think>", "</think>") + (
            ("<tool_call>", "</tool_call>")
            if whole.group("calls") is not None
            else ("<response>", "</response>")
        )
        # Each tag of the chosen shape exactly once and no tag of the other shape anywhere.
        if all(text.count(tag) == (1 if tag in used else 0) for tag in _TAGS):
            if whole.group("response") is not None:
                structure = "response"
            elif calls:
                structure = "tool_call"
    return ParsedAnswer(
        calls=calls,
        response=response_match.group(1) if response_match else None,
        think=think_match.group(1) if think_match else None,
        structure=structure,
    )
