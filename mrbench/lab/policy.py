"""Softmax policies over candidate responses and their exact policy gradient.

Shapes as in :mod:`mrbench.lab.generator`: ``B = S·P`` groups (seed-major), ``N`` responses,
``G`` rollouts per group. The gradient is written out rather than taken by autograd: for a
softmax, ∂ log π(a) / ∂ logits = onehot(a) − π, so a batch's surrogate gradient with respect to
the logits is one ``scatter_add`` and one product — no graph, no per-seed work.
"""

from __future__ import annotations

import torch
from torch import Tensor

from mrbench.lab.generator import F64


class SoftmaxPolicy:
    """``tabular``: free logits ``[B, N]`` per prompt. ``linear``: ``logits = φ · W_s`` with one
    weight vector ``W_s [D]`` per seed over the response features ``φ [S, P, N, D]``, shared by
    the seed's prompts. Starts uniform (all parameters 0); plain gradient ascent with ``lr``.
    """

    def __init__(
        self, kind: str, *, seeds: int, prompts: int, responses: int, features: Tensor, lr: float
    ) -> None:
        self.kind = kind
        self.lr = lr
        self._s, self._p, self._n = seeds, prompts, responses
        if kind == "tabular":
            self.theta = torch.zeros(seeds * prompts, responses, dtype=F64)
        elif kind == "linear":
            self.features = features  # [S, P, N, D]
            self.theta = torch.zeros(seeds, features.shape[-1], dtype=F64)
        else:
            raise ValueError(f"unknown policy kind {kind!r}")

    def logits(self) -> Tensor:
        """``[B, N]``."""
        if self.kind == "tabular":
            return self.theta
        return torch.einsum("spnd,sd->spn", self.features, self.theta).reshape(-1, self._n)

    def probs(self) -> Tensor:
        """π ``[B, N]``."""
        return torch.softmax(self.logits(), dim=-1)

    def ascend(self, grad_logits: Tensor) -> None:
        """One gradient-ascent step given the objective's gradient w.r.t. the logits ``[B, N]``
        (tabular: per prompt; linear: chained through the features, mean over the prompts)."""
        if self.kind == "tabular":
            self.theta.add_(grad_logits, alpha=self.lr)
        else:
            grad = torch.einsum("spn,spnd->sd", grad_logits.reshape(self._s, self._p, self._n), self.features)
            self.theta.add_(grad, alpha=self.lr / self._p)


def sample_actions(probs: Tensor, uniform: Tensor) -> Tensor:
    """Responses ``[B, G]`` drawn from ``probs [B, N]`` by inverting the CDF at ``uniform [B, G]``."""
    cdf = probs.cumsum(dim=-1)
    return torch.searchsorted(cdf, uniform, right=True).clamp_max_(probs.shape[-1] - 1)


def logit_gradient(actions: Tensor, coef: Tensor, probs: Tensor) -> Tensor:
    """∂/∂logits of ``(1/G) Σ_g coef_g · log π(a_g)`` (coef held fixed): ``[B, N]``.

    ``Σ_g coef_g (onehot(a_g) − π) / G`` — the REINFORCE / GRPO surrogate with advantages
    ``coef [B, G]`` (times importance ratios in later PPO epochs).
    """
    grad = torch.zeros_like(probs).scatter_add_(1, actions, coef)
    grad.sub_(coef.sum(dim=1, keepdim=True) * probs)
    return grad.div_(actions.shape[1])


def update(
    policy: SoftmaxPolicy,
    actions: Tensor,
    advantages: Tensor,
    old_probs: Tensor,
    *,
    epochs: int,
    clip: float | None,
) -> None:
    """``epochs`` gradient steps on one sampled batch (PPO-style).

    The first step is the plain policy gradient (ratio 1). Later steps weight each rollout by
    its ratio r = π(a)/π_old(a); with ``clip`` ε, a rollout whose ratio already left
    [1 − ε, 1 + ε] in its advantage's direction contributes no gradient (the clipped branch of
    min(r·A, clip(r)·A) is constant).
    """
    old_taken = old_probs.gather(1, actions)
    probs = old_probs
    for epoch in range(epochs):
        if epoch == 0:
            coef = advantages
        else:
            probs = policy.probs()
            ratio = probs.gather(1, actions) / old_taken
            coef = advantages * ratio
            if clip is not None:
                clipped = ((advantages > 0) & (ratio > 1 + clip)) | ((advantages < 0) & (ratio < 1 - clip))
                coef = coef.masked_fill(clipped, 0.0)
        policy.ascend(logit_gradient(actions, coef, probs))
