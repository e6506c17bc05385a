"""Training checkpoints of sharded cells (finding 4 of issue 33): FSDP's and DeepSpeed's layouts are
resumed, and a kept (``save every:N``) one drops their optimizer state.

The FSDP files are accelerate's own, written in a real 2-process FSDP2 world on the CPU
(:mod:`fsdp_world`) in both state-dict types; the DeepSpeed ZeRO-3 folder is laid out by hand as
DeepSpeed's ``save_checkpoint`` names its files (``mrbench.engine.cell.checkpoint_layout``), since
DeepSpeed needs GPUs. Each checkpoint is completed by mrbench's own :class:`CheckpointWriter`, as
rank 0 of a 2-process cell completes it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from fsdp_world import WORLD
from safetensors.torch import save_file

from mrbench.engine.cell import checkpoint_layout, resume
from mrbench.engine.cell.checkpoints import CellFolder, parse_save

KEY = "sharded-key"


@pytest.fixture
def two_processes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> CellFolder:
    """Rank 0 of a 2-process cell, results under ``tmp_path``: the cell's folder."""
    monkeypatch.setenv("MRBENCH_RESULTS", str(tmp_path / "results"))
    monkeypatch.setenv("WORLD_SIZE", str(WORLD))
    monkeypatch.setenv("RANK", "0")
    return CellFolder.for_run_key(KEY)


def _files(path: Path) -> set[str]:
    return {str(p.relative_to(path)) for p in path.rglob("*") if p.is_file()}


