"""Resume inside a multi-process cell: a 2-process cell (DDP over gloo on CPU) killed with SIGKILL
mid-training goes on from its last training checkpoint in the same MLflow run and ends exactly
where an uninterrupted 2-process run ends.

Both cells are real ``mrbench run --processes-per-cell 2`` processes (one thread per rank), with
real sampled generation: each rank draws its completions from its own RNG, so the comparison
holds only if every rank restored the same checkpoint and its own RNG state. The comparison is
bit for bit (every per-step metric, the last batch's completions and advantages, the diagnostics,
the final evaluation), as in ``test_resume_cell.py``, whose helpers this test uses.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from mlflow.tracking import MlflowClient
from test_resume_cell import LOSS, _assert_resumed_like_whole, _complete_checkpoints, _only_run

from mrbench.engine.cell import resume

# 8 prompts, 2 per step: an epoch is 4 steps, so any checkpoint resumes past the first epoch. A step
# takes a fraction of a second: 30 of them leave the time to kill the cell between two checkpoints.
STEPS, EVERY = 30, 5
TASK_PARAMS = {"n_train": "8", "n_eval": "2"}
TRAIN = {"steps": str(STEPS), "num_generations": "2", "prompts_per_step": "2", "eval_limit": "2"}
TRAIN |= {"max_completion_length": "24"}


def _start(model_dir: Path, root: Path, name: str) -> subprocess.Popen:
    root.mkdir(parents=True, exist_ok=True)
    args = [sys.executable, "-m", "mrbench", "run", "--method", "gdpo", "--model", str(model_dir)]
    args += ["--seed", "1", "--tracking-uri", f"sqlite:///{root}/mlflow.db", "--experiment", "resume"]
    args += ["--quiet", "--checkpoint-every", str(EVERY), "--processes-per-cell", "2"]
    args += [x for k, v in TASK_PARAMS.items() for x in ("--task-param", f"{k}={v}")]
    args += [x for k, v in TRAIN.items() for x in ("--train", f"{k}={v}")]
    env = {**os.environ, "MRBENCH_RESULTS": str(root / "results"), "OMP_NUM_THREADS": "1"}
    env.pop("MRBENCH_CHECKPOINT_EVERY", None)
    log = (root / f"{name}.log").open("wb")
    return subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env)


def _kill_all(proc: subprocess.Popen) -> None:
    """SIGKILL the launcher and everything under it (``accelerate launch`` runs the ranks in a
    process group of its own): a machine that went away, not a stop signal the cell could handle."""
    victims = [proc.pid, *(child.pid for child in psutil.Process(proc.pid).children(recursive=True))]
    for pid in victims:
        with contextlib.suppress(ProcessLookupError):  # it ended on its own meanwhile
            os.kill(pid, signal.SIGKILL)
    proc.wait()
    for pid in victims[1:]:
        with contextlib.suppress(psutil.NoSuchProcess):  # already reaped
            psutil.Process(pid).wait(timeout=30)


def _kill_after_checkpoint(proc: subprocess.Popen, root: Path, timeout_s: float = 300) -> tuple[int, int]:
    """Kill the cell once a checkpoint is complete and a later step is logged; return the newest
    complete checkpoint's step and the last step the cell logged."""
    uri = f"sqlite:///{root}/mlflow.db"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, (root / "killed.log").read_text()[-3000:]
        complete = _complete_checkpoints(root)
        if complete and complete[-1] < STEPS - EVERY:
            run_id = _only_run(uri, "resume").info.run_id
            logged = [m.step for m in MlflowClient(uri).get_metric_history(run_id, LOSS)]
            if max(logged, default=0) > complete[-1]:
                _kill_all(proc)
                logged = [m.step for m in MlflowClient(uri).get_metric_history(run_id, LOSS)]
                return _complete_checkpoints(root)[-1], max(logged)
        time.sleep(0.02)
    _kill_all(proc)
    raise AssertionError("no complete checkpoint in time")


@pytest.mark.slow
def test_a_two_process_cell_killed_with_sigkill_resumes_and_ends_as_an_uninterrupted_one(
    micro_model_dir: Path, tmp_path: Path
) -> None:
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    reference = _start(micro_model_dir, whole, "whole")
    victim = _start(micro_model_dir, killed, "killed")
    step, last_logged = _kill_after_checkpoint(victim, killed)
    assert step % EVERY == 0 and last_logged < STEPS
    uri = f"sqlite:///{killed}/mlflow.db"
    run_id = _only_run(uri, "resume").info.run_id
    assert _only_run(uri, "resume").info.status == "RUNNING"  # nothing ended it: every process died
    checkpoint = next((killed / "results" / "checkpoints").iterdir()) / f"checkpoint-{step}"
    marker = json.loads((checkpoint / resume.MARKER).read_text())
    # Rank 0 vouched for the checkpoint only once both ranks had written their RNG state.
    assert marker["processes"] == 2 and {"rng_state_0.pth", "rng_state_1.pth"} <= set(marker["files"])
    assert reference.wait(timeout=600) == 0, (whole / "whole.log").read_text()[-3000:]

    again = _start(micro_model_dir, killed, "again")
    assert again.wait(timeout=600) == 0, (killed / "again.log").read_text()[-3000:]
    _assert_resumed_like_whole(killed, whole, run_id, step, last_logged, STEPS, tmp_path)
