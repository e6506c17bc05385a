"""The cell's ``samples/completions.jsonl``: TRL's completion log, read as rows.

``GRPOTrainer`` keeps the completions of its last logged generation batches in ``_logs`` (a dict
of deques: ``prompt``, ``completion``, ``advantages`` and ``rewards`` per reward function; TRL 1.16
has no public reader). The advantage hook (:mod:`mrbench.engine.training.advantage_hook`) has already put
the advantages trained on into ``advantages``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mrbench.core.contracts import completion_text


def completion_rows(logs: Mapping[str, Any]) -> list[dict[str, Any]]:
    """TRL's ``_logs`` as one row per completion (``B_total`` rows at most).

    Row: ``{"prompt": last prompt message's text, "completion": assistant text,
    "rewards": {component: value or None}, "advantage": the advantage trained on}``.
    """
    prompts, completions = list(logs["prompt"]), list(logs["completion"])
    advantages = list(logs["advantages"])
    rewards = {name: list(values) for name, values in logs["rewards"].items()}
    rows = []
    for i, (prompt, completion) in enumerate(zip(prompts, completions, strict=False)):
        last_user = prompt[-1]["content"] if isinstance(prompt, list) and prompt else str(prompt)
        rows.append(
            {
                "prompt": last_user,
                "completion": completion_text(completion),
                "rewards": {n: values[i] if i < len(values) else None for n, values in rewards.items()},
                "advantage": advantages[i] if i < len(advantages) else None,
            }
        )
    return rows
