"""A lab scenario from a YAML file: the fields of :class:`~mrbench.lab.scenarios.Scenario`, on top of
a preset when the file says ``base: <preset>`` (see :mod:`mrbench.lab.scenarios` for the format)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from mrbench.core.errors import UserError
from mrbench.lab.presets import get_scenario
from mrbench.lab.scenarios import Scenario, scenario_from_dict


def load_config(path: Path) -> Scenario:
    """A scenario from a YAML file (``base: <preset>`` to start from a preset)."""
    import yaml

    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise UserError(f"cannot read scenario config {str(path)!r}: {exc.strerror or exc}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise UserError(f"scenario config {str(path)!r} is not valid YAML: {exc}") from None
    if not isinstance(data, Mapping):
        raise UserError(
            f"scenario config {str(path)!r} must be a mapping of settings, got {type(data).__name__}"
        )
    data = dict(data)
    base_name = data.pop("base", None)
    base = get_scenario(str(base_name)) if base_name is not None else None
    if base is not None and "name" not in data:
        data["name"] = path.stem
    return scenario_from_dict(data, base, source=str(path))
