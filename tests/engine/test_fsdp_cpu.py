"""``--distributed fsdp`` on the CPU: accelerate's FSDP2 path over gloo (engine.processes.sharding).

The default test builds accelerate's ``Accelerator`` in a real 2-process gloo world
(:mod:`fsdp_world`), with the environment ``accelerate launch`` gives an ``fsdp`` preset's worker,
and checks that it shards (FSDP2 ``DTensor`` parameters, one AdamW step) and reduces gradients in
float32 under bf16 mixed precision. Without mrbench's adjustment accelerate keeps such a process
``MULTI_CPU`` (DDP) and its policy reduces in bfloat16.

The slow test trains a real 2-process FSDP cell (``mrbench run --processes-per-cell 2
--distributed fsdp``), which checkpoints in FSDP's layout, kills it with SIGKILL, resumes it and
checks it ends bit for bit as the uninterrupted FSDP cell (the machinery of
``test_resume_distributed.py``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fsdp_world import WORLD
from mlflow.tracking import MlflowClient
from test_resume_cell import _assert_resumed_like_whole, _only_run
from test_resume_distributed import EVERY, STEPS, TASK_PARAMS, TRAIN, _kill_after_checkpoint

from mrbench.engine.cell import resume


def test_an_fsdp_worker_on_the_cpu_shards_and_reduces_gradients_in_float32(fsdp_world: Path) -> None:
    for r in range(WORLD):
        reports = json.loads((fsdp_world / f"rank{r}.json").read_text())
        assert reports["adapted"] == {
            "type": "DistributedType.FSDP",
            "param": "DTensor",  # FSDP2's sharded parameters
            "param_dtype": "torch.float32",  # the masters the update is applied to
            "reduce_dtype": "torch.float32",
            "compute_dtype": "torch.bfloat16",
        }
        # What mrbench.engine.processes.sharding exists for (accelerate 1.16): plain DDP over gloo.
        assert reports["plain"]["type"] == "DistributedType.MULTI_CPU"
        assert reports["plain"]["param"] == "Parameter"


# --------------------------------------------------------------------------- a real FSDP cell, SIGKILLed


def _start_fsdp(model_dir: Path, root: Path, name: str) -> subprocess.Popen:
    """``mrbench run --processes-per-cell 2 --distributed fsdp`` of the cell of
    ``test_resume_distributed.py`` (one thread per rank)."""
    root.mkdir(parents=True, exist_ok=True)
    args = [sys.executable, "-m", "mrbench", "run", "--method", "gdpo", "--model", str(model_dir)]
    args += ["--seed", "1", "--tracking-uri", f"sqlite:///{root}/mlflow.db", "--experiment", "resume"]
    args += [
        "--quiet",
        "--checkpoint-every",
        str(EVERY),
        "--processes-per-cell",
        "2",
        "--distributed",
        "fsdp",
    ]
    args += [x for k, v in TASK_PARAMS.items() for x in ("--task-param", f"{k}={v}")]
    args += [x for k, v in TRAIN.items() for x in ("--train", f"{k}={v}")]
    env = {**os.environ, "MRBENCH_RESULTS": str(root / "results"), "OMP_NUM_THREADS": "1"}
    env.pop("MRBENCH_CHECKPOINT_EVERY", None)
    log = (root / f"{name}.log").open("wb")
    MlflowClient(f"sqlite:///{root}/mlflow.db").search_experiments(max_results=1)  # the store exists first
    return subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env)


@pytest.mark.slow
def test_a_two_process_fsdp_cell_killed_with_sigkill_resumes_and_ends_as_an_uninterrupted_one(
    micro_model_dir: Path, tmp_path: Path
) -> None:
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    reference = _start_fsdp(micro_model_dir, whole, "whole")
    victim = _start_fsdp(micro_model_dir, killed, "killed")
    step, last_logged = _kill_after_checkpoint(victim, killed, timeout_s=600)
    assert step % EVERY == 0 and last_logged < STEPS
    uri = f"sqlite:///{killed}/mlflow.db"
    run_id = _only_run(uri, "resume").info.run_id
    checkpoint = next((killed / "results" / "checkpoints").iterdir()) / f"checkpoint-{step}"
    files = set(json.loads((checkpoint / resume.MARKER).read_text())["files"])
    # FSDP's layout (the fsdp preset's FULL_STATE_DICT; only a trainer with FSDP enabled writes it),
    # one RNG state per rank, no optimizer.pt.
    assert {"optimizer.bin", "pytorch_model_fsdp.bin", "rng_state_0.pth", "rng_state_1.pth"} <= files
    assert "optimizer.pt" not in files
    assert reference.wait(timeout=900) == 0, (whole / "whole.log").read_text()[-3000:]

    again = _start_fsdp(micro_model_dir, killed, "again")
    assert again.wait(timeout=900) == 0, (killed / "again.log").read_text()[-3000:]
    _assert_resumed_like_whole(killed, whole, run_id, step, last_logged, STEPS, tmp_path)
