"""What a cell reports back to ``mrbench run`` or a sweep: :class:`CellResult`, and reading one back
from JSON (a pending record's ``result``, a multi-process cell's rank 0 answer) field by field."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from mrbench.core.json_fields import RecordError, is_kind, mapping, optional, required


@dataclass
class CellResult:
    """What a finished cell reports back to the CLI or a sweep.

    ``checkpoint_dir``: the saved policy ("" with save "none"); ``recovered``: True when this call
    only logged what an earlier attempt could not (no training).
    """

    run_id: str
    run_key: str
    status: str
    metrics_before: dict[str, float] = field(default_factory=dict)
    metrics_after: dict[str, float] = field(default_factory=dict)
    wall_s: float = 0.0
    primary_metric: str = ""
    checkpoint_dir: str = ""
    recovered: bool = False

    @classmethod
    def from_mapping(cls, data: Any, source: str) -> CellResult:
        """The result a JSON object holds (a pending record's ``result``, a multi-process cell's
        rank 0 answer): :class:`~mrbench.core.records.RecordError` naming ``source`` and the field
        for a key it does not know, a missing required one, or a value of the wrong type.

        >>> CellResult.from_mapping({"run_id": "r", "run_key": "k", "status": "FINISHED"}, "x").status
        'FINISHED'
        """
        data = mapping(data, source)
        unknown = sorted(str(key) for key in data if key not in _RESULT_FIELDS)
        if unknown:
            raise RecordError(f"{source}: unknown field(s) {', '.join(map(repr, unknown))}")
        values: dict[str, Any] = {}
        for name, kind in _RESULT_FIELDS.items():
            if name in _REQUIRED_RESULT_FIELDS:
                value = required(data, name, kind, source)
            else:
                value = optional(data, name, kind, source, None)
            if value is None:
                continue
            values[name] = _metrics(value, name, source) if kind is dict else value
        if "wall_s" in values:
            values["wall_s"] = float(values["wall_s"])
        return cls(**values)


_RESULT_FIELDS: dict[str, type | tuple[type, ...]] = {
    "run_id": str,
    "run_key": str,
    "status": str,
    "metrics_before": dict,
    "metrics_after": dict,
    "wall_s": (int, float),
    "primary_metric": str,
    "checkpoint_dir": str,
    "recovered": bool,
}
""":class:`CellResult`'s fields and the JSON type of each (dict: metric name → number)."""
_REQUIRED_RESULT_FIELDS = frozenset(
    f.name
    for f in dataclasses.fields(CellResult)
    if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
)


def _metrics(value: dict[str, Any], name: str, source: str) -> dict[str, float]:
    for key, number in value.items():
        if not is_kind(number, (int, float)):
            raise RecordError(f"{source}: {name!r} gives {key!r} the value {number!r}, not a number")
    return {str(key): float(number) for key, number in value.items()}
