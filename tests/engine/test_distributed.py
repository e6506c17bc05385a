"""Multi-process cells without training: the gather/slice of the advantage path in a real 2-process
gloo world, the shipped accelerate presets and the command lines built from them, what ranks > 0
may touch, the launcher's protocol with real ``accelerate launch`` processes, and the settings.

The equivalence of a trained 2-process cell with a 1-process one is in test_distributed_cell.py.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import mrbench.methods as methods
from mrbench.core.cell_records import PendingRecord
from mrbench.core.errors import UserError
from mrbench.engine.cell.checkpoints import CellFolder, ReplicaFolder, rank_folder, save_policy
from mrbench.engine.processes import distributed
from mrbench.engine.processes.distributed import (
    DISTRIBUTED,
    SilentClient,
    check_processes,
    launch_cell,
    launch_command,
    local_slice,
    per_process,
    preset_config,
    rank_client,
)
from mrbench.engine.runs.tracking import RunLog
from mrbench.store.client import RetryingClient, ensure_experiment
from mrbench.sweeps.cell import Cell, CellContext
from mrbench.sweeps.cell_process import cell_payload, check_processes_per_cell
from mrbench.sweeps.spec import build_sweep_spec

HERE = Path(__file__).resolve().parent
P, G, K = 4, 3, 2  # prompts, group size, reward components of the gathered batch


# --------------------------------------------------------------------------- gather and slice


def _global_rewards() -> torch.Tensor:
    """``[P*G, K]`` rewards with different scales per prompt (batch statistics matter)."""
    torch.manual_seed(0)
    return torch.randn(P * G, K) * torch.arange(1, P * G + 1).unsqueeze(1)


def _rank_advantages(process_rank: int, world: int, port: int, out: str) -> None:
    """One rank: gather its rows of the rewards like TRL does, run the method on the whole batch,
    keep its slice; also the method on its local rows alone (what a missing gather would give)."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=process_rank, world_size=world)
    try:
        rows = _global_rewards().chunk(world)[process_rank]  # [B_local, K]
        parts = [torch.empty_like(rows) for _ in range(world)]
        dist.all_gather(parts, rows)
        gathered = torch.cat(parts)  # [B_global, K], rank order
        method = methods.get_method("gdpo").obj
        weights = torch.ones(K)
        adv = method(gathered.view(-1, G, K), weights).reshape(-1)
        mine = local_slice(adv, rows.shape[0], process_rank, world)
        alone = method(rows.view(-1, G, K), weights).reshape(-1)
        torch.save({"mine": mine, "alone": alone}, f"{out}/rank{process_rank}.pt")
    finally:
        dist.destroy_process_group()


def test_gathered_advantages_sliced_per_rank_equal_one_process(tmp_path):
    world = 2
    mp.spawn(_rank_advantages, args=(world, distributed.free_port(), str(tmp_path)), nprocs=world)
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in range(world)]
    whole = methods.get_method("gdpo").obj(_global_rewards().view(P, G, K), torch.ones(K)).reshape(-1)
    assert torch.allclose(torch.cat([r["mine"] for r in ranks]), whole, atol=1e-6)
    # gdpo normalises over the batch: each rank's half alone would train on other advantages.
    assert not torch.allclose(torch.cat([r["alone"] for r in ranks]), whole, atol=1e-3)


def test_local_slice_takes_rank_rows_and_refuses_ungathered_values():
    values = torch.arange(12.0)
    assert local_slice(values, 4, 2, 3).tolist() == [8.0, 9.0, 10.0, 11.0]
    with pytest.raises(RuntimeError, match="not gathered from every process"):
        local_slice(values[:4], 4, 1, 3)


def test_per_process_shares_the_global_prompts():
    assert per_process(8, 2) == 4 and per_process(3, 1) == 3
    with pytest.raises(UserError, match="prompts_per_step=3 cannot be split over 2 processes"):
        per_process(3, 2)


# --------------------------------------------------------------------------- presets and command lines


