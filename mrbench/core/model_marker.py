"""``mrbench_model.json``: what a model folder mrbench made says about itself, as a typed record.

Every folder mrbench builds, converts or saves (a tiny preset's cache folder, a converted
pretrained preset, a stand-in, a cell's ``final/`` policy) carries one, written last: the task
settings the model was built for (a tiny model knows only the tasks' compact prompts; a policy
trained from it carries them on), and what the builder records about how it was made (preset,
cache key, source file and its hash, …). A folder without one is not mrbench's: no settings.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mrbench.core.json_fields import RecordError, mapping
from mrbench.core.results_layout import MODEL_MARKER


@dataclass(frozen=True)
class ModelMarker:
    """``task_settings``: the settings the model was built for; ``facts``: the rest its builder
    recorded (kept as written, for people and cache checks)."""

    task_settings: Mapping[str, Any] = field(default_factory=dict)
    facts: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {**self.facts, "task_settings": dict(self.task_settings)}

    def write(self, folder: Path) -> Path:
        """Write the marker into ``folder`` (last, once the model is complete); returns its path."""
        path = Path(folder) / MODEL_MARKER
        path.write_text(json.dumps(self.to_json(), indent=2))
        return path

    @classmethod
    def read(cls, folder: str | Path) -> ModelMarker | None:
        """The marker of ``folder``; None when it has none or it cannot be read (not mrbench's).

        >>> ModelMarker.read("/no/such/folder") is None
        True
        """
        try:
            data = mapping(json.loads((Path(folder) / MODEL_MARKER).read_text()), MODEL_MARKER)
        except (OSError, ValueError, RecordError):
            return None
        settings = data.get("task_settings")
        facts = {k: v for k, v in data.items() if k != "task_settings"}
        return cls(dict(settings) if isinstance(settings, dict) else {}, facts)

    @staticmethod
    def present(folder: str | Path) -> bool:
        """Whether ``folder`` is complete: its marker is written last."""
        return (Path(folder) / MODEL_MARKER).exists()
