"""A real 2-process gloo world with the environment ``accelerate launch`` gives an ``fsdp`` preset's
worker (the session fixture :func:`fsdp_world`), shared by ``test_fsdp_cpu.py`` and
``test_sharded_checkpoints.py``.

Each rank starts the world as a cell does (:func:`mrbench.engine.processes.distributed.from_rank0`, before
any trainer; the timeout it gives the group goes to ``rank<r>.json``), then builds accelerate's
``Accelerator`` as a cell's trainer does (``cpu=True``, bf16 mixed
precision), first as accelerate 1.16 is, then adapted by :mod:`mrbench.engine.processes.sharding`; prepares a
two-layer model and takes one AdamW step; reports what accelerate made of it
(``rank<r>.json``); and saves the model and optimizer with accelerate's own
``save_fsdp_model``/``save_fsdp_optimizer`` in both FSDP state-dict types
(``FULL_STATE_DICT/``, ``SHARDED_STATE_DICT/``): the files a trainer writes into an FSDP
checkpoint. The ranks are spawned, fresh as a cell's ranks are.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp

from mrbench.engine.processes import distributed

WORLD = 2


def _prepared(adapt: bool, process_rank: int, out: Path | None) -> dict[str, str]:
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState
    from accelerate.utils import save_fsdp_model, save_fsdp_optimizer

    AcceleratorState._reset_state(reset_partial_state=True)  # the process group stays
    if adapt:
        from mrbench.engine.processes.sharding import adapt_accelerate

        adapt_accelerate()
    accelerator = Accelerator(cpu=True, mixed_precision="bf16")  # what TrainingArguments(use_cpu, bf16) asks
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Linear(16, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model, optimizer = accelerator.prepare(model, optimizer)
    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(process_rank))
    accelerator.backward(model(x).float().pow(2).mean())
    optimizer.step()
    plugin = accelerator.state.__dict__.get("fsdp_plugin")
    if out is not None:
        for kind in ("FULL_STATE_DICT", "SHARDED_STATE_DICT"):
            plugin.state_dict_config = plugin.optim_state_dict_config = None  # as if built with `kind`
            plugin.set_state_dict_type(kind)
            save_fsdp_model(plugin, accelerator, model, str(out / kind))
            save_fsdp_optimizer(plugin, accelerator, optimizer, model, str(out / kind))
    policy = getattr(plugin, "mixed_precision_policy", None)
    return {
        "type": str(accelerator.distributed_type),
        "param": type(next(model.parameters())).__name__,
        "param_dtype": str(next(model.parameters()).dtype),
        "reduce_dtype": str(getattr(policy, "reduce_dtype", None)),
        "compute_dtype": str(getattr(policy, "param_dtype", None)),
    }


def _started_by_from_rank0(process_rank: int) -> dict[str, str]:
    """Start the world as a cell does (:func:`~mrbench.engine.processes.distributed.from_rank0`, before any
    trainer): the timeout it gives accelerate's ``PartialState`` and the one the gloo group got."""
    from accelerate.state import PartialState

    given: dict[str, object] = {}
    original = PartialState.__init__

    def spy(self: object, *args: object, **kwargs: object) -> None:
        given.setdefault("timeout", kwargs.get("timeout"))
        original(self, *args, **kwargs)

    PartialState.__init__ = spy  # type: ignore[method-assign]
    try:
        assert distributed.from_rank0(f"rank {process_rank}") == "rank 0"
    finally:
        PartialState.__init__ = original  # type: ignore[method-assign]
    group = torch.distributed.distributed_c10d._get_default_group()
    return {
        "given": str(given.get("timeout")),
        "gloo": str(group._get_backend(torch.device("cpu")).options._timeout),
    }


def _rank(process_rank: int, world: int, port: int, out: str) -> None:
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        RANK=str(process_rank),
        LOCAL_RANK=str(process_rank),
        WORLD_SIZE=str(world),
        LOCAL_WORLD_SIZE=str(world),
        ACCELERATE_USE_FSDP="true",
        FSDP_VERSION="2",
        FSDP_AUTO_WRAP_POLICY="NO_WRAP",
        FSDP_STATE_DICT_TYPE="FULL_STATE_DICT",
        OMP_NUM_THREADS="1",
    )
    reports = {
        "group": _started_by_from_rank0(process_rank),
        "plain": _prepared(False, process_rank, None),
        "adapted": _prepared(True, process_rank, Path(out)),
    }
    Path(out, f"rank{process_rank}.json").write_text(json.dumps(reports))
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()


@pytest.fixture(scope="session")
def fsdp_world(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder of the world's reports (``rank<r>.json``) and saved FSDP layouts."""
    out = tmp_path_factory.mktemp("fsdp-world")
    # Spawned, not forked: pytest's earlier tests leave torch's thread pools and accelerate's
    # singleton state in this process, which a forked rank inherits (it then hangs in the first
    # collective, or finds a one-process state and no group); a cell's rank starts fresh.
    mp.start_processes(
        _rank, args=(WORLD, distributed.free_port(), str(out)), nprocs=WORLD, start_method="spawn"
    )
    return out
