"""Multi-process cells: one cell trained by N processes started by ``accelerate launch``.

``mrbench run --processes-per-cell N [--distributed ddp|fsdp|zero3]`` (and ``processes_per_cell`` /
``distributed`` in a sweep) runs a cell like this:

1. The launcher (the ``mrbench run`` process, or a sweep's cell process) writes a payload (a
   :class:`~mrbench.core.cell_protocol.CellPayload`: the spec, the cell function's
   ``"module:attr"``, its keyword arguments) and runs
   :func:`launch_command`: ``python -m accelerate.commands.launch --config_file <preset>
   --num_processes N --num_machines 1 --main_process_port <free port> -m mrbench.engine.processes.distributed
   PAYLOAD``. The presets are package data (``accelerate_configs/{ddp,fsdp,zero3}.yaml``); ``ddp``
   and ``fsdp`` also run on a machine without CUDA (CPU processes synchronised through gloo; FSDP
   there through mrbench's one adjustment of accelerate, :mod:`mrbench.engine.processes.sharding`, which
   each rank installs first).
2. Every process (rank) runs the same cell function on the same spec. ``train.prompts_per_step``
   stays the *global* number of prompts per generation batch: each rank gets
   ``prompts_per_step / N`` of them (:func:`per_process`), so a cell trains on the same batches
   whatever N is, and N is not part of its run key.
3. TRL gathers every rank's rewards (``[B_local, K]`` → ``[B_global, K]``, rank order); the
   advantage hook (:mod:`mrbench.engine.training.trainer`) computes the method on whole groups of the
   global batch and keeps its rank's rows (:func:`local_slice`), as TRL does for its own
   advantages. Diagnostics and shadow estimators are computed on the gathered rewards by rank 0.
4. Only rank 0 touches the tracking store and the cell's folder: ranks > 0 get a
   :class:`SilentClient` and a :class:`ReplicaFolder` (:func:`rank_client`, :func:`rank_folder`).
   They never need the run id. Every rank evaluates (a sharded model needs every rank for a
   forward pass); rank 0 logs. Rank 0 writes the cell's result, which the launcher returns.
5. Training checkpoints and resume work as in a single-process cell (:mod:`mrbench.engine.cell.resume`):
   every rank writes its own RNG state into a checkpoint, rank 0 the rest and, once every rank is
   done (:func:`barrier`), the marker; rank 0 chooses the checkpoint to resume from and sends it
   to the other ranks (:func:`from_rank0`), and every rank restores it.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
from importlib import resources
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from mrbench.core.cell_protocol import DEFAULT_CELL_FN, CellPayload, RankEnd
from mrbench.core.errors import UserError
from mrbench.core.ranks import is_main_process, rank, world_size
from mrbench.core.registry import import_target
from mrbench.core.results_layout import CellPaths
from mrbench.engine.processes.rank_fork import can_fork, fork_ranks, rank_environments
from mrbench.engine.processes.threads import thread_env
from mrbench.kit.children import child_env, die_with_parent, module_command, stop
from mrbench.store.faults import OutOfRoom
from mrbench.store.local import results_dir

DISTRIBUTED = ("ddp", "fsdp", "zero3")
"""The shipped ``accelerate`` presets (``--distributed``); ``ddp`` is the default."""
GPU_ONLY = ("zero3",)
WORKER_MODULE = "mrbench.engine.processes.distributed"
STOPPED_CODES = frozenset({130, 143, -signal.SIGINT, -signal.SIGTERM})  # a launch ended by a stop signal
STOP_GRACE_S = 60.0  # how long ranks may take to end their run KILLED after a stop signal


# ---------------------------------------------------------------------------------- this process


def from_rank0(value: Any) -> Any:
    """Rank 0's ``value``, on every rank of this cell (``value`` itself outside a multi-process cell).

    A collective: every rank calls it at the same point. It is called before the trainer exists,
    so it starts the process group if nothing has yet (accelerate's ``PartialState``, with the
    device choice and the timeout the trainer would give it: :func:`process_group_timeout`; the
    trainer's own ``PartialState`` then reuses that group, whose timeout it can no longer set).
    ``value`` must pickle.
    """
    if world_size() == 1:
        return value
    import torch
    import torch.distributed as dist

    if not dist.is_initialized():
        from accelerate import PartialState

        PartialState(cpu=not torch.cuda.is_available(), timeout=process_group_timeout())
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def process_group_timeout() -> Any:
    """How long a collective of a cell's processes waits for the slowest rank (a ``timedelta``):
    ``TrainingArguments.ddp_timeout``'s default, 30 minutes (torch's own default for NCCL is 10),
    which a rank-0 save of a large model's full state can need while the other ranks wait."""
    from datetime import timedelta

    from transformers import TrainingArguments

    return timedelta(seconds=TrainingArguments.__dataclass_fields__["ddp_timeout"].default)


