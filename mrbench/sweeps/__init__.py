"""Sweeps: methods × tasks × models × seeds, resumable, logged to MLflow.

:mod:`~mrbench.sweeps.spec` (what to run) → :mod:`~mrbench.sweeps.grid` (the cells) →
:mod:`~mrbench.sweeps.resume` (what is done) → :mod:`~mrbench.sweeps.parent` (the invocation's run) →
:mod:`~mrbench.sweeps.executors` (running cells; :mod:`~mrbench.sweeps.cell_process` is a worker) →
:func:`mrbench.sweeps.orchestrator.run_sweep` (all of it, then the report).

Invocations of one sweep running at the same time share its cells: each cell is claimed in the
store just before it runs (:mod:`~mrbench.sweeps.claims`), and a claim lapses with its invocation
(:mod:`mrbench.store.claims`, where who owns a run is decided).
"""
