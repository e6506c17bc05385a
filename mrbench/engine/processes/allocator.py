"""glibc's allocator in a process that computes on the CPU: big freed blocks are kept for reuse.

glibc serves a large allocation (128 KiB and up at first; its threshold adapts up to 32 MiB) with
a memory mapping of its own and unmaps it when the block is freed, so the next block of that size
is mapped again and every one of its pages is faulted in and zeroed by the kernel. A training step
on the CPU allocates and frees such blocks by the dozen: TRL's log-probability kernel works on
``[4096, vocabulary]`` float32 tiles (32 MiB each for the tiny models' 2,048 tokens), generation and
the backward pass on activations of a few MiB. An agent-security cell of ``tiny`` spent 8.9 s of
its 54.5 s in the kernel (system time) that way. Served from the heap, and the heap not trimmed
below 1 GiB of free space, the blocks are reused instead: the same cell takes 47.5 s, 1.0 s of it
system time (``python benchmarks/bench_cpu_cell.py``). Where memory comes from changes no value,
so every number stays the same.

Only for processes that compute on the CPU (no GPU visible, :mod:`mrbench.engine.processes.devices`): a
GPU run's host memory holds the checkpoint while it loads, and keeping up to a GiB of it freed
is not worth anything there. ``MRBENCH_MALLOC=default`` leaves glibc's settings alone.
"""

from __future__ import annotations

import ctypes
import platform

from mrbench.core import env
from mrbench.engine.processes.devices import visible_gpus

KEEP_BYTES = 1 << 30
"""Blocks below this size come from the heap, and up to this much free heap is kept (1 GiB)."""

# mallopt(3) parameter numbers, from glibc's <malloc.h>.
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3

_state: list[bool] = []  # what keep_freed_blocks decided, once it ran in this process


def malloc_setting() -> str:
    """``$MRBENCH_MALLOC`` checked: ``keep`` when unset; :class:`UserError` when it is neither."""
    return env.MALLOC.get()


def keep_freed_blocks() -> bool:
    """Make glibc serve blocks under 1 GiB from its heap and keep up to 1 GiB of it free, in a
    process that computes on the CPU under glibc, unless ``$MRBENCH_MALLOC`` is ``default``.

    Call before the model is built or loaded; later calls return the first call's answer.
    Returns whether the settings are in effect.
    """
    if _state:
        return _state[0]
    applied = False
    if malloc_setting() == "keep" and not visible_gpus() and platform.libc_ver()[0] == "glibc":
        try:
            libc = ctypes.CDLL("libc.so.6")
        except OSError:
            libc = None
        if libc is not None:
            # The mapping threshold first: set explicitly, it also stops glibc from adapting the
            # trim threshold, which is then set next.
            applied = bool(libc.mallopt(_M_MMAP_THRESHOLD, ctypes.c_int(KEEP_BYTES)))
            applied = applied and bool(libc.mallopt(_M_TRIM_THRESHOLD, ctypes.c_int(KEEP_BYTES)))
    _state.append(applied)
    return applied