@pytest.mark.parametrize(
    ("preset", "flags"),
    [
        ("ddp", {"multi_gpu": True, "use_fsdp": False, "use_deepspeed": False}),
        ("fsdp", {"multi_gpu": False, "use_fsdp": True, "use_deepspeed": False, "fsdp_version": 2}),
        ("zero3", {"multi_gpu": False, "use_fsdp": False, "use_deepspeed": True, "zero_stage": 3}),
    ],
)
def test_presets_parse_and_launch_the_worker(preset: str, flags: dict[str, Any], tmp_path):
    from accelerate.commands.config.config_args import ClusterConfig
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser

    path = preset_config(preset)
    assert path.is_file() and path.parent.name == "accelerate_configs"
    assert ClusterConfig.from_yaml_file(str(path)).num_machines == 1  # accelerate's own reader

    payload = tmp_path / "payload.json"
    command = launch_command(4, preset, payload, port=29123)
    assert command[:3] == [sys.executable, "-m", "accelerate.commands.launch"]
    args, _defaults, _mp = _validate_launch_command(launch_command_parser().parse_args(command[3:]))
    assert args.num_processes == 4 and args.num_machines == 1 and args.main_process_port == 29123
    assert args.module and args.training_script == "mrbench.engine.processes.distributed"
    assert args.training_script_args == [str(payload)]
    for name, value in flags.items():
        assert getattr(args, name) == value, name


def test_check_processes_names_bad_values():
    check_processes(2, "ddp", cuda=False)
    check_processes(8, "zero3", cuda=True)
    with pytest.raises(UserError, match=r"--processes-per-cell 0: expected an integer ≥ 1"):
        check_processes(0)
    with pytest.raises(UserError, match=r"--distributed 'fdsp' \(did you mean 'fsdp'\?\)"):
        check_processes(2, "fdsp")
    check_processes(2, "fsdp", cuda=False)  # FSDP2 over gloo (mrbench.engine.processes.sharding)
    with pytest.raises(UserError, match="--distributed zero3 needs CUDA GPUs"):
        check_processes(2, "zero3", cuda=False)
    assert set(DISTRIBUTED) == {"ddp", "fsdp", "zero3"}


# --------------------------------------------------------------------------- what ranks > 0 touch


def test_rank_zero_gets_the_store_and_the_folder(monkeypatch, tmp_path):
    monkeypatch.setenv("RANK", "0")
    folder = CellFolder(tmp_path / "cell")
    assert isinstance(rank_client(f"sqlite:///{tmp_path}/db", 1.0), RetryingClient)
    assert rank_folder(folder) is folder


def test_other_ranks_log_nothing_and_leave_rank_zeros_files(monkeypatch, tmp_path):
    monkeypatch.setenv("RANK", "1")
    client = rank_client("sqlite:///nowhere/never.db", 1.0)
    assert isinstance(client, SilentClient)
    # What a cell does with its client: experiment, run, log, end; no store is opened.
    experiment_id = ensure_experiment("e", client.tracking_uri, client=client)
    run_id = client.create_run(experiment_id, tags={}, run_name="x").info.run_id
    log = RunLog(client, run_id, tmp_path / "spool")
    log.metrics({"m": 1.0}, 1)
    log.json_artifact({"a": 1}, "config.json")
    log.flush()
    client.bounded(5.0).set_terminated(run_id, "FINISHED")
    assert not log.offline and not Path("nowhere").exists()

    real = CellFolder(tmp_path / "cell")
    real.write_pending(PendingRecord("r0"))  # rank 0's
    (real.root / "checkpoint-2").mkdir()
    replica = rank_folder(real)
    assert isinstance(replica, ReplicaFolder) and replica.root == real.root
    assert replica.read_pending() is None
    replica.clear_pending()
    replica.clear_step_checkpoints()
    replica.write_pending(PendingRecord("r1"))
    assert real.read_pending().run_id == "r0" and (real.root / "checkpoint-2").is_dir()


class _RankTrainer:
    def __init__(self, main: bool) -> None:
        self.main, self.saved_to = main, None

    def is_world_process_zero(self) -> bool:
        return self.main

    def save_model(self, path: str) -> None:
        self.saved_to = path
        if self.main:
            Path(path).mkdir(parents=True)
            (Path(path) / "model.txt").write_text("new")


def test_save_policy_other_ranks_join_the_save_and_write_nothing(tmp_path):
    final = tmp_path / "final"
    final.mkdir()
    (final / "model.txt").write_text("old")
    other = _RankTrainer(main=False)
    assert save_policy(other, final) == final
    assert other.saved_to is not None and (final / "model.txt").read_text() == "old"
    save_policy(_RankTrainer(main=True), final)
    assert (final / "model.txt").read_text() == "new"


# --------------------------------------------------------------------------- the launcher, for real


