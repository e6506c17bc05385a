"""Reward tensors: one scenario instance per seed, exact expected rewards, sampled rewards.

Shapes: ``S`` seeds, ``P`` prompts per seed, ``N`` candidate responses per prompt, ``G`` rollouts
per group, ``K`` components. Seeds are folded into the prompt axis (``B = S·P`` groups, seed-major)
so that per-group work is one batched call. All tensors are float64.

Randomness is drawn *per seed* from that seed's own generators, so seed ``s`` sees the same
reward table and the same random numbers whatever other seeds run beside it (a batch of 50 seeds
reproduces 50 single-seed runs) and every method of one run sees the same numbers (common
random numbers: method differences are not sampling luck). Two generators per seed: the
instance (``2·seed``) and the sampling stream (``2·seed + 1``), the stream drawn in chunks of
steps to bound memory.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from mrbench.lab.scenarios import Matrix, Scenario

F64 = torch.float64
STREAM_CHUNK = 50
"""Steps of random numbers drawn at once per seed (memory: CHUNK·P·G·K floats per seed)."""


def factor(matrix: Matrix | Tensor) -> Tensor:
    """``L`` with ``L Lᵀ = matrix`` for a PSD matrix (eigen-decomposition: singular ones allowed,
    e.g. an exact copy or an exact trade-off, where Cholesky fails)."""
    m = torch.as_tensor(matrix, dtype=F64)
    values, vectors = torch.linalg.eigh(m)
    return vectors * values.clamp_min(0.0).sqrt()


@dataclass(frozen=True)
class ComponentSpec:
    """The scenario's per-component parameters as ``[K]`` tensors (latent units unless noted)."""

    scale: Tensor
    weight: Tensor
    noise: Tensor
    mean: Tensor
    low: Tensor  # clip bound / scale
    high: Tensor
    binary: Tensor  # bool
    missing: Tensor
    unscorable: float  # probability that a whole rollout is NaN
    noise_factor: Tensor  # [K, K]: ε_raw @ noise_factorᵀ has covariance diag(noise)·noise_corr·diag(noise)

    @classmethod
    def of(cls, scenario: Scenario) -> ComponentSpec:
        scale = torch.tensor(scenario.scales, dtype=F64)
        noise = torch.tensor(scenario.noise, dtype=F64)
        noise_corr = scenario.noise_corr if scenario.noise_corr is not None else scenario.corr
        missing = scenario.missing or (0.0,) * scenario.k
        return cls(
            scale=scale,
            weight=torch.tensor(scenario.weights, dtype=F64),
            noise=noise,
            mean=torch.tensor(scenario.means, dtype=F64),
            low=torch.tensor(scenario.lows, dtype=F64) / scale,
            high=torch.tensor(scenario.highs, dtype=F64) / scale,
            binary=torch.tensor([kind == "binary" for kind in scenario.kinds]),
            missing=torch.tensor(missing, dtype=F64),
            unscorable=float(scenario.unscorable),
            noise_factor=noise.unsqueeze(1) * factor(noise_corr),
        )


def expected_reward(level: Tensor, spec: ComponentSpec) -> Tensor:
    """Exact expected reward ``[..., K]`` of responses with latent levels ``level [..., K]``.

    A sample is ``y = level + noise·ε`` with ε ~ N(0, 1) per component: a binary component pays
    ``scale·P(y > 0) = scale·Φ(level/noise)``; a continuous one pays
    ``scale·E[clip(y, low, high)]`` (the clipped-normal mean; ``scale·clip(level)`` at noise 0).
    """
    sigma = spec.noise
    noisy = sigma > 0
    safe_sigma = torch.where(noisy, sigma, 1.0)
    binary = torch.where(noisy, torch.special.ndtr(level / safe_sigma), (level > 0).to(F64))
    low, high = spec.low, spec.high
    alpha, beta = (low - level) / safe_sigma, (high - level) / safe_sigma
    cdf_a, cdf_b = torch.special.ndtr(alpha), torch.special.ndtr(beta)
    pdf_a = torch.exp(-0.5 * alpha.square()) / 2.5066282746310002  # sqrt(2π); 0 at ±inf
    pdf_b = torch.exp(-0.5 * beta.square()) / 2.5066282746310002
    tails = torch.where(low.isfinite(), low * cdf_a, 0.0) + torch.where(
        high.isfinite(), high * (1 - cdf_b), 0.0
    )
    clipped = tails + level * (cdf_b - cdf_a) + safe_sigma * (pdf_a - pdf_b)
    continuous = torch.where(noisy, clipped, torch.minimum(torch.maximum(level, low), high))
    return spec.scale * torch.where(spec.binary, binary, continuous)


@dataclass(frozen=True)
class Instance:
    """The per-seed reward tables of one run, seeds folded into groups (``B = S·P``).

    Attributes:
        seeds: the S seeds, in batch order.
        prompts: P.
        level: ``[B, N, K]`` latent level of every candidate response (the prompt's offset,
            ``prompt_spread · u``, included).
        expected: ``[B, N, K]`` its exact expected reward (reward units).
        features: ``[S, P, N, D]`` response features for the linear policy (the K latent levels
            centred on the component means, then ``scenario.features`` nuisance features).
        best, worst: ``[S, K]`` mean over prompts of the best / worst response's expected reward.
        best_total, worst_total: ``[S]`` the same for the weighted total Σ_k w_k E[r_k].
    """

    seeds: tuple[int, ...]
    prompts: int
    level: Tensor
    expected: Tensor
    features: Tensor
    best: Tensor
    worst: Tensor
    best_total: Tensor
    worst_total: Tensor


