"""A lab scenario fitted to observed rewards: ``mrbench simulate --like SOURCE``.

The input is a :class:`~mrbench.core.rewards_record.RewardsRecord` (a cell's ``rewards.npz``, or rewards
sampled from a scenario by :func:`sample_rewards`): ``rewards [T, P, G, K]`` with prompt ids
``[T, P]`` and, for samples of a scenario, response ids ``[T, P, G]``. The lab's reward model
(:mod:`mrbench.lab.scenarios`) is a Gaussian latent per rollout and component,
``y = mean + spread · u + z + noise · ε`` (prompt offset ``u``, response level ``z`` with unit
variance, sampling noise ``ε``; ``u``, ``z`` and ``ε`` correlated across components by ``corr``)
seen through the component's kind (``scale · 1[y > 0]``, or ``clip(scale · y, low, high)``). The fit
reads every parameter of that model off the rewards of the run's first quarter of steps (the lab
starts from the uniform policy: the run's start is what it models), as a Gaussian copula:

1. **Kind and range**: a component whose values are 0 and one c > 0 is binary with scale c, and
   one of two other values a < b the binary ``{0, b − a}`` (a constant shift of a component changes
   no estimator's advantages and none of the lab's per-prompt normalised figures; the fit says so
   in a note); any other is continuous with its observed range as ``lows``/``highs``.
2. **Marginal**: a binary component's rate p gives ``mean = s · Φ⁻¹(p)``, where
   ``s² = spread² + 1 + noise²`` is its latent variance; a continuous one's latent normal
   ``N(μ, σ²)`` (reward units) is the least-squares line of its normal QQ plot, the mass at a
   bound entering as one point (censoring): ``scale = σ / s``, ``mean = μ / scale``.
3. **Normal scores**: each value becomes ``E[Z | its category]`` for a standard normal Z cut at
   the empirical CDF (ties are one category: a binary component has two). The covariance of two
   such scores is ``Σ_n ρⁿ d_n d'_n`` (Mehler's expansion over Hermite polynomials, ``d_n`` from
   the categories' cut points), so the latent correlation ρ behind any pair of scores is solved
   for exactly, however coarse the categories (tetrachoric for two binary components).
4. **Prompts and noise**: ρ between two rollouts of one prompt is ``spread² / s²`` for different
   responses and ``(spread² + 1) / s²`` for the same response. With response ids (samples of a
   scenario) both are measured, which gives ``s``, ``spread`` and ``noise``. A cell's completions
   are scored by a deterministic function of the completion, and nothing in its rewards tells a
   response's level from sampling noise, so there ``noise = 0`` and the pair correlation, less the
   1/N chance that the lab samples one of its N candidates twice, gives ``spread``.
5. **Correlations**: the latent correlation of two components in one rollout, ``corr_kl ·
   (spread_k spread_l + 1 + noise_k noise_l) / (s_k s_l)``, solved for ``corr_kl``; the matrix is
   moved to the nearest correlation matrix with eigenvalues ≥ 0.001
   (:func:`mrbench.lab.correlation.nearest_correlation`).
6. **Unscorable and missing**: the share of rollouts with every component NaN, and per component
   the share of the scorable ones where it alone is NaN.

Every number is rounded (4 significant digits, the correlations to the fewest decimals ≥ 3 that keep
them positive semi-definite) before the lab runs, so the YAML printed is exactly what ran.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from mrbench.core.errors import UserError
from mrbench.core.rewards_record import RewardsRecord
from mrbench.lab.correlation import nearest_correlation, printable_decimals
from mrbench.lab.scenarios import Scenario

FIT_FRACTION = 0.25
"""The share of a record's steps (from the first; at least one) the fit reads."""
CENSORED_MASS = 0.01
"""A bound that holds at least this share of a continuous component's values is a clip point."""
LIMIT = 10.0
"""Largest fitted ``noise`` and ``prompt_spread`` (latent units): beyond it, rewards are noise."""
HERMITE_TERMS = 300
"""Terms of Mehler's expansion used to turn score covariances into latent correlations."""
SERIES_REACH = 0.98
"""The expansion is used for |ρ| ≤ this (it converges slowly next to ±1); beyond, the covariance is
interpolated to its exact values at ρ = ±1."""
RHO_GRID = np.linspace(-SERIES_REACH, SERIES_REACH, 3921)
"""Where the expansion is evaluated to solve for a correlation (steps of 0.0005, then interpolated)."""
MAX_CATEGORIES = 256
"""A continuous component's values between its bounds are pooled into at most this many quantile bins
(each at its mean value) for the normal scores: the expansion is exact for any categories."""
SIGNIFICANT = 4
"""Significant digits of the fitted numbers."""


