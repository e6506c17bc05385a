"""Whether a lab run fits in this machine's memory, checked before it starts (:func:`check_lab`).

The lab trains every seed at once (:mod:`mrbench.lab.simulate`), so its memory grows with seeds ×
methods: each method keeps, per seed, its expected rewards and diagnostics for every step
(``[S, T+1, K]`` and three ``[T, S]`` float64 arrays) and, once trained, the bootstrap resamples
of its per-seed scores (:mod:`mrbench.lab.metrics`). :func:`estimate_bytes` is a bound measured
from ``mrbench simulate --scenario scale --methods grpo,gdpo,corrgrpo --steps 100``: 1.66 GB peak
with 2,000 seeds and 5.65 GB with 8,000 (about 220 KB per seed and method, almost all of it the
resamples), which it overestimates by about a third (2.3 and 7.4 GB).
"""

from __future__ import annotations

import os
from pathlib import Path

from mrbench.core import limits
from mrbench.core.errors import UserError
from mrbench.core.names import check_name
from mrbench.lab.scenarios import Scenario

BASE_BYTES = 512 * 2**20
"""The process before the lab's arrays: torch, MLflow, the interpreter."""
PER_SEED_BYTES = 256 * 2**10
"""Per seed and method, whatever the steps: the per-seed scores' bootstrap resamples (measured ~220 KB)."""
PER_SEED_STEP_BYTES = 4 * 8
"""Per seed, method, step and (reward component + 3 diagnostics): a float64, with room for the
step's temporaries."""

SIZES = ("prompts", "responses", "group_size", "features")
"""The scenario's sizes bounded by :data:`~mrbench.core.limits.LAB_SIZE_MAX` (memory per step)."""


def estimate_bytes(scenario: Scenario, *, seeds: int, methods: int) -> int:
    """An upper estimate of the lab's peak memory for ``scenario`` with ``seeds`` seeds and
    ``methods`` methods (see the module docstring)."""
    per_step = PER_SEED_STEP_BYTES * (scenario.k + 3) * (scenario.steps + 1)
    per_group = 8 * 8 * scenario.prompts * (scenario.responses + scenario.group_size) * scenario.k
    return BASE_BYTES + seeds * (methods * (PER_SEED_BYTES + per_step) + per_group)


def available_bytes() -> int | None:
    """Memory this machine can give now (``MemAvailable``), else its physical memory; None if unknown."""
    try:
        for line in Path("/proc/meminfo").read_text(encoding="ascii").splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, AttributeError):
        return None


def check_lab(
    scenario: Scenario, *, seeds: int, methods: int, fewer: str = "--seeds, --steps or --methods"
) -> None:
    """:class:`UserError` before the lab starts when ``scenario``'s name is not a valid name (it
    names an experiment and a folder), a size or its steps are beyond their bounds, or
    ``seeds`` × steps × ``methods`` would need more memory than this machine has (``fewer``: what
    to give fewer of, as the caller names it)."""
    check_name(scenario.name, "lab scenario name")
    where = f"lab scenario {scenario.name!r}"
    for key in SIZES:
        value = getattr(scenario, key)
        if value > limits.LAB_SIZE_MAX:
            raise UserError(f"{where}: {key} must be <= {limits.LAB_SIZE_MAX} (memory), got {value}")
    if scenario.steps > limits.LAB_STEPS_MAX:
        raise UserError(f"{where}: steps must be <= {limits.LAB_STEPS_MAX} (time), got {scenario.steps}")
    if scenario.ppo_epochs > 1_000:
        raise UserError(f"{where}: ppo_epochs must be <= 1000 (time), got {scenario.ppo_epochs}")
    need, have = estimate_bytes(scenario, seeds=seeds, methods=methods), available_bytes()
    if have is not None and need > have:
        raise UserError(
            f"{where}: {seeds} seeds × {scenario.steps} steps × {methods} methods need about "
            f"{need / 2**30:.1f} GiB and this machine has {have / 2**30:.1f} GiB available; "
            f"give fewer {fewer}"
        )
