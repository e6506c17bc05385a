"""The rewards of every training batch of a cell, kept for ``rewards.npz`` (``mrbench simulate --like``).

:class:`~mrbench.engine.training.step_diagnostics.StepDiagnostics` hands :class:`RewardLog` each training
batch the method saw (:class:`~mrbench.engine.training.advantage_hook.ScoredBatch`: rewards ``[P, G, K]``
gathered over processes, and one prompt id per group) on the main process only, so a
multi-process cell writes one record of the gathered rewards. A training checkpoint keeps the log
so far (:meth:`save` / :meth:`load`, by :mod:`mrbench.engine.cell.resume`), so a resumed cell's record
still holds the steps before the kill. The cell logs it as
:class:`~mrbench.core.rewards_record.RewardsRecord` at the end.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from mrbench.core.rewards_record import RewardsRecord

CHECKPOINT_FILE = "mrbench-rewards.npz"
"""The log so far, in a training checkpoint folder."""


def prompt_id(prompt: Any) -> int:
    """A stable 63-bit id of a prompt (text, or chat messages): the same prompt, the same id, in
    every run and process."""
    text = prompt if isinstance(prompt, str) else json.dumps(prompt, sort_keys=True, default=str)
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "big") >> 1


def group_prompt_ids(prompts: Sequence[Any], groups: int, group_size: int) -> list[int]:
    """``[P]`` prompt ids of a batch's ``groups`` groups from the last ``groups · group_size`` entries
    of ``prompts`` (TRL's gathered prompt log, one entry per rollout); -1 where the log is short."""
    tail = list(prompts)[-groups * group_size :] if groups * group_size else []
    ids = []
    for g in range(groups):
        i = len(tail) - (groups - g) * group_size
        ids.append(prompt_id(tail[i]) if i >= 0 else -1)
    return ids


class RewardLog:
    """Training batches' rewards ``[P, G, K]`` (float32) and their ``[P]`` prompt ids, in order."""

    def __init__(self) -> None:
        self.batches: list[np.ndarray] = []
        self.prompt_ids: list[np.ndarray] = []

    def add(self, rewards: Any, prompt_ids: Sequence[int]) -> None:
        """Append one batch: ``rewards`` ``[P, G, K]`` (a tensor or array), ``prompt_ids`` ``[P]``."""
        array = np.asarray(rewards.numpy() if hasattr(rewards, "numpy") else rewards, dtype=np.float32)
        self.batches.append(array)
        self.prompt_ids.append(np.asarray(list(prompt_ids), dtype=np.int64))

    def record(self, components: Sequence[str], weights: Sequence[float]) -> RewardsRecord:
        """The :class:`RewardsRecord` of the batches so far."""
        return RewardsRecord.of_batches(list(components), list(weights), self.batches, self.prompt_ids)

    def save(self, path: Path) -> None:
        """Keep the log in ``path`` (a training checkpoint's :data:`CHECKPOINT_FILE`); names and weights
        are the cell's, not kept here."""
        k = self.batches[0].shape[-1] if self.batches else 0
        self.record([str(i) for i in range(k)], [1.0] * k).save(path)

    @classmethod
    def load(cls, path: Path) -> RewardLog:
        """The log :meth:`save` kept in ``path`` (empty when the checkpoint has none: one written
        before rewards were kept)."""
        log = cls()
        if not path.is_file():
            return log
        record = RewardsRecord.load(path, str(path))
        for rewards, ids, groups in zip(record.rewards, record.prompt_ids, record.group_ids, strict=True):
            keep = groups >= 0
            log.add(rewards[keep].astype(np.float32), ids[keep].tolist())
        return log
