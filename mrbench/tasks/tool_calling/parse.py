"""Reading a model's answer for the rewards; the format itself is :mod:`mrbench.kit.toolcall`.

This task requires the ``<think>…</think>`` block (ToolRL's format): an answer is
``<think>…</think>`` then ``<tool_call>`` (JSON calls) or ``<response>``. Two questions are
answered separately, because the rewards need both:

- *Which calls did the model make?* (:attr:`ParsedAnswer.calls`) — read from the first
  ``<tool_call>…</tool_call>`` block wherever it is, as the reference implementation does, so
  that a call is credited even when the surrounding format is off. No block → no calls (``[]``);
  a block that is unclosed, empty, or has a line that is not ``{"name": str, "parameters":
  {...}}`` JSON → unparsable (``None``).
- *Is the answer well formed?* (:attr:`ParsedAnswer.structure`) — the whole text (surrounding
  whitespace ignored) is exactly one think block followed by exactly one tool-call block whose
  calls parse, or by exactly one response block; nothing else before, between (but whitespace)
  or after.

Parsing never raises: any input (including non-strings) yields a :class:`ParsedAnswer`, in
time linear in its length. The kit's block patterns are lazy ``<tag>(.*?)</tag>`` searches,
which on a text with many opening tags and no closing one (adversarial "garbage") retry from
every opening tag — quadratic; the cheap checks here settle those cases first, with the same
result the patterns would give.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mrbench.kit import toolcall
from mrbench.kit.toolcall import Call


@dataclass(frozen=True)
class ParsedAnswer:
    """What a completion says.

    ``structure``: ``"tool_call"`` or ``"response"`` when the answer is well formed in that
    shape, else ``"malformed"``. ``response`` / ``think``: the first such block anywhere.
    """

    calls: list[Call] | None
    response: str | None
    think: str | None
    structure: str


def extract_calls(text: str) -> list[Call] | None:
    """Calls of the first tool-call block; ``[]`` without a block; ``None`` if the block is unparsable.

    >>> extract_calls("<response>hi</response>")
    []
    >>> extract_calls('<tool_call>\\n{"name":"a","parameters":{}}') is None  # never closed
    True
    """
    try:
        return toolcall.extract_calls(text)
    except toolcall.CallFormatError:
        return None


def _structure(text: str) -> str:
    """``"tool_call"``, ``"response"`` or ``"malformed"`` by :func:`mrbench.kit.toolcall.parse_message`.

    A repeated tag makes a message malformed whatever else it holds, so such texts skip the
    message pattern (whose backtracking over repeated tags is what could be slow).
    """
    if any(text.count(tag) > 1 for tag in toolcall.TAGS):
        return "malformed"
    return toolcall.parse_message(text, require_think=True).shape or "malformed"


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
    return ParsedAnswer(
        calls=extract_calls(text),
        response=toolcall.first_block(text, "response"),
        think=toolcall.first_block(text, "think"),
        structure=_structure(text),
    )
