"""The tool-call message format, and its one parser (used by every task that calls tools).

An assistant message in this format is an optional ``<think>…</think>`` block followed by
exactly one of

- a tool-call block with one JSON object ``{"name": str, "parameters": {...}}`` per line, the
  calls made in order::

      <tool_call>
      {"name": "get_weather", "parameters": {"city": "Paris"}}
      </tool_call>

- a final answer ``<response>…</response>``.

Surrounding whitespace is ignored; otherwise nothing may come before, between (but whitespace)
or after the blocks, no tag may appear twice, and the other block's tags not at all. A task
says whether the think block is required (tool calling: ToolRL's format) or optional (agent
security: the gold turns leave it out to fit the tiny models' per-turn budget).

**Call lines.** Each non-blank line of a tool-call block is one JSON object with a string
``name`` and an object ``parameters`` — a call without arguments writes ``"parameters": {}``,
as every prompt and gold answer does; other keys are dropped. A block without any call line
is an error.

Two readings of a text:

- :func:`parse_message` — strict: is the whole message well formed, and what does it say?
  Never raises; a malformed message gets an :attr:`ParsedMessage.error` saying why.
- :func:`extract_calls` — lenient: the calls of the first complete tool-call block wherever it
  is (the tool-calling rewards credit a call even when the surrounding format is off).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypedDict

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
TOOL_CALL_OPEN, TOOL_CALL_CLOSE = "<tool_call>", "</tool_call>"
RESPONSE_OPEN, RESPONSE_CLOSE = "<response>", "</response>"
TAGS: tuple[str, ...] = (
    THINK_OPEN,
    THINK_CLOSE,
    TOOL_CALL_OPEN,
    TOOL_CALL_CLOSE,
    RESPONSE_OPEN,
    RESPONSE_CLOSE,
)

Block = Literal["think", "tool_call", "response"]
_SHAPES = r"(?:<tool_call>(?P<calls>.*?)</tool_call>|<response>(?P<response>.*?)</response>)\Z"
_MESSAGE = {
    True: re.compile(r"\A<think>(?P<think>.*?)</think>\s*" + _SHAPES, re.DOTALL),
    False: re.compile(r"\A(?:<think>(?P<think>.*?)</think>\s*)?" + _SHAPES, re.DOTALL),
}


class Call(TypedDict):
    """One parsed call: ``{"name": str, "parameters": dict}``."""

    name: str
    parameters: dict[str, Any]


class CallFormatError(ValueError):
    """A tool-call line or block that does not follow the format; the message says why."""


@dataclass(frozen=True)
class ParsedMessage:
    """What one assistant message says: calls or a response, or why it is not well formed.

    ``response`` and ``think`` are the blocks' text as written (not stripped); ``calls`` is
    empty unless the message is a well-formed tool-call block.
    """

    calls: tuple[Call, ...] = ()
    response: str | None = None
    think: str | None = None
    error: str | None = None

    @property
    def valid(self) -> bool:
        """Whether the message is well formed."""
        return self.error is None

    @property
    def shape(self) -> Literal["tool_call", "response"] | None:
        """``"tool_call"`` or ``"response"`` for a well-formed message, else ``None``."""
        if not self.valid:
            return None
        return "response" if self.response is not None else "tool_call"


def parse_call_line(line: str) -> Call:
    """One call from one JSON line; :class:`CallFormatError` if it is not a call object.

    >>> parse_call_line('{"name": "get_weather", "parameters": {"city": "Paris"}, "id": 7}')
    {'name': 'get_weather', 'parameters': {'city': 'Paris'}}
    >>> parse_call_line('{"name": "balance"}')
    Traceback (most recent call last):
    ...
    mrbench.kit.toolcall.CallFormatError: call 'balance' has no 'parameters' object
    """
    shown = line.strip()[:80]
    try:
        obj = json.loads(line)
    except (ValueError, RecursionError):
        raise CallFormatError(f"call line is not JSON: {shown!r}") from None
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        raise CallFormatError(f"call line has no string 'name': {shown!r}")
    if "parameters" not in obj:
        raise CallFormatError(f"call {obj['name']!r} has no 'parameters' object")
    if not isinstance(obj["parameters"], dict):
        raise CallFormatError(f"'parameters' of {obj['name']!r} is not an object")
    return {"name": obj["name"], "parameters": obj["parameters"]}


def parse_call_block(block: str) -> list[Call]:
    """The calls of a tool-call block's text, one per non-blank line; :class:`CallFormatError`
    if a line is not a call or there is none.

    >>> parse_call_block('\\n{"name":"a","parameters":{}}\\n\\n{"name":"b","parameters":{"x":1}}\\n')
    [{'name': 'a', 'parameters': {}}, {'name': 'b', 'parameters': {'x': 1}}]
    """
    calls = [parse_call_line(line) for line in block.splitlines() if line.strip()]
    if not calls:
        raise CallFormatError("empty <tool_call> block")
    return calls


def first_block(text: str, block: Block) -> str | None:
    """The text inside the first complete ``<block>…</block>`` anywhere in ``text``, or ``None``.

    >>> first_block("say <response>hi</response> <response>bye</response>", "response")
    'hi'
    """
    # str.find, not a regex search: a search for "<b>(.*?)</b>" restarts at every opening tag,
    # which is quadratic on text full of unclosed tags (1 MB of them took minutes). The first
    # opening tag is the one a search would match, if any closing tag follows it at all.
    opening, closing = f"<{block}>", f"</{block}>"
    start = text.find(opening)
    if start == -1:
        return None
    end = text.find(closing, start + len(opening))
    return None if end == -1 else text[start + len(opening) : end]


def extract_calls(text: str) -> list[Call]:
    """The calls of the first tool-call block wherever it is in ``text``; ``[]`` without one.

    :class:`CallFormatError` if that block is never closed or does not parse.

    >>> extract_calls('Sure! <tool_call>\\n{"name":"f","parameters":{}}\\n</tool_call> done')
    [{'name': 'f', 'parameters': {}}]
    >>> extract_calls("<response>hi</response>")
    []
    """
    if TOOL_CALL_OPEN not in text:
        return []
    block = first_block(text, "tool_call")
    if block is None:
        raise CallFormatError("unclosed <tool_call> block")
    return parse_call_block(block)


_SPACE = re.compile(r"\s*")


def _is_block(text: str, start: int = 0) -> bool:
    """Whether ``text[start:]`` is one ``<tool_call>…</tool_call>`` or ``<response>…</response>`` span."""
    return any(
        text.startswith(opening, start)
        and text.endswith(closing)
        and len(text) - start >= len(opening) + len(closing)
        for opening, closing in ((TOOL_CALL_OPEN, TOOL_CALL_CLOSE), (RESPONSE_OPEN, RESPONSE_CLOSE))
    )


def _shaped(text: str, require_think: bool) -> bool:
    """Whether ``_MESSAGE[require_think]`` matches ``text``, decided in linear time.

    Used for text with repeated tags, where the pattern's lazy groups would try every closing
    ``</think>``: a match is an optional ``<think>`` up to *some* ``</think>``, then whitespace,
    then one block running to the end.
    """
    if not require_think and _is_block(text):
        return True
    if not text.startswith(THINK_OPEN):
        return False
    end = text.find(THINK_CLOSE, len(THINK_OPEN))
    while end != -1:
        after = end + len(THINK_CLOSE)
        if _is_block(text, _SPACE.match(text, after).end()):
            return True
        end = text.find(THINK_CLOSE, after)
    return False


def parse_message(text: object, *, require_think: bool = False) -> ParsedMessage:
    """Parse one whole assistant message (never raises; non-strings are malformed).

    >>> parse_message('<tool_call>\\n{"name": "balance", "parameters": {}}\\n</tool_call>').calls
    ({'name': 'balance', 'parameters': {}},)
    >>> parse_message("<think>easy</think> <response>45</response>").response
    '45'
    >>> parse_message("<response>45</response>", require_think=True).error
    'not a <think> block, then a single <tool_call> or <response> block'
    >>> parse_message("pay ACME 45").error
    'not a single <tool_call> or <response> block'
    """
    if not isinstance(text, str):
        return ParsedMessage(error=f"not text: {type(text).__name__}")
    stripped = text.strip()
    # A well-formed message holds each tag at most once. Checking that first also keeps the
    # anchored pattern below linear: with one candidate per tag its lazy groups cannot backtrack
    # over repeated tags (quadratic on 1 MB of them).
    expected = "a single <tool_call> or <response> block"
    not_shaped = ParsedMessage(
        error=f"not a <think> block, then {expected}" if require_think else f"not {expected}"
    )
    if any(stripped.count(tag) > 1 for tag in TAGS):
        return ParsedMessage(error="more than one block") if _shaped(stripped, require_think) else not_shaped
    match = _MESSAGE[require_think].match(stripped)
    if not match:
        return not_shaped
    is_call = match.group("calls") is not None
    absent = (RESPONSE_OPEN, RESPONSE_CLOSE) if is_call else (TOOL_CALL_OPEN, TOOL_CALL_CLOSE)
    if any(stripped.count(tag) > (0 if tag in absent else 1) for tag in TAGS):
        return ParsedMessage(error="more than one block")
    think = match.group("think")
    if not is_call:
        return ParsedMessage(response=match.group("response"), think=think)
    try:
        calls = parse_call_block(match.group("calls"))
    except CallFormatError as exc:
        return ParsedMessage(error=str(exc))
    return ParsedMessage(calls=tuple(calls), think=think)


def call_block(lines: Sequence[str]) -> str:
    """A tool-call block around already rendered JSON call lines (each task keeps its JSON style).

    >>> print(call_block(['{"name": "balance", "parameters": {}}']))
    <tool_call>
    {"name": "balance", "parameters": {}}
    </tool_call>
    """
    return TOOL_CALL_OPEN + "\n" + "\n".join(lines) + "\n" + TOOL_CALL_CLOSE


def response_block(text: str) -> str:
    """A final answer: ``<response>text</response>``."""
    return f"{RESPONSE_OPEN}{text}{RESPONSE_CLOSE}"
