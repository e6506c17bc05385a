"""Where a multi-process cell's ranks get their GPUs (findings 5 and 9 of issue 33).

- A machine that shows fewer GPUs than a cell has processes refuses the cell before any run is
  created (one line naming the cell and the fix, exit 2), instead of handing the ranks fewer GPUs
  (accelerate's rank ``r`` takes GPU ``r``: "invalid device ordinal").
- Ray reserves one GPU per process for a cell of several processes that uses GPUs, whatever
  ``gpus_per_cell`` says.
- A Ray sweep's driver does not check its own CUDA or GPUs (a head node may have none): the
  cells check theirs where Ray runs them.

No GPU is needed: the GPUs a process may use are read from ``CUDA_VISIBLE_DEVICES`` without
starting CUDA (:func:`mrbench.engine.processes.devices.visible_gpus`).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from test_distributed import ToySpec, toy_cell

from mrbench.core.errors import UserError
from mrbench.engine.processes.devices import VISIBLE, check_gpus_for_processes, gpus_for_slot, ray_gpus
from mrbench.engine.processes.distributed import check_processes
from mrbench.sweeps import orchestrator
from mrbench.sweeps.cell import Cell
from mrbench.sweeps.cell_process import check_processes_per_cell
from mrbench.sweeps.executors import ray as ray_executor
from mrbench.sweeps.spec import build_sweep_spec

FEWER = "4 processes per cell need 4 GPUs (one each), but 2 are visible here (CUDA_VISIBLE_DEVICES=0,1)"


def test_fewer_gpus_than_processes_are_refused_not_handed_out(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(VISIBLE, "0,1")
    with pytest.raises(UserError, match=r"give --processes-per-cell 2 or fewer"):
        check_gpus_for_processes(4)
    with pytest.raises(UserError, match=re.escape(FEWER)):
        gpus_for_slot(["0", "1"], 0, per_cell=4)  # was "0,1": two GPUs for four ranks
    with pytest.raises(UserError, match="4 processes per cell need 4 GPUs"):
        check_processes(4, "fsdp")
    check_processes(2, "fsdp")
    check_gpus_for_processes(4, [])  # no GPU: the processes run on the CPU
    monkeypatch.setenv(VISIBLE, "")
    check_processes(4, "ddp")


def test_a_sweep_names_the_cell_and_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(VISIBLE, "0,1")
    cells = [Cell(ToySpec("a", prompts_per_step=4)), Cell(ToySpec("b", prompts_per_step=4))]
    with pytest.raises(UserError) as refused:
        check_processes_per_cell(cells, 4, "ddp")
    assert str(refused.value) == f"cell m|t|x|s0: {FEWER}: give --processes-per-cell 2 or fewer, " + (
        "or run where 4 GPUs are visible"
    )
    check_processes_per_cell(cells, 4, "ddp", here=False)  # on Ray: checked where the cells run


def test_mrbench_run_refuses_before_the_store(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, tmp_path: Path
) -> None:
    from mrbench.cli.app import main

    monkeypatch.setenv("MRBENCH_RESULTS", str(tmp_path))
    monkeypatch.setenv(VISIBLE, "0,1")
    monkeypatch.setattr(sys, "argv", ["mrbench", "run", "--processes-per-cell", "4"])
    with pytest.raises(SystemExit) as exited:
        main()
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert FEWER in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "mlflow.db").exists()


def test_ray_reserves_a_gpu_per_process() -> None:
    assert ray_gpus(1.0, 4) == 4.0 and ray_gpus(0.5, 4) == 4.0  # the paper preset's 1 with 4 processes
    assert ray_gpus(8.0, 4) == 8.0 and ray_gpus(0.5, 1) == 0.5 and ray_gpus(0.0, 4) == 0.0

    asked: dict = {}
    node = {"Alive": True, "Resources": {"CPU": 8.0, "GPU": 4.0}}
    fake_ray = SimpleNamespace(
        remote=lambda **options: asked.update(options) or (lambda fn: fn), nodes=lambda: [node]
    )
    ctx = SimpleNamespace(processes_per_cell=4, cell_fn=toy_cell)
    progress = SimpleNamespace(console=SimpleNamespace(print=pytest.fail))  # no "no node fits" warning
    assert list(ray_executor._run_tasks(fake_ray, [], ctx, progress, 1.0, 2.0)) == []
    assert asked["num_gpus"] == 4.0 and asked["num_cpus"] == 2.0


def test_a_ray_sweep_of_sharded_cells_starts_from_a_head_without_cuda(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setenv(VISIBLE, "")
    cells = [Cell(ToySpec("a", prompts_per_step=4))]
    fn = toy_cell
    ray = build_sweep_spec(overrides={"executor": "ray", "processes_per_cell": "4", "distributed": "zero3"})
    orchestrator._check_cells(ray, cells, fn)  # was: "--distributed zero3 needs CUDA GPUs"
    local = build_sweep_spec(overrides={"processes_per_cell": "4", "distributed": "zero3"})
    with pytest.raises(UserError, match=r"^cell m\|t\|x\|s0: --distributed zero3 needs CUDA GPUs"):
        orchestrator._check_cells(local, cells, fn)
