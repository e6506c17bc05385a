"""Tasks: each a package with data, reward components and evaluation, built by a registered factory.

Entries are lazy (``"module:attr"``): importing :mod:`tasks` loads no task code, data or model.
Tasks from other packages (a factory with keyword-only settings returning a :class:`Task`
subclass) register with ``@register_task("name")`` (``from mrbench import register_task``),
through an entry point in the group ``mrbench.tasks`` (``name = "package.module:factory"``), or
are named ``package.module:factory`` where a task name is expected.

What the harness reads of a task without building it (its evaluation data, its Pareto axes) are
class attributes of the :class:`Task` subclass the factory's return annotation names
(:func:`task_class`).
"""

from __future__ import annotations

import inspect
import sys
from typing import Any

from mrbench.core.contracts import (
    Column,
    DatasetSetting,
    EvalResult,
    Generator,
    Message,
    RewardComponent,
    Sample,
    Task,
    clean_reward,
    completion_text,
)
from mrbench.core.errors import PluginError, UserError
from mrbench.core.registry import BUILT_IN, Entry, Registry

ENTRY_POINT_GROUP = "mrbench.tasks"


def check_task_factory(factory: Any) -> None:
    """``TypeError`` unless every parameter of ``factory`` is a keyword-only setting (with a default,
    which the registry checks): a task is built as ``factory(**settings)``."""
    parameters = inspect.signature(factory).parameters.values()  # readable: the registry checks that first
    positional = [p.name for p in parameters if p.kind is not inspect.Parameter.KEYWORD_ONLY]
    if positional:
        raise TypeError(
            f"a task factory takes keyword-only settings with defaults (def factory(*, n_train=16)); "
            f"{getattr(factory, '__qualname__', factory)!s} also takes {', '.join(positional)}"
        )


TASKS: Registry[Any] = Registry("task", group=ENTRY_POINT_GROUP, check=check_task_factory)
register_task = TASKS.register

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
    """The registry entry for ``name`` (a registered name, an entry point's name or a
    ``"module:factory"`` path); raises ``UnknownNameError`` with suggestions, or ``PluginError``."""
    return TASKS.get(name)


def task_class(name: str) -> type[Task]:
    """The :class:`Task` subclass task ``name``'s factory returns, read from its return annotation
    (``def greeting(*, n: int = 64) -> Greeting``) without building the task: its class attributes
    ``eval_datasets`` and ``pareto_axes`` are what the harness reads before building a task, or
    without building one (a report). :class:`Task` itself, whose attributes are the defaults, when
    the factory's annotation names no subclass (none, ``Task``, or a name it cannot evaluate);
    :func:`mrbench.engine.contract.check_task` fails a factory whose task declares otherwise.

    Raises as :func:`get_task_entry` for an unknown name or a plugin that cannot be loaded.
    """
    factory = TASKS.get(name).obj
    if isinstance(factory, type) and issubclass(factory, Task):
        return factory  # a class with keyword-only settings is its own factory
    try:
        returned: Any = inspect.signature(factory).return_annotation
    except (TypeError, ValueError):  # no readable signature: the registry refuses it before here
        return Task
    if isinstance(returned, str):  # ``from __future__ import annotations``: the name, in its module
        module = sys.modules.get(getattr(factory, "__module__", "") or "")
        try:
            returned = eval(returned, dict(vars(module)) if module else {})
        except Exception:  # e.g. a name imported only under TYPE_CHECKING
            return Task
    return returned if isinstance(returned, type) and issubclass(returned, Task) else Task


def build_task(name: str, params: dict[str, Any] | None = None) -> Task:
    """Build the task ``name`` with its settings.

    Unknown settings raise ``UnknownParamError``; a value the task's factory rejects (its
    ``ValueError``, e.g. ``n_eval=-1`` or an unknown attack style) raises :class:`UserError`
    naming the task, so the CLI prints one line and exits 2 instead of a traceback. A plugin's
    factory that returns something other than a :class:`Task` raises :class:`PluginError`.
    """
    entry = TASKS.get(name)
    resolved = entry.resolve_params(params)
    try:
        task = entry.obj(**resolved)
    except UserError:
        raise
    except ValueError as exc:
        raise UserError(f"bad setting for task {name!r}: {exc}") from None
    if entry.source != BUILT_IN and not isinstance(task, Task):
        raise PluginError(
            f"task {name!r} ({entry.source}): its factory returned a {type(task).__name__}, "
            "not a mrbench.Task subclass"
        )
    return task


__all__ = [
    "TASKS",
    "Column",
    "DatasetSetting",
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
    "register_task",
    "task_class",
]