def barrier() -> None:
    """Wait until every rank of this cell gets here (nothing outside a multi-process cell)."""
    if world_size() == 1:
        return
    import torch.distributed as dist

    if dist.is_initialized():
        dist.barrier()


def per_process(global_count: int, processes: int | None = None) -> int:
    """Each process's share of ``global_count`` items (prompts per step) over ``processes`` (default:
    this cell's :func:`world_size`); :class:`UserError` when it does not divide evenly."""
    n = world_size() if processes is None else processes
    if global_count % n:
        raise UserError(
            f"train.prompts_per_step={global_count} cannot be split over {n} processes per cell: "
            f"give a multiple of {n}"
        )
    return global_count // n


def local_slice(values: Any, n_local: int, process_index: int, num_processes: int) -> Any:
    """This process's rows of a tensor gathered over every process (rank order).

    ``values`` ``[B_global, ...]`` with ``B_global = n_local * num_processes`` → rows
    ``process_index * n_local`` to ``(process_index + 1) * n_local`` ``[n_local, ...]``. A
    ``B_global`` that does not match means the values were not gathered from every process.

    >>> local_slice(list(range(6)), 2, 1, 3)
    [2, 3]
    """
    if len(values) != n_local * num_processes:
        raise RuntimeError(
            f"expected {n_local} rows from each of {num_processes} processes ({n_local * num_processes}), "
            f"got {len(values)}: the rewards were not gathered from every process"
        )
    return values[process_index * n_local : (process_index + 1) * n_local]


class SilentClient:
    """The tracking client of ranks > 0: answers what a cell asks before and while it logs, sends nothing.

    ``tracking_uri`` is not a store's (no store is opened or re-rooted on its behalf); a run it
    "creates" has id ``""``. An ``MlflowClient`` method not listed here raises AttributeError.
    """

    def __init__(self, process_rank: int) -> None:
        self.tracking_uri = f"rank-{process_rank}-does-not-log"

    def bounded(self, retry_s: float) -> SilentClient:
        return self

    def get_experiment_by_name(self, name: str) -> Any:
        return SimpleNamespace(experiment_id="", lifecycle_stage="active", name=name)

    def create_run(self, experiment_id: str, **kwargs: Any) -> Any:
        return SimpleNamespace(info=SimpleNamespace(run_id="", experiment_id=experiment_id))

    def log_batch(self, run_id: str, **kwargs: Any) -> None:
        return None

    def log_artifact(self, run_id: str, local_path: str, artifact_path: str | None = None) -> None:
        return None

    def set_tag(self, run_id: str, key: str, value: Any) -> None:
        return None

    def set_terminated(self, run_id: str, status: str | None = None, end_time: int | None = None) -> None:
        return None


def rank_client(tracking_uri: str, retry_s: float | None) -> Any:
    """The tracking client of this process: a :class:`~mrbench.store.client.RetryingClient` on
    rank 0, a :class:`SilentClient` on the other ranks of a multi-process cell."""
    from mrbench.store.client import RetryingClient

    return RetryingClient(tracking_uri, retry_s) if is_main_process() else SilentClient(rank())


# ---------------------------------------------------------------------------------- launching