@dataclass
class ToySpec:
    """A spec with what the launcher reads: ``train.prompts_per_step``, ``run_key``, ``to_dict``."""

    name: str
    prompts_per_step: int = 2
    train: Any = field(init=False)
    method, task, model, seed = "m", "t", "x", 0

    def __post_init__(self) -> None:
        self.train = type("Train", (), {"prompts_per_step": self.prompts_per_step})()

    def run_key(self) -> str:
        return f"toy-{self.name}"

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "prompts_per_step": self.prompts_per_step}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ToySpec:
        return cls(**data)


@dataclass
class ToyResult:
    run_id: str
    world_size: int
    ranks_seen: str
    forked: bool
    env: dict[str, str] = field(default_factory=dict)


LAUNCH_VARS = (
    *("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "GROUP_RANK"),
    *("GROUP_WORLD_SIZE", "ROLE_RANK", "ROLE_NAME", "ROLE_WORLD_SIZE", "OMP_NUM_THREADS"),
)
"""What torchrun sets per rank (and the thread share): a forked rank must see the same."""


def toy_cell(spec: ToySpec, *, tag: str, launcher: int) -> ToyResult:
    """Every rank: fail with a UserError, or crash as a rehearsal does, when asked to; else return
    what rank 0 knows, with the launch variables it sees (``env``) when asked."""
    if spec.name == "fail" and distributed.rank() == 1:
        raise UserError("rank 1 refuses")
    if spec.name == "fail":  # rank 0 waits for rank 1's failure to end the launch
        import time

        time.sleep(60)
    if spec.name == "crash" and distributed.rank() == 0:  # as resume.py's rehearsed crash
        import signal

        os.killpg(os.getpgrp(), signal.SIGKILL)
    env = {}
    if spec.name == "env":
        env = {
            k: v for k, v in os.environ.items() if k.startswith(("ACCELERATE_", "FSDP_")) or k in LAUNCH_VARS
        }
    return ToyResult(
        f"{tag}-{distributed.rank()}",
        distributed.world_size(),
        os.environ.get("RANK", ""),
        forked=os.getppid() == launcher,
        env=env,
    )


def _toy_launch(name: str, fork: bool, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, **kw: Any) -> dict:
    monkeypatch.setenv("MRBENCH_RESULTS", str(tmp_path / "results"))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")])))
    monkeypatch.syspath_prepend(str(HERE))  # a forked rank imports the cell function here
    cell_fn = f"{Path(__file__).stem}:toy_cell"
    return launch_cell(
        ToySpec(name), processes=2, cell_fn=cell_fn, fork=fork, tag="t", launcher=os.getpid(), **kw
    )


# Ranks started by `accelerate launch` (each a new interpreter, what CUDA cells use) cost seconds
# more than forked ones: those cases run in the slow stage (`pytest -m slow`), the forked ones by default.
SLOW_LAUNCH = [
    pytest.param(False, id="accelerate-launch", marks=pytest.mark.slow),
    pytest.param(True, id="forked"),
]


@pytest.mark.parametrize("fork", SLOW_LAUNCH)
def test_launch_cell_returns_rank_zeros_result(fork, monkeypatch, tmp_path):
    result = _toy_launch("ok", fork, monkeypatch, tmp_path, threads=2)
    assert result == {"run_id": "t-0", "world_size": 2, "ranks_seen": "0", "forked": fork, "env": {}}


@pytest.mark.parametrize("fork", SLOW_LAUNCH)
def test_launch_cell_raises_a_ranks_user_error(fork, monkeypatch, tmp_path):
    with pytest.raises(UserError, match=r"^rank 1 refuses$"):
        _toy_launch("fail", fork, monkeypatch, tmp_path)


@pytest.mark.parametrize("fork", SLOW_LAUNCH)
def test_a_rank_that_kills_its_process_group_ends_the_launch_not_the_launcher(fork, monkeypatch, tmp_path):
    """A rehearsed crash (SIGKILL to the rank's own process group) ends every rank and leaves the
    launcher to report it, whichever way the ranks were started (each rank leads a session of its
    own; the launcher stops the others: torchrun exits 1, forked ranks give the killed rank's -9)."""
    with pytest.raises(RuntimeError, match=r"^the cell's 2 processes exited with code"):
        _toy_launch("crash", fork, monkeypatch, tmp_path)


@pytest.mark.parametrize("preset", ["ddp", "fsdp"])
def test_forked_ranks_see_what_accelerate_launch_gives_its_ranks(preset, monkeypatch, tmp_path):
    """The environment of a forked rank is the one ``accelerate launch`` builds (its preset's
    ``ACCELERATE_*``/``FSDP_*`` variables, torchrun's per-rank ones), the port aside."""
    launched = _toy_launch("env", False, monkeypatch, tmp_path, distributed=preset, threads=2)
    forked = _toy_launch("env", True, monkeypatch, tmp_path, distributed=preset, threads=2)
    assert forked["forked"] and not launched["forked"]
    assert forked["env"]["RANK"] == "0" and forked["env"]["WORLD_SIZE"] == "2"
    assert forked["env"]["OMP_NUM_THREADS"] == "1"
    if preset == "fsdp":
        assert forked["env"]["ACCELERATE_USE_FSDP"] == "true" and forked["env"]["FSDP_VERSION"] == "2"
    assert forked["env"] == launched["env"]


def test_ranks_are_launched_by_accelerate_when_asked_or_on_cuda(monkeypatch):
    from mrbench.engine.processes import rank_fork

    monkeypatch.delenv("MRBENCH_RANK_LAUNCH", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert rank_fork.can_fork("fsdp") and rank_fork.can_fork("ddp") and not rank_fork.can_fork("zero3")
    monkeypatch.setenv("MRBENCH_RANK_LAUNCH", "accelerate")
    assert not rank_fork.can_fork("fsdp")
    monkeypatch.delenv("MRBENCH_RANK_LAUNCH")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert not rank_fork.can_fork("ddp")


# --------------------------------------------------------------------------- settings


def test_sweep_settings_carry_processes_per_cell(tmp_path):
    config = tmp_path / "s.yaml"
    config.write_text("processes_per_cell: 2\ndistributed: fsdp\n")
    spec = build_sweep_spec(config=config)
    assert (spec.processes_per_cell, spec.distributed) == (2, "fsdp")
    assert spec.to_dict()["processes_per_cell"] == 2
    cli = build_sweep_spec(overrides={"processes_per_cell": "4"})
    assert (cli.processes_per_cell, cli.distributed) == (4, "ddp")
    for text, says in (
        ("processes_per_cell: 0\n", "'processes_per_cell'"),
        ("distributed: horovod\n", "'distributed'"),
    ):
        config.write_text(text)
        with pytest.raises(UserError, match=says):
            build_sweep_spec(config=config)


def test_cell_payload_and_checks_for_multi_process_cells(tmp_path):
    cell = Cell(ToySpec("a", prompts_per_step=3))
    ctx = CellContext("sqlite:///x.db", "e", None, "s", toy_cell, tmp_path, None, 2, "ddp")
    payload = cell_payload(cell, ctx, "m:f", 4, None)
    assert (payload["processes_per_cell"], payload["distributed"]) == (2, "ddp")
    check_processes_per_cell([cell], 1, "ddp")
    check_processes_per_cell([cell], 3, "ddp")
    with pytest.raises(UserError, match=r"cell m\|t\|x\|s0: train.prompts_per_step=3 cannot be split"):
        check_processes_per_cell([cell], 2, "ddp")


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--processes-per-cell", "0"], "'--processes-per-cell': Input should be greater than or equal to 1"),
        (["--processes-per-cell", "2", "--distributed", "zero3"], "needs CUDA GPUs"),
        (["--processes-per-cell", "2", "--train", "prompts_per_step=3"], "cannot be split over 2"),
    ],
)
def test_mrbench_run_rejects_bad_process_settings(args, says, monkeypatch, capsys, tmp_path):
    from mrbench.cli.app import main

    monkeypatch.setenv("MRBENCH_RESULTS", str(tmp_path))
    monkeypatch.setattr(sys, "argv", ["mrbench", "run", *args])
    with pytest.raises(SystemExit) as exited:
        main()
    assert exited.value.code == 2
    assert says in capsys.readouterr().err
    assert not (tmp_path / "mlflow.db").exists()  # rejected before the store was touched


def test_ranks_stopped_after_another_crashed_are_a_crash_not_an_interrupt() -> None:
    """A rank that SIGKILLed itself (launch code -9) while the launcher stopped the other one (which
    ends "interrupted") is the crash; only a launch ended by a stop signal is an interrupt."""
    from mrbench.core.cell_protocol import RankEnd
    from mrbench.engine.processes.distributed import _outcome

    with pytest.raises(RuntimeError, match=r"^the cell's 2 processes exited with code -9$"):
        _outcome([RankEnd(interrupted=True)], -9, 2)
    with pytest.raises(KeyboardInterrupt):
        _outcome([RankEnd(interrupted=True), RankEnd(interrupted=True)], 130, 2)