def _checkpoint(folder: CellFolder, step: int, layout: Path | None = None, *, weights: bool = True) -> Path:
    """``checkpoint-<step>`` with the files every layout has (scheduler, trainer state, one RNG
    state per process), ``layout``'s model and optimizer files and, with ``weights``, the
    consolidated ``model.safetensors``; not completed."""
    path = folder.root / f"checkpoint-{step}"
    path.mkdir(parents=True)
    if layout is not None:
        shutil.copytree(layout, path, dirs_exist_ok=True)
    if weights:
        save_file({"w": torch.arange(6.0)}, str(path / "model.safetensors"))
    torch.save({"last_epoch": step}, path / "scheduler.pt")
    for r in range(WORLD):
        torch.save({"python": r}, path / f"rng_state_{r}.pth")
    (path / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    return path


def _writer(folder: CellFolder, keep_every: int = 0) -> resume.CheckpointWriter:
    start = resume.CellStart("r1", KEY, "sqlite:///x.db", "1", parse_save("final"), 2, None)

    def save_running_state(checkpoint: Path) -> tuple[dict[str, int], int]:
        (checkpoint / "mrbench-rewards.npz").write_bytes(b"rewards")
        return {}, 0

    trainer = SimpleNamespace(save_running_state=save_running_state)
    writer = resume.CheckpointWriter(trainer, folder, start)
    writer.keep_every = keep_every
    return writer


def _deepspeed_layout(root: Path, step: int, *, ranks: int = WORLD) -> Path:
    """A ZeRO-3 checkpoint's DeepSpeed files as its ``save_checkpoint`` names them under bf16."""
    tag = root / f"global_step{step}"
    tag.mkdir(parents=True)
    for r in range(ranks):
        torch.save({"optimizer_state_dict": r}, tag / f"bf16_zero_pp_rank_{r}_mp_rank_00_optim_states.pt")
        torch.save({"module": None, "param_shapes": r}, tag / f"zero_pp_rank_{r}_mp_rank_00_model_states.pt")
    (root / "latest").write_text(tag.name)
    (root / "zero_to_fp32.py").write_text("# DeepSpeed's recovery script\n")
    return root


def test_accelerate_writes_the_fsdp_layouts_mrbench_reads(fsdp_world: Path) -> None:
    assert _files(fsdp_world / "FULL_STATE_DICT") == {"optimizer.bin", "pytorch_model_fsdp.bin"}
    shards = {f"__{r}_0.distcp" for r in range(WORLD)} | {".metadata"}
    assert _files(fsdp_world / "SHARDED_STATE_DICT") == {
        f"{folder}/{name}" for folder in checkpoint_layout.FSDP_SHARDED for name in shards
    }


@pytest.mark.parametrize("kind", ["FULL_STATE_DICT", "SHARDED_STATE_DICT"])
def test_an_fsdp_checkpoint_is_resumed(kind: str, fsdp_world: Path, two_processes: CellFolder) -> None:
    # FULL_STATE_DICT checkpoints also get model.safetensors (Trainer.save_model); sharded ones do not.
    path = _checkpoint(two_processes, 4, fsdp_world / kind, weights=kind == "FULL_STATE_DICT")
    _writer(two_processes).complete(path, 4)
    assert resume.checkpoint_problem(path, KEY) is None
    point = resume.latest_resume_point(two_processes, KEY)
    assert point is not None and point.path == path  # not deleted as unusable


def test_a_sharded_state_missing_a_rank_is_named(fsdp_world: Path) -> None:
    files = {f"{kind}" for kind in _files(fsdp_world / "SHARDED_STATE_DICT")}
    assert checkpoint_layout.state_problem(files, 4, WORLD) is None
    problem = checkpoint_layout.state_problem(files - {"optimizer_0/__1_0.distcp"}, 4, WORLD)
    assert problem == "its sharded state is incomplete (optimizer_0/__1_0.distcp missing)"
    assert "__2_0.distcp" in checkpoint_layout.state_problem(files, 4, 3)  # written by 2, read by 3
    full = {"optimizer.bin"}
    assert checkpoint_layout.state_problem(full, 4, WORLD) == "pytorch_model_fsdp.bin is missing"


@pytest.mark.parametrize("weights", [True, False], ids=["16-bit-weights", "no-weights"])
def test_a_deepspeed_zero3_checkpoint_is_resumed(
    weights: bool, tmp_path: Path, two_processes: CellFolder
) -> None:
    layout = _deepspeed_layout(tmp_path / "ds", 4)
    path = _checkpoint(two_processes, 4, layout, weights=weights)
    _writer(two_processes).complete(path, 4)
    assert resume.checkpoint_problem(path, KEY) is None
    assert resume.latest_resume_point(two_processes, KEY) is not None


def test_a_deepspeed_checkpoint_missing_a_rank_is_refused(tmp_path: Path, two_processes: CellFolder) -> None:
    path = _checkpoint(two_processes, 4, _deepspeed_layout(tmp_path / "ds", 4, ranks=1))
    _writer(two_processes).complete(path, 4)
    assert resume.checkpoint_problem(path, KEY) == "global_step4/ has no optimizer state of rank(s) 1"
    # DeepSpeed's folder of another step is not this checkpoint's state.
    other = _checkpoint(two_processes, 6, _deepspeed_layout(tmp_path / "ds6", 4))
    _writer(two_processes).complete(other, 6)
    assert "optimizer state is missing" in resume.checkpoint_problem(other, KEY)


_TRAINING = ("optimizer", "pytorch_model_fsdp", "rng_state", "scheduler.pt", resume.MARKER, "global_step")


def _kept_files(kept: Path) -> set[str]:
    """The files of a kept checkpoint, checked to hold no training state (nor any sharded copy of
    the model, which the consolidated weights make redundant)."""
    files = _files(kept)
    assert not [f for f in files if f.startswith(_TRAINING) and not f.endswith("model_states.pt")]
    return files


def _kept_after_next(folder: CellFolder, first: Path) -> Path:
    """Complete ``first`` (step 2), then step 4 with save every:2: ``first`` is kept, model-only."""
    writer = _writer(folder, keep_every=2)
    writer.complete(first, 2)
    writer.complete(_checkpoint(folder, 4), 4)
    assert first.is_dir()
    return first


def test_a_kept_fsdp_checkpoint_keeps_only_its_model(fsdp_world: Path, two_processes: CellFolder) -> None:
    kept = _kept_after_next(two_processes, _checkpoint(two_processes, 2, fsdp_world / "FULL_STATE_DICT"))
    assert {"model.safetensors", "trainer_state.json"} <= _kept_files(kept)
    assert not resume._is_training_checkpoint(kept)  # model-only: resuming skips it, keeps it


def test_a_kept_deepspeed_checkpoint_keeps_only_its_model(tmp_path: Path, two_processes: CellFolder) -> None:
    with_weights = _checkpoint(two_processes, 2, _deepspeed_layout(tmp_path / "a", 2))
    left = _kept_files(_kept_after_next(two_processes, with_weights))
    assert {"model.safetensors", "trainer_state.json"} <= left
    assert not {"latest", "zero_to_fp32.py"} & left and not any(f.startswith("global_step") for f in left)

    shutil.rmtree(two_processes.root)
    # Without consolidated weights DeepSpeed's model states are the model: they stay, with what
    # turns them into a state dict; the optimizer's partitions go.
    bare = _checkpoint(two_processes, 2, _deepspeed_layout(tmp_path / "b", 2), weights=False)
    assert _kept_files(_kept_after_next(two_processes, bare)) >= {
        "trainer_state.json",
        "latest",
        "zero_to_fp32.py",
        *(f"global_step2/zero_pp_rank_{r}_mp_rank_00_model_states.pt" for r in range(WORLD)),
    }
    assert not resume._is_training_checkpoint(bare)
