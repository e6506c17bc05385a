"""Upper bounds shared by several declarations, each with its reason.

Every numeric command-line option and setting declares its bounds where it is declared (a Typer
option's ``min``/``max``, a sweep setting's :class:`~mrbench.core.registry.Range`, a task
factory's ``Annotated[int, Range(...)]``, :class:`~mrbench.engine.config.TrainSettings`'
``MAXIMUM``); a bound that several of them share is one constant here, so that they agree. A
value beyond its bound is refused before anything starts (exit 2, naming the option or setting),
instead of running out of memory, running for days or failing deep inside a library.
"""

from __future__ import annotations

SEED_MAX = 2**32 - 1
"""numpy's seed type: ``np.random.seed`` (and so ``transformers.set_seed``) takes ``0 … 2**32 − 1``."""

STEPS_MAX = 100_000
"""Training steps of a cell: time (a tiny model's step takes about a second on a CPU, a 7B model's
minutes); more is a week of training, not a typo to start on."""

SEEDS_MAX = 1_000
"""Seeds of a sweep: time; each seed is one more cell per method × task × model (and a dry run
resolves every cell)."""

WORKERS_MAX = 256
"""Cells at a time on one machine: each is a process holding a model, so memory (and no machine
has more cores to give them)."""

PROCESSES_MAX = 64
"""Processes of one cell (``accelerate launch``): one GPU each; no node has more."""

RETRY_S_MAX = 86_400.0
"""Seconds a cell retries an unreachable tracking store: a day; a store gone longer is not coming
back during the run."""

GENERATIONS_MAX = 1_024
"""Completions per prompt (G) or sampled completions per problem: memory and time, each is one
more generation per prompt per step."""

TOKENS_MAX = 131_072
"""Tokens per completion: the longest context of the models mrbench runs."""

EVAL_LIMIT_MAX = 1_000_000
"""Evaluation samples: more than any evaluation dataset mrbench reads holds."""

LAB_SEEDS_MAX = 100_000
"""Seeds of one lab scenario (batched; memory grows with seeds × steps × methods, checked too by
:func:`mrbench.lab.memory.check_lab_memory`)."""

LAB_STEPS_MAX = 100_000
"""Policy-gradient steps of a lab scenario: time (milliseconds each, for every method)."""

LAB_SIZE_MAX = 4_096
"""Prompts, candidate responses, group size or features of a lab scenario: memory, every step holds
seeds × prompts × responses probabilities."""

PORT_MAX = 65_535
"""The largest TCP port."""

THREADS_MAX = 4_096
"""Intra-op threads of one process (``$MRBENCH_THREADS``): more than any machine has cores."""

KEPT_LOGS_MAX = 1_000_000
"""Command logs the results folder keeps (``$MRBENCH_KEEP_LOGS``; 0 keeps every one)."""

SANDBOX_UID_BASE_MAX = 2**31 - 1 - 3 * 128
"""First uid the code sandbox leases (``$MRBENCH_SANDBOX_UID_BASE``): its 128 slots of 3 uids stay
below the largest uid Linux gives."""
