"""A cell's ``rewards.npz`` artifact: :class:`RewardsRecord`, written and read only here.

Every cell keeps the reward components of every rollout it trained on (written by
:mod:`mrbench.engine.training.reward_log` through the runner); ``mrbench simulate --like`` and a
sweep's fitted lab scenarios (:mod:`mrbench.lab.like`, :mod:`mrbench.lab.fit`) read them. NumPy
arrays in a compressed ``.npz``, not JSON; a file that is not one is a
:class:`~mrbench.core.json_fields.RecordError` naming it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mrbench.core import layout
from mrbench.core.json_fields import RecordError

FLOAT16_MAX = 65504.0
"""Largest float16: rewards within it are stored in float16 (3 significant digits), else float32."""


@dataclass(frozen=True)
class RewardsRecord:
    """``rewards.npz`` of a cell: the reward components of every rollout of every training batch.

    Shapes: ``T`` training generation batches (one per optimizer step unless TRL generates for
    several), ``P`` groups (prompts) per batch, ``G`` rollouts per group, ``K`` components.

    Attributes:
        components: the K component names, in the order of the last axis.
        weights: ``[K]`` the task's weights of the weighted total.
        rewards: ``[T, P, G, K]`` float array, NaN where a component was not scored (a whole
            rollout NaN: unscorable); float16 when every value fits (3 significant digits), else
            float32.
        prompt_ids: ``[T, P]`` int64: the same id for the same prompt (a hash of the prompt text in
            a cell; the prompt index in a lab sample); -1 on padding rows.
        group_ids: ``[T, P]`` int64: the group's index in the run (0, 1, … in batch order), -1 on
            padding rows.
        response_ids: ``[T, P, G]`` int64 or None: which of the prompt's candidate responses was
            sampled (only samples drawn from a lab scenario know it); None in a cell's record.
    """

    components: tuple[str, ...]
    weights: tuple[float, ...]
    rewards: Any
    prompt_ids: Any
    group_ids: Any
    response_ids: Any = None

    @classmethod
    def of_batches(
        cls,
        components: tuple[str, ...] | list[str],
        weights: tuple[float, ...] | list[float],
        batches: list[Any],
        prompt_ids: list[Any],
    ) -> RewardsRecord:
        """A record from per-batch ``[P_t, G, K]`` rewards and ``[P_t]`` prompt ids (a batch with
        fewer groups than the largest is padded with NaN rewards and -1 ids)."""
        import numpy as np

        k = len(components)
        t = len(batches)
        p = max((b.shape[0] for b in batches), default=0)
        g = max((b.shape[1] for b in batches), default=0)
        rewards = np.full((t, p, g, k), np.nan, dtype=np.float32)
        prompts = np.full((t, p), -1, dtype=np.int64)
        groups = np.full((t, p), -1, dtype=np.int64)
        first = 0
        for i, (batch, ids) in enumerate(zip(batches, prompt_ids, strict=True)):
            rewards[i, : batch.shape[0], : batch.shape[1]] = batch
            prompts[i, : len(ids)] = ids
            groups[i, : batch.shape[0]] = np.arange(first, first + batch.shape[0])
            first += batch.shape[0]
        return cls(tuple(components), tuple(float(w) for w in weights), rewards, prompts, groups)

    def save(self, path: Any) -> None:
        """Write the record as a compressed ``.npz`` at ``path``."""
        import numpy as np

        rewards = np.asarray(self.rewards, dtype=np.float32)
        finite = rewards[np.isfinite(rewards)]
        if finite.size == 0 or float(np.abs(finite).max()) <= FLOAT16_MAX:
            rewards = rewards.astype(np.float16)
        arrays = {
            "components": np.asarray(self.components, dtype=str),
            "weights": np.asarray(self.weights, dtype=np.float64),
            "rewards": rewards,
            "prompt_ids": np.asarray(self.prompt_ids, dtype=np.int64),
            "group_ids": np.asarray(self.group_ids, dtype=np.int64),
        }
        if self.response_ids is not None:
            arrays["response_ids"] = np.asarray(self.response_ids, dtype=np.int64)
        with open(path, "wb") as fh:
            np.savez_compressed(fh, **arrays)

    @classmethod
    def load(cls, path: Any, what: str = layout.REWARDS_ARTIFACT) -> RewardsRecord:
        """Read a record written by :meth:`save`; :class:`RecordError` naming ``what`` for a file that
        is not one (not an ``.npz``, a key missing, arrays whose shapes disagree)."""
        import zipfile

        import numpy as np

        try:
            with np.load(path, allow_pickle=False) as data:
                arrays = {name: data[name] for name in data.files}
        except (OSError, ValueError, zipfile.BadZipFile, EOFError) as exc:
            raise RecordError(f"{what} is not a rewards file (a .npz written by mrbench): {exc}") from None
        missing = [
            n for n in ("components", "weights", "rewards", "prompt_ids", "group_ids") if n not in arrays
        ]
        if missing:
            raise RecordError(f"{what} is not a rewards file: it lacks {', '.join(missing)}")
        rewards = arrays["rewards"]
        if rewards.ndim != 4 or not np.issubdtype(rewards.dtype, np.floating):
            raise RecordError(
                f"{what}: rewards must be a float array [steps, prompts, G, K], got {rewards.dtype} "
                f"of shape {list(rewards.shape)}"
            )
        t, p, g, k = rewards.shape
        components = tuple(str(c) for c in arrays["components"].reshape(-1))
        checks = {
            "components": (len(components), k),
            "weights": (arrays["weights"].shape, (k,)),
            "prompt_ids": (arrays["prompt_ids"].shape, (t, p)),
            "group_ids": (arrays["group_ids"].shape, (t, p)),
        }
        if "response_ids" in arrays:
            checks["response_ids"] = (arrays["response_ids"].shape, (t, p, g))
        for name, (got, want) in checks.items():
            if got != want:
                raise RecordError(
                    f"{what}: {name} has shape {got}, but rewards {list(rewards.shape)} need {want}"
                )
        return cls(
            components=components,
            weights=tuple(float(w) for w in arrays["weights"]),
            rewards=rewards.astype(np.float64),
            prompt_ids=arrays["prompt_ids"],
            group_ids=arrays["group_ids"],
            response_ids=arrays.get("response_ids"),
        )