@dataclass(frozen=True)
class Fitted:
    """A fitted scenario and what it was fitted on: ``rollouts`` scored rollouts of the first
    ``steps`` of ``of_steps`` steps; ``notes``: one line per assumption the data could not check."""

    scenario: Scenario
    rollouts: int
    steps: int
    of_steps: int
    notes: tuple[str, ...]


# ------------------------------------------------------------------------------------ sampling


def sample_rewards(scenario: Scenario, steps: int, *, prompts: int, seed: int = 0) -> RewardsRecord:
    """Rewards of ``scenario`` under the uniform policy (where the lab starts): ``steps`` batches of
    ``prompts`` prompts × ``group_size`` rollouts, with the prompt and response ids, from the lab's
    own generator (:mod:`mrbench.lab.generator`, seed ``seed``)."""
    import torch

    from mrbench.lab.generator import ComponentSpec, NoiseStream, draw_instance
    from mrbench.lab.generator import sample_rewards as draw

    one = replace(scenario, prompts=prompts)
    spec = ComponentSpec.of(one)
    instance = draw_instance(one, [seed], spec)
    stream = NoiseStream(one, [seed])
    rewards, responses = [], []
    for _ in range(steps):
        noise = stream.step()
        actions = torch.clamp((noise.uniform * one.responses).long(), max=one.responses - 1)  # [P, G]
        rewards.append(draw(instance, actions, noise, spec).numpy())
        responses.append(actions.numpy())
    prompt_ids = np.tile(np.arange(prompts, dtype=np.int64), (steps, 1))
    return RewardsRecord(
        components=one.components,
        weights=one.weights,
        rewards=np.stack(rewards),
        prompt_ids=prompt_ids,
        group_ids=np.arange(steps * prompts, dtype=np.int64).reshape(steps, prompts),
        response_ids=np.stack(responses).astype(np.int64),
    )


# ------------------------------------------------------------------------------------ checks


def check_fittable(record: RewardsRecord, what: str) -> None:
    """:class:`UserError` naming ``what`` when ``record`` cannot be fitted: no rollouts, fewer than 2
    rollouts per group, every reward NaN, a component never scored or constant everywhere."""
    rewards = np.asarray(record.rewards, dtype=float)
    _, _, g, k = rewards.shape
    real = np.asarray(record.group_ids) >= 0
    if rewards.size == 0 or not real.any() or k == 0:
        raise UserError(f"{what} holds no rollouts (rewards of shape {list(rewards.shape)}): nothing to fit")
    if g < 2:
        raise UserError(
            f"{what} has {g} rollout per group: the fit needs at least 2 (a group's spread is what "
            "the estimators see); train with num_generations >= 2"
        )
    check_columns(rewards[real].reshape(-1, k), record.components, what)


def check_columns(x: np.ndarray, components: Sequence[str], what: str) -> None:
    """:class:`UserError` naming ``what`` when the rollouts ``x [n, K]`` are all NaN, or a component
    is never scored or constant."""
    if not np.isfinite(x).any():
        raise UserError(f"{what}: every reward is NaN (no rollout was scored): nothing to fit")
    for i, name in enumerate(components):
        column = x[:, i]
        finite = column[np.isfinite(column)]
        if finite.size == 0:
            raise UserError(f"{what}: component {name!r} was never scored (all NaN): nothing to fit it to")
        if np.unique(finite).size < 2:
            raise UserError(
                f"{what}: component {name!r} is {finite[0]:g} in every rollout: a constant component "
                "gives the lab nothing to fit (its rewards never differ)"
            )


# ------------------------------------------------------------------------------------ normal scores


def _ndtri(p: np.ndarray) -> np.ndarray:
    import torch

    return torch.special.ndtri(torch.as_tensor(p, dtype=torch.float64)).numpy()


