"""What a lab scenario is: the reward generator's parameters and the training settings, validated.

A scenario describes ``K`` reward components by parallel lists (one entry per component) and a
``K × K`` correlation matrix, plus how the simulated policy is trained. Every check names the bad
value; a :class:`~mrbench.core.errors.UserError` (exit code 2 on the command line) otherwise.

The reward model (see :mod:`mrbench.lab.generator`): every prompt has ``responses`` candidate
responses; response ``j`` of component ``k`` has a latent level ``μ_jk = means[k] + z_jk`` with
``z_j ~ N(0, corr)`` (what the response deserves); one sampled reward is
``y = μ_jk + noise[k] · ε_k`` with ``ε ~ N(0, noise_corr)``, turned into reward units by the
component's kind: ``continuous`` → ``clip(scales[k] · y, lows[k], highs[k])``, ``binary`` →
``scales[k] · 1[y > 0]``. Anti-correlated entries of ``corr`` are trade-offs between components
(a response good at one is bad at the other); entries near 1 are redundant copies.

YAML (``mrbench simulate --config FILE``, read by :mod:`mrbench.lab.config`) uses the field names
below; ``base: <preset>`` starts from a preset, per-component lists may be given as one scalar for
every component, and ``method_params: {method: {param: value}}`` sets estimator
hyper-parameters::

    base: scale
    name: scale-3x
    scales: [3, 1]
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from mrbench.core.errors import UserError

KINDS = ("continuous", "binary")
POLICIES = ("tabular", "linear")
PSD_TOLERANCE = 1e-8
"""Smallest eigenvalue accepted for a correlation matrix (rounding noise below 0 is not a defect)."""

Matrix = tuple[tuple[float, ...], ...]
PER_COMPONENT = ("scales", "weights", "kinds", "noise", "means", "lows", "highs", "missing", "prompt_spread")
OPTIONAL_PER_COMPONENT = ("missing", "prompt_spread")
"""Per-component lists that may be empty (every component 0)."""


@dataclass(frozen=True)
class Scenario:
    """A reward generator and training settings for ``mrbench simulate`` (validated on creation)."""

    name: str
    """Scenario name (the MLflow experiment is ``lab-<name>``)."""
    description: str
    """One paragraph: the phenomenon the scenario isolates."""
    components: tuple[str, ...]
    """Names of the K reward components."""
    scales: tuple[float, ...]
    """Reward units per latent unit (> 0); a binary component pays ``scale`` or 0."""
    weights: tuple[float, ...]
    """Weights ``w_k`` of the estimators' weighted total and of the objective."""
    kinds: tuple[str, ...]
    """``continuous`` or ``binary`` per component."""
    noise: tuple[float, ...]
    """Latent standard deviation of one sampled reward around its response's level (≥ 0)."""
    means: tuple[float, ...]
    """Latent offset of every response's level (shifts base rates and levels)."""
    lows: tuple[float, ...]
    """Lower clip of continuous rewards in reward units (``-inf``: none)."""
    highs: tuple[float, ...]
    """Upper clip of continuous rewards in reward units (``inf``: none)."""
    corr: Matrix
    """``K × K`` correlation of the responses' latent levels: copies, independence, trade-offs."""
    noise_corr: Matrix | None = None
    """``K × K`` correlation of the sampling noise; None: the same as ``corr``."""
    missing: tuple[float, ...] = ()
    """Probability that one sampled component is NaN (unscorable value); () means all 0."""
    prompt_spread: tuple[float, ...] = ()
    """How much prompts differ, per component: every prompt's responses share a latent offset
    ``prompt_spread[k] · u_k`` with ``u ~ N(0, corr)`` (hard and easy prompts); () means all 0."""
    unscorable: float = 0.0
    """Probability that a whole sampled rollout is NaN (left out by the estimators' NaN rules)."""
    prompts: int = 8
    """Prompts per seed (one group of ``group_size`` rollouts each per step)."""
    responses: int = 16
    """Candidate responses per prompt."""
    group_size: int = 8
    """Rollouts sampled per prompt per step (G)."""
    steps: int = 200
    """Policy-gradient updates."""
    lr: float = 0.5
    """Learning rate of plain gradient ascent on the policy's parameters."""
    policy: str = "tabular"
    """``tabular``: a softmax over responses per prompt; ``linear``: one linear softmax policy
    over response features shared by all prompts (prompts generalise to each other)."""
    features: int = 4
    """Nuisance features beside the K latent levels in the linear policy's feature vector."""
    ppo_epochs: int = 1
    """Updates per sampled batch; beyond the first, importance ratios π/π_old weight the gradient."""
    ppo_clip: float | None = None
    """PPO clip ε (no gradient where the ratio left [1 − ε, 1 + ε] in the advantage's direction)."""
    method_params: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """Estimator hyper-parameters per method name (defaults otherwise)."""

    def __post_init__(self) -> None:
        _validate(self)

    @property
    def k(self) -> int:
        """Number of reward components."""
        return len(self.components)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON/YAML-ready values (``inf`` bounds as strings ``"inf"``/``"-inf"``)."""
        data = {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}
        for key in ("lows", "highs"):
            data[key] = [v if math.isfinite(v) else str(v) for v in data[key]]
        data["corr"] = [list(row) for row in self.corr]
        if self.noise_corr is not None:
            data["noise_corr"] = [list(row) for row in self.noise_corr]
        data["method_params"] = {m: dict(p) for m, p in self.method_params.items()}
        if not self.prompt_spread:  # as before the field existed: the same lab.* params and sweep keys
            del data["prompt_spread"]
        return data


def _fail(scenario: str, message: str) -> UserError:
    return UserError(f"scenario {scenario!r}: {message}")


def _check_matrix(name: str, label: str, matrix: Matrix, k: int, components: Sequence[str]) -> None:
    import numpy as np

    if len(matrix) != k or any(len(row) != k for row in matrix):
        shape = f"{len(matrix)}×{'/'.join(sorted({str(len(r)) for r in matrix})) or 0}"
        raise _fail(
            name, f"{label} must be {k}×{k} to match the {k} components {list(components)}, got {shape}"
        )
    arr = np.asarray(matrix, dtype=float)
    if not np.isfinite(arr).all():
        raise _fail(name, f"{label} must be finite, got {arr.tolist()}")
    for i in range(k):
        if abs(arr[i, i] - 1.0) > 1e-9:
            raise _fail(name, f"{label}[{i}][{i}] ({components[i]!r}) must be 1, got {arr[i, i]}")
        for j in range(k):
            if abs(arr[i, j] - arr[j, i]) > 1e-9:
                raise _fail(
                    name, f"{label} must be symmetric: [{i}][{j}]={arr[i, j]} but [{j}][{i}]={arr[j, i]}"
                )
            if abs(arr[i, j]) > 1.0:
                raise _fail(name, f"{label}[{i}][{j}] must be in [-1, 1], got {arr[i, j]}")
    smallest = float(np.linalg.eigvalsh(arr).min())
    if smallest < -PSD_TOLERANCE:
        raise _fail(
            name,
            f"{label} is not positive semi-definite (smallest eigenvalue {smallest:.3g}); "
            f"no set of components can have these correlations: {arr.tolist()}",
        )


def _validate(s: Scenario) -> None:
    """Raise a :class:`UserError` naming the first bad value of ``s`` (checks in field order)."""
    name = s.name
    if not name or not isinstance(name, str):
        raise UserError(f"a scenario needs a non-empty name, got {name!r}")
    _check_shape(s)
    _check_component_values(s)
    _check_rates(s)
    _check_matrix(name, "corr", s.corr, len(s.components), s.components)
    if s.noise_corr is not None:
        _check_matrix(name, "noise_corr", s.noise_corr, len(s.components), s.components)
    _check_training(s)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float)


def _check_shape(s: Scenario) -> None:
    """Component names distinct and non-empty; one entry per component in every per-component list
    (``missing`` may also be empty)."""
    name, k = s.name, len(s.components)
    if k == 0:
        raise _fail(name, "needs at least one reward component")
    if len(set(s.components)) != k or not all(isinstance(c, str) and c for c in s.components):
        raise _fail(name, f"component names must be distinct non-empty strings, got {list(s.components)}")
    for key in PER_COMPONENT:
        values = getattr(s, key)
        if key in OPTIONAL_PER_COMPONENT and len(values) == 0:
            continue
        if len(values) != k:
            raise _fail(
                name,
                f"{key} has {len(values)} entries {list(values)} "
                f"but there are {k} components {list(s.components)}",
            )


def _check_component_values(s: Scenario) -> None:
    """Scales > 0, finite weights and means, known kinds, noise >= 0, numeric bounds with low < high."""
    name = s.name
    for comp, scale in zip(s.components, s.scales, strict=True):
        if not (_is_number(scale) and math.isfinite(scale) and scale > 0):
            raise _fail(name, f"scale of component {comp!r} must be a finite number > 0, got {scale!r}")
    for key in ("weights", "means"):
        for comp, value in zip(s.components, getattr(s, key), strict=True):
            if not (_is_number(value) and math.isfinite(value)):
                raise _fail(name, f"{key[:-1]} of component {comp!r} must be a finite number, got {value!r}")
    for comp, kind in zip(s.components, s.kinds, strict=True):
        if kind not in KINDS:
            raise _fail(name, f"kind of component {comp!r} must be one of {', '.join(KINDS)}, got {kind!r}")
    for comp, sigma in zip(s.components, s.noise, strict=True):
        if not (_is_number(sigma) and math.isfinite(sigma) and sigma >= 0):
            raise _fail(name, f"noise of component {comp!r} must be a finite number >= 0, got {sigma!r}")
    for comp, spread in zip(s.components, s.prompt_spread, strict=False):
        if not (_is_number(spread) and math.isfinite(spread) and spread >= 0):
            raise _fail(
                name, f"prompt_spread of component {comp!r} must be a finite number >= 0, got {spread!r}"
            )
    for comp, low, high in zip(s.components, s.lows, s.highs, strict=True):
        if not (_is_number(low) and _is_number(high)) or math.isnan(low) or math.isnan(high):
            raise _fail(name, f"bounds of component {comp!r} must be numbers, got low={low!r} high={high!r}")
        if not low < high:
            raise _fail(name, f"component {comp!r} needs low < high, got low={low} high={high}")


def _check_rates(s: Scenario) -> None:
    """Missing rates per component and the unscorable rate in [0, 1)."""
    for comp, rate in zip(s.components, s.missing, strict=False):
        if not (_is_number(rate) and 0.0 <= rate < 1.0):
            raise _fail(s.name, f"missing rate of component {comp!r} must be in [0, 1), got {rate!r}")
    if not (_is_number(s.unscorable) and 0.0 <= s.unscorable < 1.0):
        raise _fail(s.name, f"unscorable must be in [0, 1), got {s.unscorable!r}")


def _check_training(s: Scenario) -> None:
    """Sizes, features, learning rate, policy, PPO clip and method parameters."""
    name = s.name
    for key, least in (("prompts", 1), ("responses", 2), ("group_size", 2), ("steps", 1), ("ppo_epochs", 1)):
        value = getattr(s, key)
        if not isinstance(value, int) or isinstance(value, bool) or value < least:
            raise _fail(name, f"{key} must be an integer >= {least}, got {value!r}")
    if not isinstance(s.features, int) or s.features < 0:
        raise _fail(name, f"features must be an integer >= 0, got {s.features!r}")
    if not (_is_number(s.lr) and math.isfinite(s.lr) and s.lr > 0):
        raise _fail(name, f"lr must be a finite number > 0, got {s.lr!r}")
    if s.policy not in POLICIES:
        raise _fail(name, f"policy must be one of {', '.join(POLICIES)}, got {s.policy!r}")
    if s.ppo_clip is not None and not (_is_number(s.ppo_clip) and 0 < s.ppo_clip < 1):
        raise _fail(name, f"ppo_clip must be in (0, 1) or null, got {s.ppo_clip!r}")
    if not isinstance(s.method_params, Mapping) or not all(
        isinstance(v, Mapping) for v in s.method_params.values()
    ):
        raise _fail(name, f"method_params must map method names to {{param: value}}, got {s.method_params!r}")


# ---------------------------------------------------------------------------------------- building

FIELD_NAMES = tuple(f.name for f in fields(Scenario))


def _number(value: Any) -> Any:
    """Numbers as floats; YAML reads ``inf``/``-inf`` and ``1e-3`` as strings: make them floats too.
    Anything else is returned unchanged for validation to name."""
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return value


def _per_component(key: str, value: Any, k: int) -> tuple[Any, ...]:
    if isinstance(value, str | int | float) or value is None:
        return tuple(_number(value) if key != "kinds" else value for _ in range(k))
    if not isinstance(value, Sequence):
        raise UserError(f"{key} must be a list (one entry per component) or one value, got {value!r}")
    return tuple(v if key == "kinds" else _number(v) for v in value)


def _matrix(key: str, value: Any) -> Matrix:
    if not isinstance(value, Sequence) or not all(isinstance(row, Sequence) for row in value):
        raise UserError(f"{key} must be a list of rows (a K×K matrix), got {value!r}")
    return tuple(tuple(float(_number(v)) for v in row) for row in value)


def identity(k: int) -> Matrix:
    """The ``k × k`` identity matrix (independent components)."""
    return tuple(tuple(1.0 if i == j else 0.0 for j in range(k)) for i in range(k))


def _check_keys(data: Mapping[str, Any], where: str) -> None:
    """Refuse the first key of ``data`` that is not a scenario field, with a "did you mean"."""
    unknown = [key for key in data if key not in FIELD_NAMES]
    if unknown:
        key = unknown[0]
        close = difflib.get_close_matches(str(key), FIELD_NAMES, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise UserError(f"unknown scenario setting {key!r}{where}.{hint} Settings: {', '.join(FIELD_NAMES)}.")


def scenario_from_dict(
    data: Mapping[str, Any], base: Scenario | None = None, *, source: str = ""
) -> Scenario:
    """A :class:`Scenario` from plain settings (YAML keys), on top of ``base`` when given.

    Per-component fields may be one scalar; ``corr`` defaults to the identity when the number of
    components changes; missing bounds are unbounded. ``source`` names the file in errors.
    """
    where = f" in {source}" if source else ""
    _check_keys(data, where)
    values: dict[str, Any] = {}
    if base is not None:
        values = {f: getattr(base, f) for f in FIELD_NAMES}
    components = data.get("components", values.get("components"))
    if components is None:
        raise UserError(f"a scenario needs 'components' (a list of names){where}")
    if isinstance(components, str) or not isinstance(components, Sequence):
        raise UserError(f"components must be a list of names{where}, got {components!r}")
    components = tuple(str(c) for c in components)
    k = len(components)
    changed_k = base is None or k != base.k
    defaults = {
        "scales": 1.0,
        "weights": 1.0,
        "kinds": "continuous",
        "noise": 1.0,
        "means": 0.0,
        "lows": -math.inf,
        "highs": math.inf,
        "missing": 0.0,
    }
    for key in PER_COMPONENT:
        if key in data:
            values[key] = _per_component(key, data[key], k)
        elif changed_k:
            values[key] = () if key == "prompt_spread" else _per_component(key, defaults[key], k)
    for key in ("corr", "noise_corr"):
        if key in data:
            values[key] = None if data[key] is None and key == "noise_corr" else _matrix(key, data[key])
        elif changed_k:
            values[key] = identity(k) if key == "corr" else None
    for key in FIELD_NAMES:
        if key not in PER_COMPONENT and key not in ("corr", "noise_corr", "components") and key in data:
            values[key] = _number(data[key]) if key in ("lr", "ppo_clip", "unscorable") else data[key]
    values["components"] = components
    values.setdefault("name", Path(source).stem if source else "custom")
    values.setdefault("description", "")
    try:
        return Scenario(**values)
    except TypeError as exc:
        raise UserError(f"bad scenario settings{where}: {exc}") from None


def with_settings(scenario: Scenario, **settings: Any) -> Scenario:
    """``scenario`` with the given training settings replaced (None values are ignored), revalidated."""
    given = {k: v for k, v in settings.items() if v is not None}
    return replace(scenario, **given) if given else scenario
