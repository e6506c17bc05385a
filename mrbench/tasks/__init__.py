"""Tasks: each a package with data, reward components and evaluation, built by a registered factory.

Entries are lazy (``"module:attr"``): importing :mod:`tasks` loads no task code, data or model.
"""

from __future__ import annotations

from typing import Any

from mrbench.core.contracts import (
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
from mrbench.core.errors import UserError
from mrbench.core.registry import Entry, Registry

TASKS: Registry[Any] = Registry("task")

TASKS.register_lazy(
    "tool-calling",
    "mrbench.tasks.tool_calling.task:tool_calling",
    summary="Choose and call tools from a catalogue (<tool_call> JSON), four ToolRL-style reward components.",
)
TASKS.register_lazy(
    "code-generation",
    "mrbench.tasks.code_generation.task:code_generation",
    summary="Write Python functions run against tests in a sandbox; seven reward components.",
)
TASKS.register_lazy(
    "agent-security",
    "mrbench.tasks.agent_security.task:agent_security",
    summary="Use tools for a user while tool outputs carry prompt injections; utility and safety rewards.",
)


def get_task_entry(name: str) -> Entry[Any]:
    """The registry entry for ``name`` (raises ``UnknownNameError`` with suggestions)."""
    return TASKS.get(name)


def build_task(name: str, params: dict[str, Any] | None = None) -> Task:
    """Build the task ``name`` with its settings.

    Unknown settings raise ``UnknownParamError``; a value the task's factory rejects (its
    ``ValueError``, e.g. ``n_eval=-1`` or an unknown attack style) raises :class:`UserError`
    naming the task, so the CLI prints one line and exits 2 instead of a traceback.
    """
    entry = TASKS.get(name)
    resolved = entry.resolve_params(params)
    try:
        return entry.obj(**resolved)
    except ValueError as exc:
        raise UserError(f"bad setting for task {name!r}: {exc}") from None


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
