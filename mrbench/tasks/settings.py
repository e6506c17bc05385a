"""The one check of a task factory's numeric settings, against what its signature declares.

A bounded setting declares the values it accepts in its annotation with
:class:`~mrbench.core.registry.Range`, as a method's hyper-parameters do::

    def my_task(*, n_eval: Annotated[int, Range(ge=1)] = 64, ...) -> MyTask:
        check_settings("my-task", my_task, locals())

The registry checks every value given by name (command line, sweep YAML,
:func:`mrbench.tasks.build_task`) before the factory runs; :func:`check_settings`, the factory's
first statement, checks a direct call (``my_task(n_eval=0)``) the same way, with the same
message (:class:`~mrbench.core.errors.RegistryError`: a ``UserError``, exit code 2, and a
``ValueError``), and checks that an integer setting got an integer. A setting whose default is
``None`` cannot declare a range in its annotation (the registry checks the default against it):
its range is passed as ``optional``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

from mrbench.core.errors import RegistryError
from mrbench.core.registry import Entry, Range, check_value

__all__ = ["check_settings"]


@functools.cache
def _declared(factory: Callable[..., Any]) -> tuple[dict[str, Any], dict[str, Range]]:
    """The factory's settings with their defaults, and the :class:`Range` of each that declares one
    (read as the registry reads them)."""
    entry: Entry[Any] = Entry(getattr(factory, "__name__", "factory"), factory)
    return entry.params, entry.ranges


def _is_integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_settings(
    task: str,
    factory: Callable[..., Any],
    values: Mapping[str, Any],
    *,
    optional: Mapping[str, Range] | None = None,
) -> None:
    """:class:`RegistryError` naming ``task``, the setting and the value, for the first of ``values``
    (the factory's settings as it got them) that is outside its declared :class:`Range`, not finite
    (a float setting), or not an integer (a setting whose default is one, e.g. a count or a seed).

    ``optional``: the range of a setting whose default is ``None``, which may also be ``None``.
    """
    defaults, ranges = _declared(factory)
    for key, default in defaults.items():
        value = values[key]
        if optional and key in optional:
            if value is not None:
                _check_optional(task, key, value, optional[key])
            continue
        check_value(value, default, ranges.get(key), key=key, owner=task)
        if _is_integer(default) and not _is_integer(value):
            raise RegistryError(f"bad value {value!r} for parameter {key!r} of {task!r}: must be an integer")


def _check_optional(task: str, key: str, value: Any, bound: Range) -> None:
    """The check of a setting that may also be ``None`` (an integer, since ranges count things)."""
    if not bound.admits(value) or not _is_integer(value):
        raise RegistryError(
            f"bad value {value!r} for parameter {key!r} of {task!r}: must be an integer {bound}, or None"
        )
