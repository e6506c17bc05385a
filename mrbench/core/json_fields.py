"""Reading mrbench's JSON records field by field: the checks they share, and the error they raise.

Every typed record that mrbench writes as JSON and reads back reads its fields through this
module. That covers the run artifacts (:mod:`mrbench.core.records`), the results folder's files
(:mod:`mrbench.core.cell_records`), what crosses a process boundary to run a cell
(:mod:`mrbench.core.cell_protocol`) and a model folder's marker (:mod:`mrbench.core.model_marker`).
A field it cannot read is a :class:`RecordError` naming the record (``what``: the file or the
artifact) and the field. Each error message is written here, so every record words it the same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mrbench.core.errors import UserError


class RecordError(UserError):
    """A JSON artifact that is not the record its name says (damaged, or another program's)."""


def mapping(data: Any, what: str) -> Mapping[str, Any]:
    """``data`` when it is a JSON object; else a :class:`RecordError` naming ``what``.

    >>> mapping([1], "sweep.json")
    Traceback (most recent call last):
    ...
    mrbench.core.json_fields.RecordError: sweep.json is not a JSON object (damaged, or not written by mrbench)
    """
    if not isinstance(data, Mapping):
        raise RecordError(f"{what} is not a JSON object (damaged, or not written by mrbench)")
    return data


def mapping_field(data: Mapping[str, Any], key: str, what: str) -> Mapping[str, Any]:
    """``data[key]`` as a JSON object: empty when it is absent, null or otherwise empty; a
    :class:`RecordError` naming ``what`` and ``key`` when it is something else."""
    return mapping(data.get(key) or {}, f"{what}: {key!r}")


def str_dict(data: Mapping[str, Any], key: str, what: str) -> dict[str, str]:
    """``data[key]`` as a ``str`` → ``str`` dict (keys and values made strings), read as
    :func:`mapping_field` reads it.

    >>> str_dict({"versions": {"torch": 2}}, "versions", "sweep.json")
    {'torch': '2'}
    """
    return {str(k): str(v) for k, v in mapping_field(data, key, what).items()}


def number(value: Any) -> float | None:
    """A JSON number as a float, None for null (an undefined statistic)."""
    return None if value is None else float(value)


def _kinds(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)


def is_kind(value: Any, kind: type | tuple[type, ...]) -> bool:
    """Whether JSON value ``value`` is a ``kind``; ``true``/``false`` are a bool only (not an int,
    whatever Python says), unless ``kind`` names bool (or ``object``: any value).

    >>> is_kind(3, int), is_kind(True, int), is_kind(True, (bool, int)), is_kind(2.5, (int, float))
    (True, False, True, True)
    >>> is_kind(True, object)
    True
    """
    kinds = _kinds(kind)
    return isinstance(value, kinds) and (not isinstance(value, bool) or bool in kinds or object in kinds)


def optional(
    data: Mapping[str, Any], key: str, kind: type | tuple[type, ...], what: str, default: Any
) -> Any:
    """``data[key]`` when it is a ``kind`` (``default`` when absent or null); a :class:`RecordError`
    naming ``what`` and ``key`` when it is another (``true`` and ``false`` are of no kind but bool:
    :func:`is_kind`).

    >>> optional({"threads": True}, "threads", int, "payload.json", 0)
    Traceback (most recent call last):
    ...
    mrbench.core.json_fields.RecordError: payload.json: 'threads' should be int, not True
    """
    value = data.get(key)
    if value is None:
        return default
    if not is_kind(value, kind):
        names = " or ".join(k.__name__ for k in _kinds(kind))
        raise RecordError(f"{what}: {key!r} should be {names}, not {value!r}")
    return value


def required(data: Mapping[str, Any], key: str, kind: type | tuple[type, ...], what: str) -> Any:
    """``data[key]``, a ``kind``: as :func:`optional`, and a :class:`RecordError` naming ``what`` and
    ``key`` when it is absent or null."""
    if data.get(key) is None:
        raise RecordError(f"{what}: {key!r} is missing")
    return optional(data, key, kind, what, None)
