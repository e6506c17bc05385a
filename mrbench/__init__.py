"""mrbench: a benchmark harness for multi-reward GRPO.

The public API for plugin authors is re-exported here; everything else lives in the rooms below.

- :mod:`mrbench.core`: registry, errors, contracts (``Sample``, ``RewardComponent``, ``Task``), run layout
- :mod:`mrbench.kit`: sandbox, lm-eval bridge, tool-call format, ``key=value`` parsing
- :mod:`mrbench.methods`, :mod:`mrbench.tasks`: the estimators and tasks (stand on core and kit only)
- :mod:`mrbench.engine`: one cell: spec → model → trainer → tracking
- :mod:`mrbench.sweeps`, :mod:`mrbench.reporting`, :mod:`mrbench.cli`: the grid, the reports, the command line

Importing :mod:`mrbench` loads no model, data or heavy library.
"""

__version__ = "0.1.0"
