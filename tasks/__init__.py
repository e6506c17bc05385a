"""Tasks: each a package with data, reward components and evaluation, built by a registered factory.

Entries are lazy (``"module:attr"``): importing :mod:`tasks` loads no task code, data or model.
"""

from __future__ import annotations

from typing import Any

from harness.registry import Entry, Registry
from tasks.base import (
    Column,
    EvalResult,
    Generator,
    Message,
    RewardComponent,
    Sample,
    Task,
    clean_reward,
    completion_text,
)

TASKS: Registry[Any] = Registry("task")

TASKS.register_lazy(
    "tool-calling",
    "tasks.tool_calling.task:tool_calling",
    summary="Choose and call tools from a catalogue (<tool_call> JSON), four ToolRL-style reward components.",
)
TASKS.register_lazy(
    "code-generation",
    "tasks.code_generation.task:code_generation",
    summary="Write Python functions run against tests in a sandbox; seven reward components.",
)
TASKS.register_lazy(
    "agent-security",
    "tasks.agent_security.task:agent_security",
    summary="Use tools for a user while tool outputs carry prompt injections; utility and safety rewards.",
)


def get_task_entry(name: str) -> Entry[Any]:
    """The registry entry for ``name`` (raises ``UnknownNameError`` with suggestions)."""
    return TASKS.get(name)


def build_task(name: str, params: dict[str, Any] | None = None) -> Task:
    """Build the task ``name`` with its settings (unknown settings raise ``UnknownParamError``)."""
    entry = TASKS.get(name)
    return entry.obj(**entry.resolve_params(params))


__all__ = [
    "TASKS",
    "Column",
    "EvalResult",
    "Generator",
    "Message",
    "RewardComponent",
    "Sample",
    "Task",
    "build_task",
    "clean_reward",
    "completion_text",
    "get_task_entry",
]
