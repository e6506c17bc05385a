"""A CPU cell's ranks forked from its launcher, instead of started by ``accelerate launch``.

Why: ``accelerate launch`` starts an interpreter for itself and one per rank, and each rank then
imports torch, transformers, TRL, MLflow and the engine again: 6–7 s of CPU per rank per start,
which on two cores was most of a paper rehearsal's time outside its optimizer steps (two
processes per cell, every cell started twice). A sweep's cell process is itself forked from the
cell server (:mod:`mrbench.sweeps.cell_server`), with that stack already imported and no work
done yet, so its ranks can be forked from it in milliseconds.

What a rank gets is what ``accelerate launch`` gives it: the environment accelerate's own launcher
builds from the preset (:func:`rank_environments`: ``ACCELERATE_*`` and ``FSDP_*`` from
``prepare_multi_gpu_env``) plus the variables torchrun sets per rank (``RANK``, ``LOCAL_RANK``,
``WORLD_SIZE``, ``MASTER_ADDR``/``MASTER_PORT``, …); rank 0 then hosts the rendezvous store itself
(``env://``) where torchrun's agent hosted it. As under torchrun, each rank leads a session of its
own (a rehearsed crash, ``os.killpg(os.getpgrp(), SIGKILL)`` in a rank, ends that rank and not the
launcher), and one rank's failure stops the others (SIGTERM, then SIGKILL after a grace period).

Only where forking is safe and useful (:func:`can_fork`): no CUDA (a forked child cannot use a
CUDA context, and GPU ranks need one device each, which torchrun assigns), ``ddp`` or ``fsdp``
(``zero3`` is GPU-only), ``os.fork`` exists, and ``$MRBENCH_RANK_LAUNCH`` is not ``accelerate``
(which keeps ``accelerate launch``, e.g. to compare the two). The launcher must not have run torch
work yet (an OpenMP pool started before a fork is unusable in the child): the sweep's cell process
calls this before it touches a tensor.
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

from mrbench.core.env import RANK_LAUNCH
from mrbench.kit.children import signal_group, stop

POLL_S = 0.05


def can_fork(distributed: str) -> bool:
    """Whether this process may fork the ranks of a cell of preset ``distributed`` (module docstring)."""
    if RANK_LAUNCH.get() == "accelerate":
        return False
    if distributed not in ("ddp", "fsdp") or not hasattr(os, "fork"):
        return False
    import torch

    return not torch.cuda.is_available()


def rank_environments(
    processes: int, config_file: Path, payload: Path, *, port: int, base: dict[str, str]
) -> list[dict[str, str]]:
    """The environment of each rank: ``base`` with what accelerate's launcher adds for the preset in
    ``config_file`` (its own ``prepare_multi_gpu_env``, over the config as ``accelerate launch
    --config_file`` reads it; accelerate's private helpers, as its ``launch`` command calls them)
    and what torchrun sets per rank."""
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser
    from accelerate.utils.launch import prepare_multi_gpu_env

    args = launch_command_parser().parse_args(
        [
            *("--config_file", str(config_file)),
            *("--num_processes", str(processes), "--num_machines", "1"),
            *("--main_process_port", str(port), str(payload)),
        ]
    )
    args, _defaults, _flag = _validate_launch_command(args)
    saved = os.environ.copy()
    try:  # prepare_multi_gpu_env copies os.environ: hand it ``base``
        os.environ.clear()
        os.environ.update(base)
        accelerate_env = prepare_multi_gpu_env(args)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    shared = {
        **accelerate_env,
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        "WORLD_SIZE": str(processes),
        "LOCAL_WORLD_SIZE": str(processes),
        "GROUP_RANK": "0",
        "GROUP_WORLD_SIZE": "1",
        "ROLE_NAME": "default",
        "ROLE_WORLD_SIZE": str(processes),
    }
    return [{**shared, "RANK": str(r), "LOCAL_RANK": str(r), "ROLE_RANK": str(r)} for r in range(processes)]


def fork_ranks(
    environments: list[dict[str, str]],
    run_rank: Callable[[], int],
    *,
    log: Path | None = None,
    grace_s: float = 60.0,
) -> int:
    """Fork one rank per environment, each running ``run_rank()`` (its exit code) with its output
    appended to ``log`` (default: this process's); wait for them all and
    return the launch's exit code: 0, or the first failing rank's (negative: the signal that ended
    it). Ctrl-C (KeyboardInterrupt) stops every rank as
    :func:`mrbench.engine.processes.distributed.launch_cell` does, then propagates."""
    sys.stdout.flush()
    sys.stderr.flush()
    pids: list[int] = []
    try:
        for env in environments:
            pid = os.fork()
            if pid == 0:
                _become_rank(env, run_rank, log)
            pids.append(pid)
        return _wait(pids, grace_s)
    except KeyboardInterrupt:
        stop_ranks(pids, signal.SIGINT, grace_s)
        raise


def stop_ranks(pids: list[int], sig: signal.Signals, grace_s: float) -> None:
    """Send ``sig`` to every rank's session, wait up to ``grace_s`` for them, then SIGKILL; reap all."""
    stop(pids, sig, grace_s=grace_s, group=True)  # each rank leads its own session


def _wait(pids: list[int], grace_s: float) -> int:
    """Reap every rank; when one fails, stop the others (as torchrun does: SIGTERM, SIGKILL after
    ``grace_s``). The first failure in rank order is the launch's code."""
    codes: dict[int, int] = {}
    kill_at: float | None = None
    while len(codes) < len(pids):
        for pid in pids:
            if pid not in codes:
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    codes[pid] = os.waitstatus_to_exitcode(status)
        if len(codes) == len(pids):
            break
        alive = [pid for pid in pids if pid not in codes]
        if kill_at is None and any(codes.values()):
            _signal(alive, signal.SIGTERM)
            kill_at = time.monotonic() + grace_s
        elif kill_at is not None and time.monotonic() > kill_at:
            _signal(alive, signal.SIGKILL)
        time.sleep(POLL_S)
    return next((codes[pid] for pid in pids if codes[pid]), 0)


def _signal(pids: list[int], sig: signal.Signals) -> None:
    """``sig`` to each rank's process group (the rank leads it: its own session); a rank that has
    ended already is skipped."""
    for pid in pids:
        signal_group(pid, sig)


def _become_rank(env: dict[str, str], run_rank: Callable[[], int], log: Path | None) -> NoReturn:
    """In the forked child: lead a session of its own (as torchrun starts a rank), take the rank's
    environment and thread share, run the rank, and leave with its exit code (never returning into
    the launcher's frames)."""
    code = 1
    try:
        os.setsid()
        atexit._clear()  # the launcher's exit handlers are not this process's
        if log is not None:
            fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            os.close(fd)
        os.environ.clear()
        os.environ.update(env)
        threads = int(env.get("OMP_NUM_THREADS") or 0)
        if threads:
            from mrbench.engine.processes.threads import apply_threads

            apply_threads(threads, given=True)
        code = run_rank()
    except KeyboardInterrupt:
        code = 130
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        try:
            atexit._run_exitfuncs()  # the rank's own: logging and MLflow flush as at a normal exit
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)
