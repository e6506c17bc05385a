"""mrbench: a benchmark harness for multi-reward GRPO.

The public API for plugin authors is re-exported here; everything else lives in the rooms below.

- :mod:`mrbench.core`: registry, errors, contracts (``Sample``, ``RewardComponent``, ``Task``), run layout
- :mod:`mrbench.kit`: sandbox, lm-eval bridge, tool-call format, ``key=value`` parsing
- :mod:`mrbench.methods`, :mod:`mrbench.tasks`: the estimators and tasks (stand on core and kit only)
- :mod:`mrbench.engine`: one cell: spec → model → trainer → tracking
- :mod:`mrbench.sweeps`, :mod:`mrbench.reporting`, :mod:`mrbench.cli`: the grid, the reports, the command line

A plugin package adds an estimator or a task without editing mrbench::

    from mrbench import register_method

    @register_method("my-adv")
    def my_adv(rewards, weights, *, eps: float = 1e-6):  # [P, G, K], [K] -> [P, G]
        ...

and makes ``mrbench`` import it through an entry point (``[project.entry-points."mrbench.methods"]
my-adv = "my_pkg.adv:my_adv"``; tasks: group ``mrbench.tasks``, a factory returning a
:class:`Task` subclass), or is named ``my_pkg.adv:my_adv`` wherever a method name is expected.

Importing :mod:`mrbench` loads no model, data or heavy library: the names below are imported on
first access (``register_method`` brings in torch, as every method needs it).
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# Public name → the module that defines it.
_EXPORTS = {
    "register_method": "mrbench.methods._registry",
    "register_task": "mrbench.tasks",
    "Range": "mrbench.core.registry",
    "Task": "mrbench.core.contracts",
    "DatasetSetting": "mrbench.core.contracts",
    "Sample": "mrbench.core.contracts",
    "RewardComponent": "mrbench.core.contracts",
    "EvalResult": "mrbench.core.contracts",
    "Generator": "mrbench.core.contracts",
    "Message": "mrbench.core.contracts",
    "completion_text": "mrbench.core.contracts",
    "clean_reward": "mrbench.core.contracts",
    "UserError": "mrbench.core.errors",
    "check_task": "mrbench.engine.contract",
    "check_method": "mrbench.engine.contract",
}

__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str) -> Any:
    """Import a public name on first access (PEP 562), keeping ``import mrbench`` light."""
    if name not in _EXPORTS:
        raise AttributeError(f"module 'mrbench' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
