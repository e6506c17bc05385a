"""The lab's preset scenarios, each isolating one phenomenon, and the paper's three component sets.

``scale``, ``redundant``, ``collapse`` and ``anti`` are minimal: two to four components, one
structural feature each. ``paper-code``, ``paper-tools`` and ``paper-security`` use the
components, reward ranges and weights of the three tasks (``mrbench tasks --json``, REFERENCE
"The paper's three domains") with correlations measured on real mrbench runs (the smoke sweep's
``diagnostics.json``, printed by ``python scripts/smoke_corr.py``: see ``scripts/smoke_corr.py``)
and starting levels taken from the committed smoke report.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from statistics import NormalDist

from mrbench.core.errors import UnknownNameError
from mrbench.lab.scenarios import Matrix, Scenario, identity

_STD_NORMAL = NormalDist()


def binary_mean(rate: float, noise: float) -> float:
    """Latent offset that makes a binary component pay out at ``rate`` under the uniform policy.

    A response's level is ``mean + z`` (z ~ N(0, 1)) and a sample adds ``noise · ε``, so a sample
    is positive with probability Φ(mean / sqrt(1 + noise²)).

    >>> round(binary_mean(0.5, 1.0), 6)
    0.0
    """
    return _STD_NORMAL.inv_cdf(rate) * math.sqrt(1.0 + noise * noise)


def _clipped_mean(mu: float, sigma: float, low: float, high: float) -> float:
    """E[clip(Y, low, high)] for Y ~ N(mu, sigma²)."""
    a, b = (low - mu) / sigma, (high - mu) / sigma
    cdf, pdf = _STD_NORMAL.cdf, _STD_NORMAL.pdf
    return low * cdf(a) + high * (1 - cdf(b)) + mu * (cdf(b) - cdf(a)) + sigma * (pdf(a) - pdf(b))


def continuous_mean(level: float, scale: float, low: float, high: float, noise: float) -> float:
    """Latent offset that makes a clipped continuous component average ``level`` (reward units)
    under the uniform policy (bisection on the exact clipped-normal mean).

    >>> round(continuous_mean(0.5, 1.0, 0.0, 1.0, 1.0), 6)
    0.5
    """
    sigma = math.sqrt(1.0 + noise * noise)
    lo, hi = -50.0, 50.0
    for _ in range(200):
        mid = (lo + hi) / 2
        if scale * _clipped_mean(mid, sigma, low / scale, high / scale) < level:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def _full(rows: Sequence[Sequence[float]]) -> Matrix:
    """A symmetric matrix from its lower triangle rows (diagonal included)."""
    k = len(rows)
    return tuple(tuple(float(rows[max(i, j)][min(i, j)]) for j in range(k)) for i in range(k))


# ------------------------------------------------------------------------------------ phenomena


def scale() -> Scenario:
    """A 10× component drowns a 1× one under GRPO.

    Two independent continuous components of equal weight, ``big`` in units of 10 and ``small``
    in units of 1. GRPO's total is ~10·big, so its group std and its ordering are big's: small's
    signal is mostly noise in the advantage and small ends near where big's optimum leaves it.
    GDPO z-scores each component first, so both count; Dr. GRPO and CorrGRPO keep the reward
    units (their steps are also 10× larger).
    """
    return Scenario(
        name="scale",
        description="A 10× component drowns a 1× one under GRPO; per-component z-scores (GDPO) keep both.",
        components=("big", "small"),
        scales=(10.0, 1.0),
        weights=(1.0, 1.0),
        kinds=("continuous", "continuous"),
        noise=(1.0, 1.0),
        means=(0.0, 0.0),
        lows=(-math.inf, -math.inf),
        highs=(math.inf, math.inf),
        corr=identity(2),
    )


def redundant() -> Scenario:
    """Three near-copies of one signal and one independent signal.

    ``copy1..copy3`` share a latent level (correlation 0.95, noise included), ``other`` is
    independent; all four have unit scale and weight. Every estimator's numerator is a weighted
    sum, so the copied signal counts three times against ``other``'s once; CorrGRPO divides by
    sqrt(Σρ) ≈ sqrt(9 + 1) instead of GRPO's std, changing the step size, not the direction.
    """
    copies = 0.95
    corr = _full([[1], [copies, 1], [copies, copies, 1], [0, 0, 0, 1]])
    return Scenario(
        name="redundant",
        description="Three near-copies of one signal outvote one independent signal under every estimator.",
        components=("copy1", "copy2", "copy3", "other"),
        scales=(1.0,) * 4,
        weights=(1.0,) * 4,
        kinds=("continuous",) * 4,
        noise=(1.0,) * 4,
        means=(0.0,) * 4,
        lows=(-math.inf,) * 4,
        highs=(math.inf,) * 4,
        corr=corr,
    )


def collapse() -> Scenario:
    """Binary components whose distinct combinations GRPO maps to one advantage.

    ``easy``, ``mid`` and ``hard`` pay 1 or 0 at base rates 0.8, 0.5 and 0.15 (independent). In
    a group, rollouts with rewards (1, 0, 0) and (0, 0, 1) have the same total, so GRPO gives
    them the same advantage although the ``hard`` success is rare; GDPO z-scores each component
    in the group, so the rare success counts more and the two get different advantages. The
    advantage resolution (distinct advantages per distinct reward vector) measures it.
    """
    noise = 1.0
    rates = (0.8, 0.5, 0.15)
    return Scenario(
        name="collapse",
        description="Binary components: GRPO gives distinct combinations with equal totals one advantage.",
        components=("easy", "mid", "hard"),
        scales=(1.0,) * 3,
        weights=(1.0,) * 3,
        kinds=("binary",) * 3,
        noise=(noise,) * 3,
        means=tuple(binary_mean(r, noise) for r in rates),
        lows=(-math.inf,) * 3,
        highs=(math.inf,) * 3,
        corr=identity(3),
    )


def anti() -> Scenario:
    """Anti-correlated components: CorrGRPO's denominator vanishes.

    ``a`` and ``b`` are one axis seen from both ends (b = −a in every sample: correlation −1 of
    levels and noise), weighted 2 : 1 so the total is ``a``. Σ_kl ρ_kl = 1 + 1 − 2 = 0 in every
    group, so faithful CorrGRPO divides by sqrt(ε) = 1e-3: advantages 1000× GRPO's scale, one
    update makes the policy nearly deterministic on whichever response won its first noisy
    group. ``corrgrpo-guarded`` floors Σρ at 1 and behaves like Dr. GRPO.
    """
    return Scenario(
        name="anti",
        description=(
            "Exactly anti-correlated components: CorrGRPO's Σρ → 0 and its advantages blow up; "
            "the guard bounds them."
        ),
        components=("a", "b"),
        scales=(1.0, 1.0),
        weights=(2.0, 1.0),
        kinds=("continuous", "continuous"),
        noise=(1.0, 1.0),
        means=(0.0, 0.0),
        lows=(-math.inf, -math.inf),
        highs=(math.inf, math.inf),
        corr=_full([[1], [-1, 1]]),
    )


# ---------------------------------------------------------------------------------------- paper

# Within-group reward correlations of the smoke runs (grpo, gdpo, corrgrpo on the tiny model): each
# run's diagnostics.json corr_matrix (mean over training), per method the mean over its runs, then the
# mean over the three methods. Printed in this form, from the store the smoke sweep wrote, by
# `python scripts/smoke_corr.py [--sweep smoke] [--tracking-uri URI]`; rerun it after the smoke sweep
# is regenerated and paste what it prints. Code generation's mean sits on the edge of the positive
# semi-definite cone (syntax and compile are exact copies in those runs), so the command moved it to the
# nearest correlation matrix with eigenvalues >= 0.001 (entries changed by at most 0.001) and printed it
# with 3 decimals, the fewest that keep it positive semi-definite.
CODE_CORR_6 = (
    (1.000, 0.252, 0.252, 0.452, 0.349, 0.273),
    (0.252, 1.000, 0.999, 0.743, 0.795, 0.996),
    (0.252, 0.999, 1.000, 0.743, 0.795, 0.996),
    (0.452, 0.743, 0.743, 1.000, 0.938, 0.750),
    (0.349, 0.795, 0.795, 0.938, 1.000, 0.820),
    (0.273, 0.996, 0.996, 0.750, 0.820, 1.000),
)
TOOLS_CORR = (
    (1.00, 0.95, 0.92, 0.44),
    (0.95, 1.00, 0.96, 0.45),
    (0.92, 0.96, 1.00, 0.47),
    (0.44, 0.45, 0.47, 1.00),
)
SECURITY_CORR = ((1.00, 0.69), (0.69, 1.00))
EFFICIENCY_LOADING = 0.5
"""Efficiency's latent level is 0.5·accuracy's plus independent variation (see paper_code)."""


def paper_code() -> Scenario:
    """The code-generation task's seven components (each in [0, 1], weights 1).

    Correlations: one smoke sweep's within-group correlations (``CODE_CORR_6``, printed from its
    runs' ``diagnostics.json`` by ``python scripts/smoke_corr.py``; the numbers of its report's
    heatmaps ``corr-code-generation.png``, averaged over the three methods), fixed since: they
    define the scenario, and a smoke sweep on another CPU gives nearby ones.
    syntax, compile and ast_similarity are near-copies (0.996–0.999: Python compiles what it
    parses, and the AST exists exactly then); runtime and accuracy are a second pair (0.94).
    Efficiency almost never varied within a group in those runs (its correlations are undefined
    but for format's; left out of ``CODE_CORR_6`` by the command); by its definition (it counts
    only when the tests pass) its latent level here is 0.5·accuracy's plus independent variation,
    so its correlation with each component is half accuracy's. Levels under the uniform policy:
    the grpo run's first-10 %-of-training values in that sweep's ``report.md`` (format 0.48,
    syntax/compile 0.96, runtime 0.78, accuracy 0.75, ast_similarity 0.96) and efficiency 0.05.
    """
    names = ("format", "syntax", "compile", "runtime", "accuracy", "ast_similarity", "efficiency")
    kinds = ("binary",) * 5 + ("continuous",) * 2
    noise = 1.0
    levels = (0.48, 0.96, 0.96, 0.78, 0.75, 0.96, 0.05)
    means = tuple(
        binary_mean(lv, noise) if kind == "binary" else continuous_mean(lv, 1.0, 0.0, 1.0, noise)
        for lv, kind in zip(levels, kinds, strict=True)
    )
    acc = names.index("accuracy")
    eff_row = [EFFICIENCY_LOADING * CODE_CORR_6[acc][j] for j in range(6)]
    corr = (*((*row, eff_row[i]) for i, row in enumerate(CODE_CORR_6)), (*eff_row, 1.0))
    return Scenario(
        name="paper-code",
        description=(
            "Code generation: seven [0, 1] components, syntax/compile/AST near-copies, "
            "correlations from the smoke runs."
        ),
        components=names,
        scales=(1.0,) * 7,
        weights=(1.0,) * 7,
        kinds=kinds,
        noise=(noise,) * 7,
        means=means,
        lows=(0.0,) * 7,
        highs=(1.0,) * 7,
        corr=corr,
    )


def paper_tools() -> Scenario:
    """The tool-calling task's four components: format {0, 1}, function_name [−0.5, 0.5],
    parameter [−1, 1], values [−1.5, 1.5] (weights 1; total in [−3, 4]).

    Correlations: the same smoke sweep's within-group correlations (``TOOLS_CORR``, printed from
    its runs' ``diagnostics.json`` by ``python scripts/smoke_corr.py``; drawn in its report as
    ``corr-tool-calling.png``), fixed since: format, function_name and parameter move together
    (0.92–0.96), values half as much (0.44–0.47). Levels under the uniform policy: the tiny
    model's evaluation levels in that sweep's ``report.md`` (mean of the three methods: format
    0.96, function_name 0.29, parameter 0.58, values −0.52).
    """
    names = ("format", "function_name", "parameter", "values")
    kinds = ("binary", "continuous", "continuous", "continuous")
    half_ranges = (1.0, 0.5, 1.0, 1.5)
    levels = (0.96, 0.29, 0.58, -0.52)
    noise = 1.0
    means = (
        binary_mean(levels[0], noise),
        *(continuous_mean(lv, h, -h, h, noise) for lv, h in zip(levels[1:], half_ranges[1:], strict=True)),
    )
    return Scenario(
        name="paper-tools",
        description=(
            "Tool calling: format {0, 1} and three correctness components of ranges ±0.5, ±1, ±1.5, "
            "correlations from the smoke runs."
        ),
        components=names,
        scales=half_ranges,
        weights=(1.0,) * 4,
        kinds=kinds,
        noise=(noise,) * 4,
        means=means,
        lows=(0.0, -0.5, -1.0, -1.5),
        highs=(1.0, 0.5, 1.0, 1.5),
        corr=TOOLS_CORR,
    )


def paper_security() -> Scenario:
    """The agent-security task's two binary components, utility and safety (weights 1).

    Correlation 0.69: the same smoke sweep's within-group correlation (``SECURITY_CORR``, printed
    from its runs' ``diagnostics.json`` by ``python scripts/smoke_corr.py``; drawn in its report as
    ``corr-agent-security.png``), fixed since. Levels under the uniform policy: the tiny model's
    evaluation in that sweep's ``report.md`` (utility 0.155, safety = 1 − ASR ≈ 0.98): safety is
    rarely violated, so its rare failures are what GDPO's per-component z-score amplifies.
    """
    noise = 1.0
    levels = (0.155, 0.98)
    return Scenario(
        name="paper-security",
        description=(
            "Agent security: binary utility and safety, safety rarely violated, "
            "correlation from the smoke runs."
        ),
        components=("utility", "safety"),
        scales=(1.0, 1.0),
        weights=(1.0, 1.0),
        kinds=("binary", "binary"),
        noise=(noise, noise),
        means=tuple(binary_mean(lv, noise) for lv in levels),
        lows=(-math.inf, -math.inf),
        highs=(math.inf, math.inf),
        corr=SECURITY_CORR,
    )


KEY_SCORES: dict[str, str] = {
    "scale": "final/small",
    "redundant": "final/other",
    "collapse": "resolution",
    "anti": "max_abs_adv",
    "paper-code": "max_abs_adv",
    "paper-tools": "final/function_name",
    "paper-security": "steps_to_90",
}
"""Preset → the score (:func:`mrbench.lab.metrics.seed_scores`) whose numbers show its phenomenon;
the sweep report's lab table shows it beside the objective. Other scenarios: ``objective``."""

PRESETS: dict[str, Callable[[], Scenario]] = {
    "scale": scale,
    "redundant": redundant,
    "collapse": collapse,
    "anti": anti,
    "paper-code": paper_code,
    "paper-tools": paper_tools,
    "paper-security": paper_security,
}
"""Preset name → factory (scenarios are built on use: no work at import time)."""


def get_scenario(name: str) -> Scenario:
    """The preset called ``name``; :class:`UnknownNameError` with suggestions otherwise."""
    factory = PRESETS.get(name)
    if factory is None:
        raise UnknownNameError("scenario", name, list(PRESETS))
    return factory()
