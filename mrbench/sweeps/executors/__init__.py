"""Executors: how the cells of one invocation run, each yielding a :class:`~mrbench.sweeps.cell.CellOutcome`
per cell as it ends.

- :mod:`~mrbench.sweeps.executors.local`: one after another in this process, or in worker processes;
- :mod:`~mrbench.sweeps.executors.ray`: as Ray tasks, on a local Ray or a cluster (optional extra).
"""
