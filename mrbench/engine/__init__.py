"""The engine: one cell (method × task × model × seed) trained and evaluated, in rooms by what
changes together.

- :mod:`~mrbench.engine.config` — the :class:`~mrbench.engine.config.RunSpec` a cell runs, and its
  settings; :mod:`~mrbench.engine.contract` — the plugin checks users run on their own tasks.
- :mod:`~mrbench.engine.models` — which models exist (tiny, pretrained, stand-in presets, any
  Hugging Face id or folder) and how one is loaded.
- :mod:`~mrbench.engine.training` — the TRL glue: a ``GRPOTrainer`` whose advantages come from a
  registered method, its rollouts, scoring kernels and per-step diagnostics.
- :mod:`~mrbench.engine.evaluation` — evaluating a model on a task (the cell's before/after,
  ``mrbench eval``, extra datasets, ``mrbench score``), and the cached pre-training evaluation.
- :mod:`~mrbench.engine.cell` — one cell's life: claim, resume, train, evaluate, log to its run,
  keep its checkpoint, end its run whatever happens.
- :mod:`~mrbench.engine.processes` — the processes a cell computes in: threads, allocator, GPUs per
  process, and multi-process (ddp/fsdp/zero3) cells.

Rooms import downwards in this order: processes and models at the bottom, then training and
evaluation, then cell.
"""