def _pdf(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore"):
        return np.where(np.isfinite(x), np.exp(-0.5 * np.square(x)) / math.sqrt(2 * math.pi), 0.0)


@dataclass(frozen=True)
class Categories:
    """A component's distinct values ``values [C]`` (sorted), their shares ``mass [C]``, the normal
    cut points ``low, high [C]`` (``Φ⁻¹`` of the empirical CDF before and after each; ±inf at the
    ends), the normal scores ``score [C]`` (``E[Z | low < Z ≤ high]``) and the Hermite
    coefficients ``d [HERMITE_TERMS]`` of the score function (``d[n-1]`` for ``n = 1 …``)."""

    values: np.ndarray
    mass: np.ndarray
    low: np.ndarray
    high: np.ndarray
    score: np.ndarray
    d: np.ndarray
    edges: np.ndarray
    """Inner edges of the quantile bins (empty: every distinct value is its own category)."""
    means: np.ndarray
    """``[C]`` the mean value of each category (its value, but for a bin)."""

    @classmethod
    def of(cls, finite: np.ndarray) -> Categories:
        edges = _bin_edges(finite)
        values, counts = np.unique(_pool(finite, edges), return_counts=True)
        mass = counts / counts.sum()
        upper = np.cumsum(mass)
        lower = upper - mass
        low = np.where(lower <= 0, -np.inf, _ndtri(np.clip(lower, 0, 1)))
        high = np.where(upper >= 1 - 1e-12, np.inf, _ndtri(np.clip(upper, 0, 1)))
        score = (_pdf(low) - _pdf(high)) / mass
        pooled = _pool(finite, edges)
        means = np.array([finite[pooled == v].mean() for v in values]) if edges.size else values
        return cls(values, mass, low, high, score, _hermite(score, low, high), edges, means)

    def scores_of(self, x: np.ndarray) -> np.ndarray:
        """The normal score of every value of ``x`` (NaN stays NaN)."""
        out = np.full(x.shape, np.nan)
        finite = np.isfinite(x)
        pooled = _pool(x[finite], self.edges)
        out[finite] = self.score[np.searchsorted(self.values, pooled)]
        return out


def _bin_edges(finite: np.ndarray) -> np.ndarray:
    """Inner edges of at most :data:`MAX_CATEGORIES` quantile bins of the values strictly between the
    smallest and the largest (empty when there are few distinct values)."""
    lo, hi = finite.min(), finite.max()
    inner = np.unique(finite[(finite > lo) & (finite < hi)])
    if inner.size <= MAX_CATEGORIES:
        return np.empty(0)
    return np.unique(
        np.quantile(finite[(finite > lo) & (finite < hi)], np.linspace(0, 1, MAX_CATEGORIES + 1))
    )


def _pool(x: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """``x`` with each value strictly inside ``edges``' range replaced by a code of its bin (its bin's
    lower edge; the smallest and largest values stay): categories for the scores."""
    if edges.size == 0:
        return x
    inside = (x > edges[0]) & (x < edges[-1])
    bins = np.clip(np.searchsorted(edges, x, side="right") - 1, 0, edges.size - 2)
    return np.where(inside, edges[bins], x)


def _hermite(score: np.ndarray, low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """``d_n = E[s(Z) He_n(Z)] / sqrt(n!)``, n = 1 … HERMITE_TERMS, of the step function ``s`` that
    is ``score[c]`` on ``(low[c], high[c]]``: ``∫ He_n φ = [He_{n-1} φ]`` at the cut points."""
    edges = {"low": low, "high": high}
    # normalised Hermite polynomials h_n = He_n / sqrt(n!) times φ, at each cut point (0 at ±inf)
    hphi = {}
    for key, x in edges.items():
        finite = np.isfinite(x)
        xs = np.where(finite, x, 0.0)
        phi = _pdf(x)
        prev, cur = np.zeros_like(xs), np.where(finite, phi, 0.0)  # h_{-1} φ, h_0 φ
        rows = [cur]
        for n in range(HERMITE_TERMS - 1):
            prev, cur = cur, (xs * cur - math.sqrt(n) * prev) / math.sqrt(n + 1)
            rows.append(np.where(finite, cur, 0.0))
        hphi[key] = np.stack(rows)  # [HERMITE_TERMS, C]: h_{n-1} φ for n = 1 …
    n = np.arange(1, HERMITE_TERMS + 1)[:, None]
    return ((hphi["low"] - hphi["high"]) / np.sqrt(n) * score).sum(axis=1)


_POWERS = RHO_GRID[:, None] ** np.arange(1, HERMITE_TERMS + 1)  # [grid, HERMITE_TERMS]


def latent_correlation(cov: float, a: Categories, b: Categories) -> float:
    """The correlation ρ of two standard normals whose normal scores (``a``, ``b``) have covariance
    ``cov``: ``Σ_n ρⁿ d_n d'_n = cov``, which rises with ρ (both scores rise with their values),
    solved on a grid of [−1, 1] and interpolated; ±1 where ``cov`` is beyond what ρ = ±1 gives."""
    grid = np.concatenate([[-1.0], RHO_GRID, [1.0]])
    f = np.concatenate([[_at_one(a, b, -1)], _POWERS @ (a.d * b.d), [_at_one(a, b, 1)]])
    f = np.maximum.accumulate(f)  # rounding: the exact covariance rises with ρ
    if cov <= f[0]:
        return -1.0
    if cov >= f[-1]:
        return 1.0
    i = int(np.searchsorted(f, cov))
    f0, f1 = f[i - 1], f[i]
    w = 0.0 if f1 == f0 else (cov - f0) / (f1 - f0)
    return float(grid[i - 1] + w * (grid[i] - grid[i - 1]))


def _at_one(a: Categories, b: Categories, sign: int) -> float:
    """The scores' covariance at ρ = ``sign`` (±1): ``E[s_a(Z) s_b(±Z)]``, exactly, over the pieces
    of the real line that the two sets of cut points make."""
    b_low, b_high, b_score = (
        (b.low, b.high, b.score) if sign > 0 else (-b.high[::-1], -b.low[::-1], b.score[::-1])
    )
    cuts = np.unique(np.concatenate([a.low, a.high, b_low, b_high]))
    lo, hi = cuts[:-1], cuts[1:]
    mid = np.where(
        np.isfinite(lo) & np.isfinite(hi), (lo + hi) / 2, np.where(np.isfinite(lo), lo + 1, hi - 1)
    )
    mass = _cdf(hi) - _cdf(lo)
    ia = np.clip(np.searchsorted(a.high, mid), 0, a.score.size - 1)
    ib = np.clip(np.searchsorted(b_high, mid), 0, b_score.size - 1)
    return float(np.sum(mass * a.score[ia] * b_score[ib]))


def _cdf(x: np.ndarray) -> np.ndarray:
    import torch

    return torch.special.ndtr(torch.as_tensor(x, dtype=torch.float64)).numpy()


# ------------------------------------------------------------------------------------ pair moments


def _pair_mean(scores: np.ndarray, keys: np.ndarray) -> tuple[float, int]:
    """Mean product ``s_i s_j`` over ordered pairs i ≠ j with equal ``keys`` (NaN scores left out),
    and the number of such pairs."""
    ok = np.isfinite(scores)
    s, kk = scores[ok], keys[ok]
    if s.size == 0:
        return math.nan, 0
    _, inverse = np.unique(kk, return_inverse=True)
    sums = np.bincount(inverse, weights=s)
    squares = np.bincount(inverse, weights=s * s)
    counts = np.bincount(inverse).astype(float)
    pairs = float(np.sum(counts * (counts - 1)))
    if pairs == 0:
        return math.nan, 0
    return float(np.sum(sums * sums - squares) / pairs), int(pairs)


# ------------------------------------------------------------------------------------ the fit


def _sig(x: float) -> float:
    return float(f"{x:.{SIGNIFICANT}g}")


@dataclass(frozen=True)
class _Window:
    """The rollouts the fit reads: ``x [n, K]`` rewards, ``prompt [n]`` ids (a group whose prompt is
    not known is its own prompt), ``response [n]`` ids or None, from the first ``steps`` steps."""

    x: np.ndarray
    prompt: np.ndarray
    response: np.ndarray | None
    steps: int


def _window(record: RewardsRecord) -> _Window:
    rewards = np.asarray(record.rewards, dtype=float)
    t_all, _, g, k = rewards.shape
    steps = max(1, math.ceil(FIT_FRACTION * t_all))
    real = np.asarray(record.group_ids)[:steps] >= 0  # [steps, P]
    x = rewards[:steps][real].reshape(-1, k)
    prompt = np.repeat(np.asarray(record.prompt_ids)[:steps][real], g)
    group = np.repeat(np.asarray(record.group_ids)[:steps][real], g)
    response = None
    if record.response_ids is not None:
        response = np.asarray(record.response_ids)[:steps][real].reshape(-1)
    return _Window(x, np.where(prompt >= 0, prompt, -2 - group), response, steps)


def _sizes(w: _Window, cats: list[Categories], scores: np.ndarray) -> tuple[np.ndarray, ...]:
    """``(spread, noise, s)`` per component ``[K]`` from the pairs of rollouts of one prompt (step 4
    of the module docstring); ``s = sqrt(spread² + 1 + noise²)``."""
    k = len(cats)
    n_candidates = Scenario.__dataclass_fields__["responses"].default
    spread, noise = np.zeros(k), np.zeros(k)
    for i, c in enumerate(cats):
        if w.response is None:
            pair, _ = _pair_mean(scores[:, i], w.prompt)
            if math.isnan(pair):  # each prompt once: nothing says how prompts differ
                continue
            # the lab samples one of its N candidates twice with chance 1/N: those pairs are copies
            diff = (pair - float(np.sum(c.d**2)) / n_candidates) / (1 - 1 / n_candidates)
            rho = latent_correlation(diff, c, c)
            spread[i] = math.sqrt(min(LIMIT**2, max(0.0, rho) / max(1e-12, 1 - rho)))
            continue
        same, n_same = _pair_mean(scores[:, i], w.prompt * (w.response.max() + 1) + w.response)
        all_pairs, n_all = _pair_mean(scores[:, i], w.prompt)
        if n_same == 0 or n_all == n_same:
            continue
        diff = (all_pairs * n_all - same * n_same) / (n_all - n_same)
        rho_same = latent_correlation(same, c, c)
        rho_diff = max(0.0, latent_correlation(diff, c, c))
        s2 = 1.0 / max(rho_same - rho_diff, 1.0 / (1 + 2 * LIMIT**2))
        spread[i] = math.sqrt(min(LIMIT**2, rho_diff * s2))
        noise[i] = math.sqrt(min(LIMIT**2, max(0.0, s2 - 1 - spread[i] ** 2)))
    return spread, noise, np.sqrt(1 + spread**2 + noise**2)


def _marginal(c: Categories, s: float) -> tuple[str, float, float, float, float]:
    """``(kind, scale, mean, low, high)`` of one component whose latent sd is ``s`` (steps 1–2)."""
    values = c.values
    if values.size == 2:  # {0, b}; or {a, b}, fitted as {0, b − a} (see two_valued_note)
        return (
            "binary",
            float(values[1] - values[0]),
            s * float(_ndtri(np.array(c.mass[1]))),
            -math.inf,
            math.inf,
        )
    mu, sigma = _qq_line(c)
    scale = sigma / s
    return "continuous", scale, mu / scale, float(values[0]), float(values[-1])


def _correlations(
    cats: list[Categories], scores: np.ndarray, spread: np.ndarray, noise: np.ndarray, s: np.ndarray
) -> np.ndarray:
    """The ``[K, K]`` latent correlation of the responses' levels (step 5), rounded."""
    k = len(cats)
    corr = np.eye(k)
    both = np.isfinite(scores)
    for i in range(k):
        for j in range(i):
            ok = both[:, i] & both[:, j]
            if ok.sum() < 2:
                continue
            rho = latent_correlation(float(np.mean(scores[ok, i] * scores[ok, j])), cats[i], cats[j])
            shared = spread[i] * spread[j] + 1 + noise[i] * noise[j]
            corr[i, j] = corr[j, i] = float(np.clip(rho * s[i] * s[j] / shared, -1, 1))
    corr = nearest_correlation(corr)
    return np.round(corr, max(3, printable_decimals(corr, fewest=3)))


def fit_scenario(record: RewardsRecord, *, name: str, description: str = "", what: str = "") -> Fitted:
    """A :class:`Scenario` whose rewards look like ``record``'s (see the module docstring);
    :class:`UserError` naming ``what`` (default: ``name``) when it cannot be fitted."""
    what = what or name
    check_fittable(record, what)
    w = _window(record)
    k = w.x.shape[1]
    check_columns(w.x, record.components, f"{what} (its first {w.steps} steps)")
    scorable = ~np.isnan(w.x).all(axis=1)
    missing = [float(np.isnan(w.x[scorable, i]).mean()) for i in range(k)]
    cats = [Categories.of(w.x[:, i][np.isfinite(w.x[:, i])]) for i in range(k)]
    scores = np.stack([c.scores_of(w.x[:, i]) for i, c in enumerate(cats)], axis=1)  # [n, K]
    spread, noise, s = _sizes(w, cats, scores)
    kinds, scales, means, lows, highs = zip(*(_marginal(c, s[i]) for i, c in enumerate(cats)), strict=True)
    corr = _correlations(cats, scores, spread, noise, s)
    scenario = Scenario(
        name=name,
        description=description or f"Fitted to the rewards of {what}.",
        components=tuple(record.components),
        scales=tuple(_sig(v) for v in scales),
        weights=tuple(float(v) for v in record.weights),
        kinds=tuple(kinds),
        noise=tuple(_sig(v) for v in noise),
        means=tuple(_sig(v) for v in means),
        lows=tuple(v if not math.isfinite(v) else _sig(v) for v in lows),
        highs=tuple(v if not math.isfinite(v) else _sig(v) for v in highs),
        corr=tuple(tuple(float(v) for v in row) for row in corr),
        missing=tuple(round(min(v, 0.99), 4) for v in missing) if any(v > 0 for v in missing) else (),
        unscorable=round(min(1.0 - float(scorable.mean()), 0.99), 4),
        prompt_spread=tuple(_sig(v) for v in spread) if any(v > 0 for v in spread) else (),
        group_size=int(record.rewards.shape[2]),
    )
    notes = tuple(
        two_valued_note(name_, c.values)
        for name_, c in zip(record.components, cats, strict=True)
        if c.values.size == 2 and c.values[0] != 0
    )
    notes += () if w.response is not None else (NOISE_NOTE,)
    return Fitted(scenario, int(scorable.sum()), w.steps, int(record.rewards.shape[0]), notes)


def two_valued_note(component: str, values: np.ndarray) -> str:
    """Why a component of two values ``a < b`` with ``a ≠ 0`` is fitted as the binary ``{0, b − a}``:
    every estimator centres rewards within a group and the lab's metrics are normalised per prompt,
    so a constant shift of one component changes no advantage and no figure."""
    a, b = float(values[0]), float(values[1])
    return (
        f"{component}: two values, {a:g} and {b:g}: fitted as binary 0 / {b - a:g} "
        "(a constant shift changes no advantage)"
    )


NOISE_NOTE = (
    "noise 0: a completion's reward is a function of the completion; the rewards cannot tell a "
    "response's level from sampling noise"
)


def _qq_line(c: Categories) -> tuple[float, float]:
    """``(μ, σ)`` of a continuous component's latent normal (reward units): the least-squares line
    through its normal QQ plot, each distinct value at its normal score, and a bound holding at least
    :data:`CENSORED_MASS` of the values at its cut point instead (what was clipped lies beyond)."""
    z, v = list(c.score), list(c.means)
    if c.mass[0] >= CENSORED_MASS:
        z[0] = c.high[0]
    if c.mass[-1] >= CENSORED_MASS:
        z[-1] = c.low[-1]
    zz, vv = np.asarray(z), np.asarray(v)
    slope, intercept = np.polyfit(zz, vv, 1)
    if not slope > 0:  # pragma: no cover - distinct values in increasing order rise
        raise UserError("a continuous component's values do not rise with their rank: cannot fit it")
    return float(intercept), float(slope)


# ------------------------------------------------------------------------------------ YAML


def to_yaml(fitted: Fitted, source: str) -> str:
    """The fitted scenario as the YAML ``mrbench simulate --config`` reads, with a header saying what
    it was fitted on."""
    import yaml

    data: dict[str, Any] = fitted.scenario.to_dict()
    header = [
        f"# fitted by `mrbench simulate --like {source}` to {fitted.rollouts} scored rollouts",
        f"# (the first {fitted.steps} of {fitted.of_steps} steps; see docs/lab.md)",
        *(f"# {note}" for note in fitted.notes),
    ]
    body = yaml.safe_dump(data, sort_keys=False, default_flow_style=None, allow_unicode=True, width=100)
    return "\n".join(header) + "\n" + body


def parameters(scenario: Scenario) -> dict[str, Sequence[float] | float]:
    """The fitted parameters of ``scenario`` that a self-check compares (for tests and reports)."""
    k = scenario.k
    return {
        "scales": scenario.scales,
        "means": scenario.means,
        "noise": scenario.noise,
        "prompt_spread": scenario.prompt_spread or (0.0,) * k,
        "missing": scenario.missing or (0.0,) * k,
        "unscorable": scenario.unscorable,
    }
