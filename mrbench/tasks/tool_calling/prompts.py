"""Tool-calling prompts in two styles: ``chat`` for pretrained instruction models, ``compact`` for tiny ones.

Both ask for the same answer (:mod:`mrbench.kit.toolcall`: ``<think>…</think>`` then a
``<tool_call>`` block with one JSON call per line, or a ``<response>``) and are scored alike.

- ``chat`` (the default): a system prompt that states the answer format in words, as ToolRL's
  does; the offered tools (one JSON description per line) with the request in the user turn; and
  before it :data:`SHOTS` worked examples as earlier chat turns. The examples use tools that are
  not in the catalogue, so they teach the format and not an answer. A small instruction model
  (SmolLM2-135M-Instruct) ignores the format stated in words alone and answers in prose; with
  two worked examples it answers in the format in a good share of its samples (``docs/models.md``).
- ``compact``: one terse system message with the tools and the format, then the user's request,
  a few hundred characters in all: what the tiny models' warm start is trained on.
"""

from __future__ import annotations

import json
from typing import Any

from mrbench.core.contracts import Message

PROMPT_STYLES: tuple[str, ...] = ("chat", "compact")

COMPACT_TEMPLATE = (
    "Tools:\n{tools}\n"
    "Answer <think>...</think> then <tool_call>\n"
    '{{"name":...,"parameters":{{...}}}}\n</tool_call> (one call per line), '
    "or <response>...</response> if no tool fits."
)

CHAT_SYSTEM = """You answer a user's request by calling tools. The tools you may use are listed \
before each request, one JSON object per line with its name, description and parameters.

Answer in this format and nothing else:
<think>which tool the request needs, and its arguments</think>
<tool_call>
{"name": "tool name", "parameters": {"argument name": value}}
</tool_call>
Write one call per line; a request that needs two calls gets two lines. Use only the listed \
tools, and take the argument values from the request. If no listed tool fits the request, answer:
<think>why no tool fits</think>
<response>your reply to the user</response>"""

_SHOT_TOOLS = (
    {"name": "get_time", "description": "Local time in a city", "parameters": {"city": "string"}},
    {
        "name": "define_word",
        "description": "Dictionary definition of a word",
        "parameters": {"word": "string"},
    },
)
SHOTS: tuple[tuple[tuple[dict[str, Any], ...], str, str], ...] = (
    (
        _SHOT_TOOLS,
        "What time is it in Quito?",
        "<think>get_time with city Quito</think>\n<tool_call>\n"
        '{"name": "get_time", "parameters": {"city": "Quito"}}\n</tool_call>',
    ),
    (
        _SHOT_TOOLS[:1],
        "Thanks, that is all for today.",
        "<think>no tool fits a thank-you</think>\n<response>You are welcome, have a nice day!</response>",
    ),
)
"""The worked examples of the ``chat`` style: (offered tools, request, answer)."""


def tool_lines(tools: list[dict[str, Any]] | tuple[dict[str, Any], ...], *, compact: bool) -> str:
    """One JSON description per line (``compact``: without spaces, fewer tokens for the tiny models)."""
    separators = (",", ":") if compact else (", ", ": ")
    return "\n".join(json.dumps(t, separators=separators, ensure_ascii=False) for t in tools)


def chat_request(tools: list[dict[str, Any]] | tuple[dict[str, Any], ...], request: str) -> str:
    """The user turn of the ``chat`` style: the offered tools, then the request.

    >>> print(chat_request([{"name": "f", "parameters": {}}], "Do it."))
    Tools:
    {"name": "f", "parameters": {}}
    <BLANKLINE>
    Request: Do it.
    """
    return f"Tools:\n{tool_lines(tools, compact=False)}\n\nRequest: {request}"


def shot_messages() -> list[Message]:
    """The worked examples as alternating user and assistant turns."""
    messages: list[Message] = []
    for tools, request, answer in SHOTS:
        messages.append({"role": "user", "content": chat_request(tools, request)})
        messages.append({"role": "assistant", "content": answer})
    return messages


def build_prompt(
    tools: list[dict[str, Any]], turn: list[Message], style: str, *, extra_system: str = ""
) -> list[Message]:
    """The chat prompt for the conversation ``turn`` (user and assistant messages, ending with the
    user's) with ``tools`` offered, in ``style``; ``extra_system``: a data set's own system text,
    appended to the system message.

    In the ``chat`` style the tools go with the first user message of ``turn`` (for a single
    request, its only one).
    """
    if style not in PROMPT_STYLES:
        raise ValueError(f"unknown prompt style {style!r}; choose from {', '.join(PROMPT_STYLES)}")
    tail = f"\n{extra_system}" if extra_system else ""
    if style == "compact":
        system = COMPACT_TEMPLATE.format(tools=tool_lines(tools, compact=True)) + tail
        return [{"role": "system", "content": system}, *turn]
    first_user = next(i for i, m in enumerate(turn) if m["role"] == "user")
    turn = [
        {**m, "content": chat_request(tools, m["content"])} if i == first_user else m
        for i, m in enumerate(turn)
    ]
    return [{"role": "system", "content": CHAT_SYSTEM + tail}, *shot_messages(), *turn]
