"""Which GPUs a cell's processes see: one per process, never every GPU of the machine.

A one-process cell that sees several GPUs goes wrong in TRL 1.16: ``TrainingArguments`` counts
every visible device (``n_gpu``), and the trainer then refuses ``nn.DataParallel`` (with ``beta``
0, after the pre-training evaluation has already run) or builds the reference model with
``device_map="auto"`` across all of them (``beta`` > 0). So every cell process is given
exactly the GPUs it uses through ``CUDA_VISIBLE_DEVICES``, set before CUDA starts:

- a sweep's local worker slot ``s`` (of ``--workers``) gets GPUs ``s·n … s·n + n − 1`` of the
  visible ones for a cell of ``n`` processes (:func:`gpus_for_slot`; slots share GPUs round-robin
  when there are fewer GPUs than slots × n);
- ``mrbench run`` keeps the first ``n`` visible GPUs (:func:`pin_for_cell`);
- Ray gives each task its own ``CUDA_VISIBLE_DEVICES`` from the GPUs it reserved: ``gpus_per_cell``,
  and at least one per process for a cell of several processes that uses GPUs (:func:`ray_gpus`).

A cell of ``n`` processes on a machine that shows GPUs needs ``n`` of them, one per process
(accelerate gives rank ``r`` GPU ``r``; fewer GPUs fail there with "invalid device ordinal"):
:func:`check_gpus_for_processes` refuses fewer before anything runs.

On a machine without NVIDIA GPUs all of this is a no-op. The GPUs are counted without starting
CUDA (the driver's ``/proc`` entries), which would freeze the set this process sees.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping
from pathlib import Path

from mrbench.core.errors import UserError

VISIBLE = "CUDA_VISIBLE_DEVICES"
_DRIVER_GPUS = Path("/proc/driver/nvidia/gpus")


def visible_gpus(env: MutableMapping[str, str] | None = None) -> list[str]:
    """The GPUs a process started with ``env`` (default: this one's) may use, as
    ``CUDA_VISIBLE_DEVICES`` entries: that variable's entries when set, else one index per GPU
    the NVIDIA driver lists."""
    env = os.environ if env is None else env
    if VISIBLE in env:
        return [d.strip() for d in env[VISIBLE].split(",") if d.strip()]
    try:
        return [str(i) for i in range(len(list(_DRIVER_GPUS.iterdir())))]
    except OSError:  # no NVIDIA driver: no GPU
        return []


def gpus_for_slot(gpus: list[str], slot: int, per_cell: int = 1) -> str | None:
    """The ``CUDA_VISIBLE_DEVICES`` value of worker slot ``slot`` for a cell of ``per_cell``
    processes, from the ``gpus`` visible; None when there are none (a CPU machine).

    >>> gpus_for_slot(["0", "1", "2", "3"], 1), gpus_for_slot(["0", "1", "2", "3"], 1, per_cell=2)
    ('1', '2,3')
    >>> gpus_for_slot(["4", "5"], 3), gpus_for_slot([], 0)
    ('5', None)

    Fewer GPUs than ``per_cell``: :class:`UserError` (:func:`check_gpus_for_processes`).
    """
    if not gpus:
        return None
    check_gpus_for_processes(per_cell, gpus)
    groups = max(1, len(gpus) // per_cell)
    start = (slot % groups) * per_cell
    return ",".join(gpus[start : start + per_cell] or gpus[:per_cell])


def pin_for_cell(env: MutableMapping[str, str] | None = None, *, slot: int = 0, per_cell: int = 1) -> None:
    """Set ``CUDA_VISIBLE_DEVICES`` in ``env`` (default: this process's, before CUDA starts) to the
    GPUs of worker ``slot`` for a cell of ``per_cell`` processes; nothing on a machine without GPUs."""
    env = os.environ if env is None else env
    chosen = gpus_for_slot(visible_gpus(env), slot, per_cell)
    if chosen is not None:
        env[VISIBLE] = chosen


def check_gpus_for_processes(processes: int, gpus: list[str] | None = None) -> None:
    """:class:`UserError` when a cell of ``processes`` processes would run here on fewer GPUs than
    processes: ``gpus`` (default: :func:`visible_gpus`) is not empty (a machine without GPUs runs
    its processes on the CPU) and shorter than ``processes``."""
    gpus = visible_gpus() if gpus is None else gpus
    if gpus and len(gpus) < processes:
        raise UserError(
            f"{processes} processes per cell need {processes} GPUs (one each), but {len(gpus)} "
            f"{'is' if len(gpus) == 1 else 'are'} visible here ({VISIBLE}={','.join(gpus)}): give "
            f"--processes-per-cell {len(gpus)} or fewer, or run where {processes} GPUs are visible"
        )


def ray_gpus(gpus_per_cell: float, processes: int) -> float:
    """The GPUs a Ray task of a cell asks for: ``gpus_per_cell``, raised to one per process for a
    cell of several processes that uses GPUs (each rank takes a GPU of the task's own).

    >>> ray_gpus(1.0, 4), ray_gpus(0.5, 1), ray_gpus(0.0, 4), ray_gpus(8.0, 4)
    (4.0, 0.5, 0.0, 8.0)
    """
    if gpus_per_cell > 0 and processes > 1:
        return max(gpus_per_cell, float(processes))
    return gpus_per_cell
