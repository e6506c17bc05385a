"""The estimator lab: a multi-reward policy-gradient simulator (``mrbench simulate``).

Prompts have a finite set of candidate responses whose K-component rewards come from a
scenario's generator (scales, noise, binary/continuous, correlations: copies, independence,
trade-offs). A softmax policy per prompt (or a linear one shared by all prompts) is trained with
every registered advantage estimator, many seeds batched; expected rewards are exact. The report
says what each estimator does with reward scale, redundancy, collapse and anti-correlation.

Modules: :mod:`~mrbench.lab.scenarios` (what a scenario is, validation), :mod:`~mrbench.lab.config` (YAML),
:mod:`~mrbench.lab.presets` (the shipped scenarios), :mod:`~mrbench.lab.generator` (reward
tensors), :mod:`~mrbench.lab.policy` (softmax policies and their gradient),
:mod:`~mrbench.lab.estimators` (the registry's methods, per seed where they couple groups),
:mod:`~mrbench.lab.simulate` (the training loop), :mod:`~mrbench.lab.metrics` (diagnostics and
statistics), :mod:`~mrbench.lab.summary` / :mod:`~mrbench.lab.figures` (the report),
:mod:`~mrbench.lab.tracking` (MLflow), :mod:`~mrbench.lab.runner` (one invocation end to end),
:mod:`~mrbench.lab.correlation` (the nearest correlation matrix), :mod:`~mrbench.lab.in_sweep` (the
lab as part of ``mrbench sweep``).

The lab stands on the core, the methods, :mod:`mrbench.store` (finding and reading a store) and
:mod:`mrbench.reporting` (statistics); the CLI and the sweeps (:mod:`mrbench.lab.in_sweep`: a
sweep's ``lab`` scenarios) import it. ``scripts/smoke_corr.py`` (outside the package) prints the
paper presets' correlations from a sweep's runs. Names below are imported on
first use.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "Scenario": "mrbench.lab.scenarios",
    "load_config": "mrbench.lab.config",
    "PRESETS": "mrbench.lab.presets",
    "get_scenario": "mrbench.lab.presets",
    "simulate": "mrbench.lab.simulate",
    "LabResult": "mrbench.lab.simulate",
    "summarise": "mrbench.lab.metrics",
    "run_lab": "mrbench.lab.runner",
}

__all__ = list(_EXPORTS)


def __getattr__(name: str) -> Any:
    """Import a public name on first access (PEP 562): ``import mrbench.lab`` stays light."""
    if name not in _EXPORTS:
        raise AttributeError(f"module 'mrbench.lab' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