def draw_instance(scenario: Scenario, seeds: Sequence[int], spec: ComponentSpec) -> Instance:
    """Each seed's candidate responses, from generator ``2·seed``."""
    p, n, k = scenario.prompts, scenario.responses, scenario.k
    corr_factor = factor(scenario.corr)
    spread = torch.tensor(scenario.prompt_spread or (0.0,) * k, dtype=F64)
    z_all, nuisance_all, offset_all = [], [], []
    for seed in seeds:
        gen = torch.Generator().manual_seed(2 * int(seed))
        z_all.append(torch.randn(p, n, k, generator=gen, dtype=F64) @ corr_factor.T)
        nuisance_all.append(torch.randn(p, n, scenario.features, generator=gen, dtype=F64))
        if bool((spread > 0).any()):  # drawn last: a scenario without it keeps its numbers
            offset_all.append(spread * (torch.randn(p, 1, k, generator=gen, dtype=F64) @ corr_factor.T))
    z = torch.stack(z_all)  # [S, P, N, K]
    features = torch.cat([z, torch.stack(nuisance_all)], dim=-1)
    offset = torch.stack(offset_all) if offset_all else torch.zeros(1, dtype=F64)  # [S, P, 1, K]
    level = (spec.mean + offset + z).reshape(-1, n, k)
    expected = expected_reward(level, spec)  # [B, N, K]
    total = expected @ spec.weight  # [B, N]
    s = len(seeds)
    return Instance(
        seeds=tuple(int(x) for x in seeds),
        prompts=p,
        level=level,
        expected=expected,
        features=features,
        best=expected.amax(dim=1).reshape(s, p, k).mean(dim=1),
        worst=expected.amin(dim=1).reshape(s, p, k).mean(dim=1),
        best_total=total.amax(dim=1).reshape(s, p).mean(dim=1),
        worst_total=total.amin(dim=1).reshape(s, p).mean(dim=1),
    )


@dataclass(frozen=True)
class StepNoise:
    """Random numbers of one step: ``uniform [B, G]`` (which response), ``eps [B, G, K]`` (raw
    standard normals), ``missing [B, G, K]`` and ``unscorable [B, G]`` uniforms (None when the
    scenario has no missing values)."""

    uniform: Tensor
    eps: Tensor
    missing: Tensor | None
    unscorable: Tensor | None


class NoiseStream:
    """Per-seed sampling streams (generator ``2·seed + 1``), served one step at a time.

    ``copies`` > 1 serves ``copies`` identical copies of the seeds' numbers one after another
    (``[copies·S·P, ...]``): what a stream over the seeds repeated that often would draw, drawn once.
    """

    def __init__(self, scenario: Scenario, seeds: Sequence[int], copies: int = 1) -> None:
        self._gens = [torch.Generator().manual_seed(2 * int(seed) + 1) for seed in seeds]
        self._copies = copies
        self._shape = (scenario.prompts, scenario.group_size)
        self._k = scenario.k
        self._missing = any(m > 0 for m in scenario.missing)
        self._unscorable = scenario.unscorable > 0
        self._chunk: list[Tensor | None] = []
        self._next = 0
        self._size = 0

    def _draw(self, steps: int) -> None:
        p, g = self._shape
        parts: list[list[Tensor]] = [[], [], [], []]
        for gen in self._gens:
            parts[0].append(torch.rand(steps, p, g, generator=gen, dtype=F64))
            parts[1].append(torch.randn(steps, p, g, self._k, generator=gen, dtype=F64))
            if self._missing:
                parts[2].append(torch.rand(steps, p, g, self._k, generator=gen, dtype=F64))
            if self._unscorable:
                parts[3].append(torch.rand(steps, p, g, generator=gen, dtype=F64))
        # [steps, S, P, ...] → [steps, B, ...], then the copies along B
        chunk = [torch.stack(x, dim=1).flatten(1, 2) if x else None for x in parts]
        if self._copies > 1:
            chunk = [
                x.repeat(1, self._copies, *(1,) * (x.dim() - 2)) if x is not None else None for x in chunk
            ]
        self._chunk = chunk
        self._next, self._size = 0, steps

    def step(self) -> StepNoise:
        """The next step's random numbers."""
        if self._next == self._size:
            self._draw(STREAM_CHUNK)
        i = self._next
        self._next += 1
        u, eps, missing, unscorable = (x[i] if x is not None else None for x in self._chunk)
        assert u is not None and eps is not None  # always drawn
        return StepNoise(u, eps, missing, unscorable)


def sample_rewards(instance: Instance, actions: Tensor, noise: StepNoise, spec: ComponentSpec) -> Tensor:
    """Rewards ``[B, G, K]`` of the sampled responses ``actions [B, G]`` (indices into N).

    NaN marks a missing component or an unscorable rollout (every component NaN): the
    estimators' own NaN rules decide what happens to them.
    """
    k = instance.level.shape[-1]
    level = torch.gather(instance.level, 1, actions.unsqueeze(-1).expand(-1, -1, k))
    y = level + noise.eps @ spec.noise_factor.T
    rewards = spec.scale * torch.where(spec.binary, (y > 0).to(F64), torch.clamp(y, spec.low, spec.high))
    if noise.missing is not None:
        rewards = rewards.masked_fill(noise.missing < spec.missing, torch.nan)
    if noise.unscorable is not None:
        rewards = rewards.masked_fill((noise.unscorable < spec.unscorable).unsqueeze(-1), torch.nan)
    return rewards
