"""TRL glue: a ``GRPOTrainer`` whose advantages come from a registered mrbench method.

TRL 1.16 has no advantage hook, so the subclass
1. keeps the gathered ``rewards_per_func`` ``[B_total, K]`` that ``_calculate_rewards`` returns,
2. lets ``_generate_and_score_completions`` run unchanged (generation, reward calls, KL inputs,
   TRL's own reward logging), then
3. recomputes the advantages from the kept rewards with the chosen method, slices them to this
   process, and replaces ``advantages`` in the returned batch, plus the tail of
   ``_logs["advantages"]`` so that logged completions show what was trained on.

Everything else (loss, clipping, KL, optimisation) is TRL's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from trl import GRPOTrainer

from mrbench.methods.diagnostics import diagnostics


class DiagnosticsAccumulator:
    """Running means of the per-step diagnostics that are matrices/vectors (for ``diagnostics.json``)."""

    def __init__(self) -> None:
        self.steps = 0
        self._corr_sum: list[list[float]] | None = None
        self._corr_count: list[list[int]] | None = None
        self._share_sum: list[float] | None = None
        self._share_count: list[int] | None = None

    def add(self, diag: dict[str, Any]) -> None:
        corr = diag.get("corr_matrix") or []
        k = len(corr)
        if self._corr_sum is None:
            self._corr_sum = [[0.0] * k for _ in range(k)]
            self._corr_count = [[0] * k for _ in range(k)]
            self._share_sum = [0.0] * k
            self._share_count = [0] * k
        assert self._corr_count is not None and self._share_sum is not None and self._share_count is not None
        for i in range(k):
            for j in range(k):
                if corr[i][j] is not None:
                    self._corr_sum[i][j] += corr[i][j]
                    self._corr_count[i][j] += 1
        for i, value in enumerate(diag.get("share") or []):
            if value is not None:
                self._share_sum[i] += value
                self._share_count[i] += 1
        self.steps += 1

    def summary(self, components: list[str]) -> dict[str, Any]:
        """``{"components", "corr_matrix" (K×K, None where never defined), "share" [K], "steps"}``."""
        if (
            self._corr_sum is None
            or self._corr_count is None
            or self._share_sum is None
            or self._share_count is None
        ):
            return {"components": components, "corr_matrix": None, "share": None, "steps": 0}
        k = len(self._corr_sum)
        corr = [
            [
                self._corr_sum[i][j] / self._corr_count[i][j] if self._corr_count[i][j] else None
                for j in range(k)
            ]
            for i in range(k)
        ]
        share = [s / n if n else None for s, n in zip(self._share_sum, self._share_count, strict=True)]
        return {"components": components, "corr_matrix": corr, "share": share, "steps": self.steps}


class MultiRewardGRPOTrainer(GRPOTrainer):
    """``GRPOTrainer`` whose advantages are ``method_fn(rewards[P,G,K], weights[K], **method_params)``.

    Extra keyword arguments: ``method_fn`` (a registered method), ``method_params`` (its resolved
    hyper-parameters) and ``diagnostics_every`` (compute the ``adv/...`` diagnostics every N
    generation batches; 1 = always). All other arguments go to ``GRPOTrainer``.
    """

    def __init__(
        self,
        *args: Any,
        method_fn: Callable[..., torch.Tensor],
        method_params: dict[str, Any] | None = None,
        diagnostics_every: int = 1,
        **kwargs: Any,
    ) -> None:
        self.method_fn = method_fn
        self.method_params = dict(method_params or {})
        self.diagnostics_every = max(1, diagnostics_every)
        self.diag_accumulator = DiagnosticsAccumulator()
        self._kept_rewards: torch.Tensor | None = None
        self._batches_scored = 0
        super().__init__(*args, **kwargs)

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):  # type: ignore[override]
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self._kept_rewards = rewards_per_func  # gathered over processes: [B_total, K]
        return rewards_per_func

    def _generate_and_score_completions(self, inputs):  # type: ignore[override]
        output = super()._generate_and_score_completions(inputs)
        if self._kept_rewards is None:  # pragma: no cover - TRL always scores before returning
            raise RuntimeError("TRL did not call _calculate_rewards; the advantage hook cannot apply")
        mode = "train" if self.model.training else "eval"
        group = self.num_generations if mode == "train" else self.num_generations_eval
        rewards = self._kept_rewards.detach().float().cpu()
        k = rewards.shape[1]
        grouped = rewards.view(-1, group, k)  # [P, G, K]
        weights = self.reward_weights.detach().float().cpu()
        advantages = self.method_fn(grouped, weights, **self.method_params).reshape(-1)  # [B_total]

        n_local = output["advantages"].shape[0]
        start = self.accelerator.process_index * n_local
        local = advantages[start : start + n_local]
        output["advantages"] = local.to(device=output["advantages"].device, dtype=output["advantages"].dtype)

        # TRL appended this batch's GRPO advantages to its completion log; show ours instead.
        logged = self._logs["advantages"]
        tail = min(len(logged), advantages.numel())
        values = advantages.tolist()[-tail:] if tail else []
        for offset, value in enumerate(values):
            logged[len(logged) - tail + offset] = value

        if self._batches_scored % self.diagnostics_every == 0:
            self._log_diagnostics(mode, grouped, weights, advantages.view(-1, group))
        self._batches_scored += 1
        self._kept_rewards = None
        return output

    def _log_diagnostics(
        self, mode: str, rewards: torch.Tensor, weights: torch.Tensor, adv: torch.Tensor
    ) -> None:
        diag = diagnostics(rewards, weights, adv)
        metrics = self._metrics[mode]
        for key in (
            "mean_offdiag_corr",
            "frac_zero_var_groups",
            "denominator_mean",
            "sign_flip_vs_grpo",
            "adv_abs_mean",
            "adv_std",
            "adv_max_abs",
        ):
            value = diag.get(key)
            if value is not None:
                metrics[f"adv/{key.removeprefix('adv_')}"].append(float(value))
        for name, share in zip(self.reward_func_names, diag.get("share") or [], strict=False):
            if share is not None:  # undefined when no group has any spread in the advantages
                metrics[f"adv/share/{name}"].append(float(share))
        if mode == "train":
            self.diag_accumulator.add(diag)
