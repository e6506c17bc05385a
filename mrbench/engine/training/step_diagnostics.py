"""Per-step ``adv/...`` diagnostics of a training run, with the shadow estimators.

After each scored generation batch the trainer
(:class:`~mrbench.engine.training.trainer.MultiRewardGRPOTrainer`) hands :class:`StepDiagnostics` what the
method in use saw (:class:`~mrbench.engine.training.advantage_hook.ScoredBatch`). Every ``every`` batches,
on the main process, it appends the batch's :func:`~mrbench.methods.diagnostics.diagnostics` to
TRL's per-step metrics (``GRPOTrainer._metrics[mode]``, which TRL averages and logs with its own)
and, for training batches, adds them to the run means of ``diagnostics.json``
(:class:`~mrbench.engine.training.run_diagnostics.DiagnosticsAccumulator`).

Shadow estimators: every other registered method (or the ones named in ``shadow_methods``, see
:func:`resolve_shadows`) is run with its default hyper-parameters on the same rewards, and compared
with the method in use (``adv/shadow/<method>/...`` and ``adv/resolution``, see
:mod:`mrbench.core.layout`). They only observe: what TRL trains on is the method in use. A shadow
that raises on a batch is left out of that batch, with one warning per method per run.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import torch

from mrbench.core.records import ShadowComparison
from mrbench.engine.training.advantage_hook import ScoredBatch
from mrbench.engine.training.reward_log import CHECKPOINT_FILE, RewardLog
from mrbench.engine.training.run_diagnostics import DiagnosticsAccumulator
from mrbench.methods import METHODS
from mrbench.methods.diagnostics import diagnostics, shadow_diagnostics

log = logging.getLogger(__name__)


def resolve_shadows(
    method_fn: Callable[..., Any], names: Iterable[str] | None
) -> dict[str, Callable[..., Any]]:
    """The shadow methods of a run: name → function, without the method in use (``method_fn``).

    ``names`` None: every registered method (plugins of the ``mrbench.methods`` entry-point group
    included; one that cannot be loaded is left out); otherwise exactly those (an unknown name
    raises :class:`mrbench.core.errors.UnknownNameError` here, before training starts).
    """
    entries = METHODS.catalog()[0] if names is None else [METHODS.get(name) for name in names]
    return {entry.name: entry.obj for entry in entries if entry.obj is not method_fn}


class StepDiagnostics:
    """The diagnostics of every ``every``-th scored batch (1 = always), shadows ``shadow_fns``
    (name → function, called with default hyper-parameters) included.

    ``accumulator`` holds the run means of the training batches; ``rewards`` every training batch's
    rewards (main process only; :mod:`mrbench.engine.training.reward_log`); ``batches_scored`` counts the
    batches seen (all three are the running state a training checkpoint keeps:
    :meth:`save_running_state`, :meth:`restore_running_state`).
    """

    def __init__(self, shadow_fns: dict[str, Callable[..., Any]], every: int = 1) -> None:
        self.shadow_fns = shadow_fns
        self.every = max(1, every)
        self.accumulator = DiagnosticsAccumulator()
        self.rewards = RewardLog()
        self.batches_scored = 0
        self._warned: set[str] = set()

    def save_running_state(self, checkpoint: Path) -> tuple[Any, int]:
        """Write the rewards so far into the training ``checkpoint`` folder
        (:data:`~mrbench.engine.training.reward_log.CHECKPOINT_FILE`); return the accumulator's state
        (JSON-ready) and ``batches_scored``, for the checkpoint's resume marker."""
        self.rewards.save(checkpoint / CHECKPOINT_FILE)
        return self.accumulator.to_json(), self.batches_scored

    def restore_running_state(self, checkpoint: Path, diagnostics: Any, batches_scored: int) -> None:
        """Inverse of :meth:`save_running_state`, from a resumed ``checkpoint``'s folder and marker."""
        self.accumulator = DiagnosticsAccumulator.from_json(diagnostics)
        self.batches_scored = batches_scored
        self.rewards = RewardLog.load(checkpoint / CHECKPOINT_FILE)

    def after_batch(
        self,
        mode: str,
        batch: ScoredBatch,
        metrics: dict[str, list[float]],
        component_names: Sequence[str],
        *,
        main_process: bool,
    ) -> None:
        """Count ``batch`` and, when it is due and this is the main process, append its diagnostics
        to ``metrics`` (TRL's ``_metrics[mode]``; ``mode`` "train" or "eval")."""
        # Diagnostics and shadows see the gathered batch; only the main process's logs are kept.
        if main_process and mode == "train":
            self.rewards.add(batch.rewards, batch.prompt_ids or [-1] * batch.rewards.shape[0])
        if main_process and self.batches_scored % self.every == 0:
            self._log(mode, batch, metrics, component_names)
        self.batches_scored += 1

    def _log(
        self, mode: str, batch: ScoredBatch, metrics: dict[str, list[float]], component_names: Sequence[str]
    ) -> None:
        """Append this batch's ``adv/...`` values to ``metrics``; add a training batch to the run means."""
        rewards, weights, adv = batch.rewards, batch.weights, batch.advantages
        shadows, compared = self._shadow_step(rewards, weights, adv)
        # The grpo shadow (default eps) is what diagnostics() would compute for its sign flips.
        diag = diagnostics(rewards, weights, adv, grpo_advantages=shadows.get("grpo"))
        for key, value in {**diag.metrics(list(component_names)), **compared.metrics()}.items():
            metrics[key].append(value)
        if mode == "train":
            self.accumulator.add(diag, compared)

    def _shadow_step(
        self, rewards: torch.Tensor, weights: torch.Tensor, adv: torch.Tensor
    ) -> tuple[dict[str, torch.Tensor], ShadowComparison]:
        """Run the shadow methods on ``rewards`` ``[P, G, K]`` and compare them with ``adv`` ``[P, G]``.

        Returns the shadows' advantages (name → ``[P, G]``; a shadow that raised or returned
        another shape is left out) and :func:`~mrbench.methods.diagnostics.shadow_diagnostics`.
        """
        shadows: dict[str, torch.Tensor] = {}
        for name, fn in self.shadow_fns.items():
            try:
                out = torch.as_tensor(fn(rewards, weights))
                if out.shape != adv.shape:
                    raise ValueError(f"returned shape {tuple(out.shape)}, expected {tuple(adv.shape)}")
            except Exception as exc:  # a shadow only observes: it must never stop training
                self._warn_once(name, exc)
                continue
            shadows[name] = out
        return shadows, shadow_diagnostics(rewards, adv, shadows)

    def _warn_once(self, name: str, exc: Exception) -> None:
        if name not in self._warned:
            self._warned.add(name)
            log.warning(
                "shadow method %r is skipped on a batch it cannot handle (%s: %s); "
                "further failures of it are skipped without a warning",
                name,
                type(exc).__name__,
                exc,
            )