def preset_config(distributed: str) -> Path:
    """The ``accelerate`` config file of preset ``distributed`` (one of :data:`DISTRIBUTED`)."""
    if distributed not in DISTRIBUTED:
        close = difflib.get_close_matches(str(distributed), DISTRIBUTED, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise UserError(f"--distributed {distributed!r}{hint}: choose one of {', '.join(DISTRIBUTED)}")
    return Path(str(resources.files("mrbench.engine") / "accelerate_configs" / f"{distributed}.yaml"))


def check_processes(
    processes: int, distributed: str = "ddp", *, cuda: bool | None = None, here: bool = True
) -> None:
    """:class:`UserError` for a process count below 1 or an unknown preset and, with ``here`` (the
    cell runs on this machine), for what this machine lacks: CUDA for the GPU-only preset
    (``zero3``: DeepSpeed; ``cuda`` None: ask torch), or a GPU per process where it shows GPUs
    (:func:`~mrbench.engine.processes.devices.check_gpus_for_processes`). A Ray sweep's driver passes
    ``here=False``: its cells run where Ray places them, and check this there (:func:`launch_cell`)."""
    if isinstance(processes, bool) or not isinstance(processes, int) or processes < 1:
        raise UserError(f"--processes-per-cell {processes!r}: expected an integer ≥ 1")
    preset_config(distributed)
    if not here:
        return
    if distributed in GPU_ONLY:
        if cuda is None:
            import torch

            cuda = torch.cuda.is_available()
        if not cuda:
            raise UserError(
                f"--distributed {distributed} needs CUDA GPUs (DeepSpeed); "
                "on a CPU use --distributed fsdp or ddp"
            )
    if processes > 1:
        from mrbench.engine.processes.devices import check_gpus_for_processes

        check_gpus_for_processes(processes)


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (the rendezvous port of one cell's processes)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def launch_command(processes: int, distributed: str, payload: Path, *, port: int) -> list[str]:
    """The ``accelerate launch`` command line that runs the cell of ``payload`` in ``processes`` processes."""
    return module_command(
        "accelerate.commands.launch",
        "--config_file",
        str(preset_config(distributed)),
        "--num_processes",
        str(processes),
        "--num_machines",
        "1",
        "--main_process_port",
        str(port),
        "-m",
        WORKER_MODULE,
        str(payload),
    )


def launch_cell(
    spec: Any,
    *,
    processes: int,
    distributed: str = "ddp",
    cell_fn: str = DEFAULT_CELL_FN,
    threads: int = 0,
    log: Path | None = None,
    fork: bool = False,
    **kwargs: Any,
) -> dict[str, Any]:
    """Run ``cell_fn(spec, **kwargs)`` in ``processes`` processes; return rank 0's result as a dict.

    ``spec``: a :class:`~mrbench.engine.config.RunSpec` (or any spec with ``to_dict``/``from_dict``);
    ``cell_fn``: its ``"module:attr"``; ``threads``: the cell's thread budget, shared by its
    processes (0: torchrun's default of one each); ``log``: a file for the processes' output
    (default: this process's); ``fork``: on a CPU, fork the ranks from this process instead of
    starting them with ``accelerate launch`` (:mod:`mrbench.engine.processes.rank_fork`; only from a process
    of the cell's own that has done no torch work yet). A :class:`UserError` raised in a rank is
    raised here as one; any other failure as a RuntimeError naming it. A stop signal
    (KeyboardInterrupt) is passed on to every rank, which ends its run KILLED, then re-raised.
    """
    check_processes(processes, distributed)
    per_process(spec.train.prompts_per_step, processes)
    if CellPaths.of(results_dir(), spec.run_key()).record_path.exists():
        # An earlier attempt's record: the cell function only logs it and trains nothing, so it
        # runs here (ranks > 0 would not see the record once rank 0 had removed it, and train).
        return _jsonable_result(import_target(cell_fn)(spec, **kwargs))
    env = {**child_env(), "TOKENIZERS_PARALLELISM": "false"}  # every rank imports this mrbench
    if threads:  # the cell's budget shared by its ranks, set as every child's (threads.thread_env)
        env.update(thread_env(max(1, threads // processes)))
    with tempfile.TemporaryDirectory(prefix="mrbench-cell-") as tmp:
        payload, result = Path(tmp) / "payload.json", Path(tmp) / "result.json"
        rank_payload = CellPayload.of(
            spec,
            cell_fn,
            kwargs,
            threads=threads,
            processes_per_cell=processes,
            distributed=distributed,
            result=str(result),
            parent_pid=os.getpid(),  # the ranks stop when it dies (_stop_with_launcher)
        )
        payload.write_text(json.dumps(rank_payload.to_json()))
        port = free_port()
        if fork and can_fork(distributed):
            config = preset_config(distributed)
            environments = rank_environments(processes, config, payload, port=port, base=env)
            code = fork_ranks(environments, lambda: main([str(payload)]), log=log, grace_s=STOP_GRACE_S)
            return _outcome(_rank_ends(Path(tmp)), code, processes)
        command = launch_command(processes, distributed, payload, port=port)
        out = log.open("ab") if log is not None else None
        try:
            # Own process group: a stop signal is passed on once, to every rank at the same time.
            proc = subprocess.Popen(command, env=env, stdout=out, stderr=out, start_new_session=True)
            try:
                code = proc.wait()
            except KeyboardInterrupt:
                _stop(proc)
                raise
        finally:
            if out is not None:
                out.close()
        ends = _rank_ends(Path(tmp))
    return _outcome(ends, code, processes)


def _rank_ends(folder: Path) -> list[RankEnd]:
    """What the ranks wrote to ``folder`` (:func:`main`): rank 0's end first, then the others'."""
    return [
        RankEnd.from_json(json.loads(path.read_text()), f"rank end {path.name}")
        for path in sorted(folder.glob("result*.json"))
    ]


def _outcome(ends: list[RankEnd], code: int, processes: int) -> dict[str, Any]:
    """The cell's result from what its ranks wrote (:func:`main`), or the exception that ended it:
    rank 0's result when the launch succeeded, else the first rank's error (a :class:`UserError`
    stays one, and a rank's :class:`~mrbench.store.faults.OutOfRoom` is raised first), else
    KeyboardInterrupt when a rank was stopped."""
    results = [dict(end.result) for end in ends if end.result is not None]
    if results and not code:
        return results[0]
    errors = [end for end in ends if end.error is not None]
    room = next((end.out_of_room for end in errors if end.out_of_room), None)
    if room is not None:  # a full disk in any rank: its run ended KILLED, to be resumed
        raise OutOfRoom(*room)
    if errors:
        raise (UserError if errors[0].user_error else RuntimeError)(errors[0].error)
    # Ranks the launcher stopped because another crashed also say "interrupted": only a launch that
    # ended by a stop signal itself is one (the crash's own code, e.g. -9, is reported instead).
    if any(end.interrupted for end in ends) and code in STOPPED_CODES:
        raise KeyboardInterrupt
    raise RuntimeError(f"the cell's {processes} processes exited with code {code}")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGINT to the launcher and every rank (their runs end KILLED), SIGKILL if they take too long."""
    stop(proc, signal.SIGINT, grace_s=STOP_GRACE_S, group=True)  # the launcher leads the group


# ---------------------------------------------------------------------------------- one rank


def _jsonable_result(result: Any) -> dict[str, Any]:
    if dataclasses.is_dataclass(result) and not isinstance(result, type):
        return dataclasses.asdict(result)
    return dict(getattr(result, "__dict__", {}))


def _stop_with_launcher(pid: int, every_s: float = 0.5) -> None:
    """Stop this rank as on Ctrl-C (its run ends KILLED) when its launcher ``pid`` is gone, and end it
    :data:`STOP_GRACE_S` later if that hangs: a launcher killed with SIGKILL (``mrbench run``, a
    sweep's worker) must not leave ranks training as orphans, and ``accelerate launch`` between the
    two, in a session of its own, would not stop them. Watched from a daemon thread."""
    # is_parent=False: under ``accelerate launch`` the launcher is the rank's grandparent, so no
    # parent-death signal (it would follow accelerate's process) and the watch polls ``pid`` itself.
    # SIGTERM, as torchrun stops a rank; its handler ends the run KILLED as SIGINT would.
    die_with_parent(pid, signal.SIGTERM, is_parent=False, every_s=every_s, give_up_s=STOP_GRACE_S)


def main(argv: list[str] | None = None) -> int:
    """One rank: ``python -m mrbench.engine.processes.distributed PAYLOAD.json`` (see :func:`launch_cell`).

    Exit codes: 0 done, 1 failed, 130 stopped (its run ended KILLED). Rank 0 writes its
    :class:`~mrbench.core.cell_protocol.RankEnd` (its result, an error or an interruption) to the
    payload's ``result`` file (``result.json``); another rank writes only an error or an
    interruption, to ``result-rank<r>.json`` next to it.
    """
    from mrbench.engine.processes.sharding import adapt_accelerate

    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m mrbench.engine.processes.distributed PAYLOAD.json", file=sys.stderr)
        return 2
    path = Path(args[0])
    payload = CellPayload.from_json(json.loads(path.read_text()), f"rank payload {path}")
    if payload.parent_pid:
        _stop_with_launcher(payload.parent_pid)
    adapt_accelerate()  # FSDP on a CPU, gradients reduced in float32 (mrbench.engine.processes.sharding)
    end, code = _run_rank(payload)
    if (is_main_process() or code) and payload.result:  # one result, from rank 0; every rank's own failure
        result = Path(payload.result)
        name = f"{result.stem}{'' if is_main_process() else f'-rank{rank()}'}.json"
        result.with_name(name).write_text(json.dumps(end.to_json()))
    return code


def _run_rank(payload: CellPayload) -> tuple[RankEnd, int]:
    """Run this rank's share of ``payload``'s cell: how it ended, and the rank's exit code."""
    from mrbench.core.interrupts import stop_signals_interrupt

    with stop_signals_interrupt():
        try:
            spec = import_target(payload.spec_class).from_dict(payload.spec)
            result = import_target(payload.cell_fn)(spec, **payload.cell_kwargs())
            return RankEnd(result=_jsonable_result(result)), 0
        except KeyboardInterrupt:
            return RankEnd(interrupted=True), 130
        except Exception as exc:
            import traceback

            traceback.print_exc()
            user_error = isinstance(exc, UserError)
            room = (exc.errno, exc.strerror, exc.filename) if isinstance(exc, OutOfRoom) else None
            error = str(exc) if user_error else f"{type(exc).__name__}: {exc}"
            # out_of_room: the run ended KILLED; the launcher says so too
            return RankEnd(error=error, user_error=user_error, out_of_room=room), 1


if __name__ == "__main__":
    sys.exit(main())
