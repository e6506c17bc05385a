"""How many intra-op threads a process computing with a model uses: the thread policy.

PyTorch's default is one thread per core in every process. On a shared machine that collapses:
each process's threads wait for each other at every operation, and when other processes hold the
cores the waiting threads spin (OpenMP's default) and are descheduled in turn, so three runs on two
cores each took up to 6.5× their time alone (``benchmarks/bench_threads.py``). The tiny presets
gain little from more than one thread (their matrices are 64–256 wide), so:

- a tiny model (a tiny preset, or a folder built or trained from one): **one** thread, whatever
  the machine and the number of workers, so its numbers never depend on either;
- any other model: the process's share of the cores, ``cores // workers`` (at least 1), or on
  Ray the whole part of the task's ``cpus_per_cell``;
- ``$MRBENCH_THREADS`` (a positive integer) overrides both, for every process mrbench starts.

Idle threads wait passively (``OMP_WAIT_POLICY=PASSIVE`` where the OpenMP runtime is not started
yet), which costs a few microseconds per operation and never steals a core from another process.
"""

from __future__ import annotations

import os
import sys

from mrbench.core import env

THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
"""What native libraries read for their thread pools when they start."""

_given: list[int] = []  # the threads this process's parent gave it (a sweep worker), once set


def available_cores() -> int:
    """CPU cores this process may use (affinity-aware)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def is_tiny(model: str) -> bool:
    """:func:`mrbench.engine.models.catalog.is_tiny` (one small model on one thread)."""
    # Imported here: a sweep worker decides its threads before it imports torch (engine.models does).
    from mrbench.engine.models.catalog import is_tiny as built_for_tiny

    return built_for_tiny(model)


def threads_for(model: str, workers: int = 1, *, share: int | None = None) -> int:
    """The intra-op threads of a process computing with ``model`` beside ``workers - 1`` others;
    ``share``: the cores it was given instead (a Ray task's CPUs), else ``cores // workers``.

    >>> threads_for("tiny", workers=1), threads_for("tiny", share=8)
    (1, 1)
    """
    override = env.THREADS.get()
    if override is not None:
        return override
    if is_tiny(model):
        return 1
    return max(1, share if share is not None else available_cores() // max(1, workers))


def thread_env(threads: int) -> dict[str, str]:
    """The environment variables that give a new process ``threads`` threads that wait passively."""
    return {**dict.fromkeys(THREAD_VARS, str(threads)), "OMP_WAIT_POLICY": "PASSIVE"}


def apply_threads(threads: int, *, given: bool = False) -> None:
    """Use ``threads`` intra-op threads in this process from now on (and in processes it starts);
    ``given``: the parent decided (a sweep worker's share), so :func:`use_threads_for` keeps it.

    The environment variables reach libraries that have not started their pools yet (PyTorch reads
    ``OMP_NUM_THREADS`` when it is imported) and child processes; ``torch.set_num_threads`` resizes
    PyTorch's pool if torch is imported already.
    """
    for var, value in thread_env(threads).items():
        if var == "OMP_WAIT_POLICY":
            os.environ.setdefault(var, value)
        else:
            os.environ[var] = value
    torch = sys.modules.get("torch")
    if torch is not None and torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
    if given:
        _given[:] = [threads]


def use_threads_for(model: str) -> int:
    """Apply the policy for ``model`` in a process that computes alone (``mrbench run``, ``mrbench
    eval``, each cell of a sweep that runs its cells one after another), unless its parent gave it
    threads (a sweep worker, :func:`apply_threads` ``given``); returns the threads in use."""
    threads = _given[0] if _given else threads_for(model)
    if not _given:
        apply_threads(threads)
    return threads
