"""A full disk or the file size limit is no fault of the cell: its run ends KILLED, not FAILED, with
its last complete training checkpoint kept, the command says so in one line, and the same cell run
again once there is room resumes from that checkpoint.

The cell test fills a small tmpfs (root only; skipped otherwise) right after the cell's first
checkpoint: the free-space check refuses the next one before it is written, or, with the check off,
torch's writer fails half-way through ``optimizer.pt`` (which says only "[enforce fail at
inline_container.cc:…] unexpected pos …").
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from mrbench.core import layout
from mrbench.engine.cell import resume
from mrbench.engine.cell.checkpoints import CellFolder
from mrbench.engine.cell.runner import run_cell
from mrbench.engine.config import resolve_spec
from mrbench.engine.runs.run_guard import ends_run_on_error
from mrbench.store.client import RetryingClient, ensure_experiment
from mrbench.store.empty_store import seed_new_store
from mrbench.store.faults import OutOfRoom, describe_fault

TASK_PARAMS = {"n_train": "16", "n_eval": "4"}
TRAIN = {"steps": "4", "num_generations": "2", "prompts_per_step": "2", "eval_limit": "4"}


def _open_run(tmp_path: Path) -> tuple[RetryingClient, str]:
    seed_new_store(tmp_path / "mlflow.db")  # a copy of the empty store: no schema migration
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    client = RetryingClient(uri, retry_s=5)
    experiment = ensure_experiment("room", uri, client=client)
    return client, client.create_run(experiment).info.run_id


def test_a_run_that_finds_no_room_ends_killed_and_names_its_folder(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("MRBENCH_RESULTS", str(tmp_path / "results"))
    client, run_id = _open_run(tmp_path)
    folder = tmp_path / "results" / "checkpoints" / "key"
    # torch's zip writer on a full disk: a RuntimeError that names no cause
    torch_full = RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 576 vs 534")
    monkeypatch.setattr("mrbench.store.faults._LOW_SPACE_BYTES", 2**62)  # "the disk is almost full"
    with pytest.raises(OutOfRoom) as err, ends_run_on_error(client, run_id, writes_to=folder):
        raise torch_full
    assert err.value.__cause__ is torch_full and err.value.errno == errno.ENOSPC
    run = client.get_run(run_id)
    assert run.info.status == "KILLED"
    assert layout.read_tag(run.data.tags, layout.ERROR).startswith("the disk is full: RuntimeError")
    line = describe_fault(err.value)
    assert line is not None and line.startswith(f"cannot write {folder}: the disk is full"), line

    client, run_id = _open_run(tmp_path)
    with pytest.raises(ValueError), ends_run_on_error(client, run_id, writes_to=folder):
        raise ValueError("a bug")
    assert client.get_run(run_id).info.status == "FAILED"


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 16 MB tmpfs (root only: skipped otherwise), unmounted after the test."""
    folder = tmp_path / "disk"
    folder.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    mount = ["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(folder)]
    mounted = subprocess.run(mount, capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=True)


@pytest.mark.slow
@pytest.mark.parametrize("writer", ["free-space check", "torch's writer"])
def test_a_cell_on_a_full_disk_ends_killed_keeps_its_checkpoint_and_resumes(
    micro_model_dir: Path, small_disk: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, writer: str
) -> None:
    monkeypatch.setenv("MRBENCH_RESULTS", str(small_disk / "results"))  # the store stays off the disk
    monkeypatch.delenv("MRBENCH_CHECKPOINT_EVERY", raising=False)
    spec = resolve_spec("gdpo", "tool-calling", str(micro_model_dir), 2, task_params=TASK_PARAMS, train=TRAIN)
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    filler = small_disk / "filler"
    complete = resume.CheckpointWriter.complete

    def complete_then_fill(self, path: Path, step: int) -> None:
        complete(self, path, step)
        if step == 2:  # leave room for the next checkpoint but half its optimizer state (written last
            # but for a few small files): the check refuses it, or torch's writer fails half-way
            files = {p.name: p.stat().st_size for p in path.iterdir() if p.is_file()}
            room = sum(files.values()) - files["optimizer.pt"] // 2
            filler.write_bytes(b"\0" * max(0, shutil.disk_usage(small_disk).free - room))

    with monkeypatch.context() as patch:
        patch.setattr(resume.CheckpointWriter, "complete", complete_then_fill)
        if writer == "torch's writer":
            patch.setattr(resume, "require_room_for_checkpoint", lambda trainer, folder: None)
        with pytest.raises(OutOfRoom) as err:
            run_cell(spec, tracking_uri=uri, experiment="room", progress=False, checkpoint_every=2)
    folder = CellFolder.for_run_key(spec.run_key())
    line = describe_fault(err.value)
    assert line is not None and line.startswith(f"cannot write {folder.root}: the disk is full"), line
    client = MlflowClient(uri)
    (killed,) = client.search_runs([client.get_experiment_by_name("room").experiment_id])
    assert killed.info.status == "KILLED"
    error = layout.read_tag(killed.data.tags, layout.ERROR)
    assert error.startswith("the disk is full"), error
    if writer == "torch's writer":
        assert "RuntimeError: [enforce fail at inline_container.cc" in error, error
    assert (folder.root / "checkpoint-2" / resume.MARKER).is_file()  # the last good one, kept
    assert not (folder.root / "checkpoint-4" / resume.MARKER).exists()

    filler.unlink()  # room again: the same cell resumes from step 2, in the same run
    done = run_cell(spec, tracking_uri=uri, experiment="room", progress=False, checkpoint_every=2)
    assert done.run_id == killed.info.run_id and done.status == "FINISHED"
    run = client.get_run(done.run_id)
    assert run.info.status == "FINISHED" and layout.read_tag(run.data.tags, layout.RESUMED_FROM) == "2"
