"""Resume inside a cell: a real cell killed mid-training goes on from its last training checkpoint in
the same MLflow run and ends exactly where an uninterrupted run ends; unusable checkpoints are
named, skipped and never crash the cell.

The SIGKILL test runs real ``mrbench run`` processes (one thread each: CPU float results depend
on the thread count) and compares the resumed run with an uninterrupted one of the same seed, bit
for bit: every per-step metric, the advantages and rewards of the last batch
(``samples/completions.jsonl``), the diagnostics and the final evaluation.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from mlflow.tracking import MlflowClient

from mrbench.core import layout
from mrbench.core.errors import UserError
from mrbench.core.rewards_record import RewardsRecord
from mrbench.engine.cell import resume
from mrbench.engine.cell.checkpoints import CellFolder, parse_save
from mrbench.engine.cell.runner import run_cell
from mrbench.engine.config import resolve_spec
from mrbench.engine.training.step_diagnostics import StepDiagnostics
from mrbench.store.client import RetryingClient, ensure_experiment

TASK_PARAMS = {"n_train": "16", "n_eval": "4"}
# 16 prompts, 2 per step: an epoch is 8 steps, so the checkpoint at step 10 resumes inside epoch 2.
# The cell is killed after it (checkpoints at 5, 10 and 15), while steps 11-15 run.
STEPS, EVERY, KILL_AFTER = 16, 5, 10
TRAIN = {"steps": str(STEPS), "num_generations": "2", "prompts_per_step": "2", "eval_limit": "4"}


@dataclass(frozen=True)
class KillPlan:
    """The cell a SIGKILL test runs (tool calling: its rewards are exact, so two runs compare bit
    for bit) and when it is killed: after checkpoint ``kill_after``, while later steps run."""

    task_params: dict[str, str]
    train: dict[str, str]
    steps: int
    every: int
    kill_after: int


MICRO_PLAN = KillPlan(TASK_PARAMS, TRAIN, STEPS, EVERY, KILL_AFTER)
LOSS = layout.step_metric("loss")
# Wall-clock figures: they differ between any two runs.
TIMING = ("perf/", "train/step_time", "train/train_runtime", "train/train_samples_per_second")
TIMING += ("train/train_steps_per_second",)
ARTIFACTS = (layout.DIAGNOSTICS_ARTIFACT, layout.COMPLETIONS_ARTIFACT, layout.EVAL_SAMPLES_AFTER)


@pytest.fixture
def results(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "results"
    monkeypatch.setenv("MRBENCH_RESULTS", str(path))
    monkeypatch.delenv("MRBENCH_CHECKPOINT_EVERY", raising=False)
    return path


# ------------------------------------------------------------------ comparing two runs


def _only_run(uri: str, experiment: str) -> object:
    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name(experiment).experiment_id])
    assert len(runs) == 1, [r.info.run_id for r in runs]
    return runs[0]


def _histories(uri: str, run: object) -> dict[str, dict[int, float]]:
    """Per metric: step → value, the latest write per step winning (as the report reads it)."""
    client = MlflowClient(uri)
    out = {}
    for key in run.data.metrics:
        if key.startswith(TIMING):
            continue
        points = sorted(client.get_metric_history(run.info.run_id, key), key=lambda m: m.timestamp)
        out[key] = {m.step: m.value for m in points}
    return out


def _artifacts(uri: str, run: object, into: Path) -> dict[str, str]:
    client = MlflowClient(uri)
    return {
        name: Path(client.download_artifacts(run.info.run_id, name, str(into))).read_text()
        for name in ARTIFACTS
    }


def _assert_same_training(uri_a: str, uri_b: str, experiment: str, steps: int, tmp: Path) -> None:
    """The only runs of ``experiment`` in stores ``uri_a`` and ``uri_b`` trained alike, bit for bit."""
    run_a, run_b = _only_run(uri_a, experiment), _only_run(uri_b, experiment)
    assert run_a.info.status == run_b.info.status == "FINISHED"
    ha, hb = _histories(uri_a, run_a), _histories(uri_b, run_b)
    assert sorted(ha) == sorted(hb)
    assert set(ha[LOSS]) == set(range(1, steps + 1))
    for key in ha:
        assert ha[key] == hb[key], key  # bit for bit
    assert _artifacts(uri_a, run_a, tmp / "a") == _artifacts(uri_b, run_b, tmp / "b")
    # rewards.npz holds every step's rewards, those from before the kill included (from the checkpoint).
    rewards = [
        RewardsRecord.load(
            MlflowClient(uri).download_artifacts(run.info.run_id, layout.REWARDS_ARTIFACT, str(into))
        )
        for uri, run, into in ((uri_a, run_a, tmp / "ra"), (uri_b, run_b, tmp / "rb"))
    ]
    assert rewards[0].rewards.shape[0] == steps
    assert np.array_equal(rewards[0].rewards, rewards[1].rewards, equal_nan=True)
    assert np.array_equal(rewards[0].prompt_ids, rewards[1].prompt_ids)


# ------------------------------------------------------------------ a real cell, killed with SIGKILL


def _cell_command(model_dir: Path, uri: str, plan: KillPlan = MICRO_PLAN) -> list[str]:
    args = [sys.executable, "-m", "mrbench", "run", "--method", "gdpo", "--model", str(model_dir)]
    args += ["--seed", "1", "--tracking-uri", uri, "--experiment", "resume", "--quiet"]
    args += ["--checkpoint-every", str(plan.every)]
    args += [x for k, v in plan.task_params.items() for x in ("--task-param", f"{k}={v}")]
    return args + [x for k, v in plan.train.items() for x in ("--train", f"{k}={v}")]


def _start(model_dir: Path, root: Path, name: str, plan: KillPlan = MICRO_PLAN) -> subprocess.Popen:
    root.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "MRBENCH_RESULTS": str(root / "results"), "OMP_NUM_THREADS": "1"}
    env.pop("MRBENCH_CHECKPOINT_EVERY", None)
    log = (root / f"{name}.log").open("wb")
    uri = f"sqlite:///{root}/mlflow.db"
    # The store exists before the cell starts: the test's own client, opened while the cell created
    # the tables, would race it (mrbench's creation lock serialises mrbench processes only).
    MlflowClient(uri).search_experiments(max_results=1)
    return subprocess.Popen(
        _cell_command(model_dir, uri, plan), stdout=log, stderr=subprocess.STDOUT, env=env
    )


def _complete_checkpoints(root: Path) -> list[int]:
    found = (root / "results" / "checkpoints").glob(f"*/checkpoint-*/{resume.MARKER}")
    return sorted(int(marker.parent.name.removeprefix("checkpoint-")) for marker in found)


def _kill_after_checkpoint(
    proc: subprocess.Popen, root: Path, timeout_s: float = 300, plan: KillPlan = MICRO_PLAN
) -> tuple[int, int]:
    """SIGKILL ``proc`` once checkpoint ``plan.kill_after`` is the newest complete one and a later
    step is logged; return the newest complete checkpoint's step and the last step the cell logged.

    The next checkpoint comes ``plan.every`` steps later: a window of several steps, where killing
    after the last checkpoint would leave only the final steps and the evaluation, which a quick
    cell can finish first.
    """
    client = MlflowClient(f"sqlite:///{root}/mlflow.db")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, (root / "killed.log").read_text()[-3000:]
        complete = _complete_checkpoints(root)
        if complete and complete[-1] == plan.kill_after:
            run = _only_run(f"sqlite:///{root}/mlflow.db", "resume")
            logged = [m.step for m in client.get_metric_history(run.info.run_id, LOSS)]
            if max(logged, default=0) > complete[-1]:
                proc.send_signal(signal.SIGKILL)
                assert proc.wait() == -signal.SIGKILL, "the cell ended before the kill reached it"
                last = max(m.step for m in client.get_metric_history(run.info.run_id, LOSS))
                return _complete_checkpoints(root)[-1], last
        time.sleep(0.02)
    proc.kill()
    raise AssertionError("no complete checkpoint in time")


def _assert_resumed_like_whole(
    killed: Path,
    whole: Path,
    run_id: str,
    checkpoint: int,
    last_logged: int,
    steps: int,
    tmp: Path,
) -> None:
    """The killed cell's rerun continued run ``run_id`` from ``checkpoint`` and ended as the
    uninterrupted cell in ``whole`` did (both stores under their folder, experiment "resume")."""
    uri = f"sqlite:///{killed}/mlflow.db"
    run = _only_run(uri, "resume")
    assert run.info.run_id == run_id  # the same run, continued
    assert layout.read_tag(run.data.tags, layout.RESUMED_FROM) == str(checkpoint)
    logged = [m.step for m in MlflowClient(uri).get_metric_history(run_id, LOSS)]
    # Every step once, plus the steps after the checkpoint that the killed attempt had logged.
    assert sorted(set(logged)) == list(range(1, steps + 1))
    assert len(logged) == steps + (last_logged - checkpoint)
    # The pre-training evaluation was not repeated (by any rank): logged once.
    exact = MlflowClient(uri).get_metric_history(run_id, layout.eval_before_metric("exact_match"))
    assert len(exact) == 1
    _assert_same_training(f"sqlite:///{whole}/mlflow.db", uri, "resume", steps, tmp)
    cell = next((killed / "results" / "checkpoints").iterdir())
    assert not list(cell.glob("checkpoint-*"))  # FINISHED: the training state is gone


def kill_and_resume(model_dir: Path, tmp_path: Path, plan: KillPlan, timeout_s: float = 600) -> None:
    """Run ``plan``'s cell whole and, beside it, killed with SIGKILL after a checkpoint and run
    again: the rerun continues the same run and ends bit for bit as the whole one."""
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    reference = _start(model_dir, whole, "whole", plan)  # alongside: it shares nothing with the other
    victim = _start(model_dir, killed, "killed", plan)
    checkpoint, last_logged = _kill_after_checkpoint(victim, killed, timeout_s, plan)
    uri = f"sqlite:///{killed}/mlflow.db"
    run_id = _only_run(uri, "resume").info.run_id
    assert _only_run(uri, "resume").info.status == "RUNNING"  # nothing ended it: the process died
    assert reference.wait(timeout=timeout_s) == 0, (whole / "whole.log").read_text()[-3000:]

    again = _start(model_dir, killed, "again", plan)
    assert again.wait(timeout=timeout_s) == 0, (killed / "again.log").read_text()[-3000:]
    _assert_resumed_like_whole(killed, whole, run_id, checkpoint, last_logged, plan.steps, tmp_path)


@pytest.mark.slow
def test_a_cell_killed_with_sigkill_resumes_in_the_same_run_and_ends_as_an_uninterrupted_one(
    micro_model_dir: Path, tmp_path: Path
) -> None:
    kill_and_resume(micro_model_dir, tmp_path, MICRO_PLAN)


# ------------------------------------------------------------------ in-process: Ctrl-C, resume, corruption


def _spec(model_dir: Path):
    train = {**TRAIN, "steps": "4"}
    return resolve_spec("gdpo", "tool-calling", str(model_dir), 2, task_params=TASK_PARAMS, train=train)


def _interrupt_after_checkpoint(monkeypatch: pytest.MonkeyPatch, step: int) -> None:
    """Ctrl-C right after checkpoint ``step`` is complete (the cell ends its run KILLED)."""
    complete = resume.CheckpointWriter.complete

    def complete_then_interrupt(self, path: Path, at: int) -> None:
        complete(self, path, at)
        if at == step:
            raise KeyboardInterrupt

    monkeypatch.setattr(resume.CheckpointWriter, "complete", complete_then_interrupt)


@pytest.mark.slow
def test_an_interrupted_cell_resumes_and_matches_an_uninterrupted_one(
    micro_model_dir: Path, tmp_path: Path, results: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = _spec(micro_model_dir)
    whole_uri, uri = f"sqlite:///{tmp_path}/whole.db", f"sqlite:///{tmp_path}/cut.db"
    whole = run_cell(spec, tracking_uri=whole_uri, experiment="resume", progress=False, checkpoint_every=2)

    with monkeypatch.context() as patch:
        _interrupt_after_checkpoint(patch, 2)
        with pytest.raises(KeyboardInterrupt):
            run_cell(spec, tracking_uri=uri, experiment="resume", progress=False, checkpoint_every=2)
    cut = _only_run(uri, "resume")
    assert cut.info.status == "KILLED"
    assert (CellFolder.for_run_key(spec.run_key()).root / "checkpoint-2" / resume.MARKER).is_file()

    done = run_cell(spec, tracking_uri=uri, experiment="resume", progress=False, checkpoint_every=2)
    assert done.run_id == cut.info.run_id and done.metrics_before == whole.metrics_before
    assert done.metrics_after == whole.metrics_after
    run = _only_run(uri, "resume")
    assert layout.read_tag(run.data.tags, layout.RESUMED_FROM) == "2"
    assert run.data.params[layout.PARAM_CHECKPOINT_EVERY] == "2"
    _assert_same_training(whole_uri, uri, "resume", 4, tmp_path)
    assert sorted(p.name for p in CellFolder.for_run_key(spec.run_key()).root.iterdir() if p.is_dir()) == [
        "final"
    ]


@pytest.mark.slow
def test_a_corrupt_checkpoint_is_named_and_the_cell_trains_from_scratch(
    micro_model_dir: Path, tmp_path: Path, results: Path, monkeypatch: pytest.MonkeyPatch, caplog
) -> None:
    spec = _spec(micro_model_dir)
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    with monkeypatch.context() as patch:
        _interrupt_after_checkpoint(patch, 2)
        with pytest.raises(KeyboardInterrupt):
            run_cell(spec, tracking_uri=uri, experiment="bad", progress=False, checkpoint_every=2)
    bad = CellFolder.for_run_key(spec.run_key()).root / "checkpoint-2"
    weights = bad / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-100])  # truncated

    with caplog.at_level(logging.WARNING, logger="mrbench.engine.cell.resume"):
        done = run_cell(spec, tracking_uri=uri, experiment="bad", progress=False, checkpoint_every=2)
    warnings = [r.getMessage() for r in caplog.records if r.name == "mrbench.engine.cell.resume"]
    assert len(warnings) == 1 and str(bad) in warnings[0] and "model.safetensors" in warnings[0]
    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("bad").experiment_id])
    assert sorted(r.info.status for r in runs) == ["FINISHED", "KILLED"]  # a new run, from scratch
    assert client.get_run(done.run_id).info.status == "FINISHED"
    assert layout.tag(layout.RESUMED_FROM) not in client.get_run(done.run_id).data.tags


# ------------------------------------------------------------------ checking checkpoints (no training)


def _fake_checkpoint(
    folder: CellFolder, step: int, run_key: str, run_id: str = "r1", *, truncate_weights: bool = False
) -> Path:
    """A checkpoint folder with transformers' file names and small real contents, completed by
    :class:`resume.CheckpointWriter` as a cell's would be."""
    import torch
    from safetensors.torch import save_file

    path = folder.root / f"checkpoint-{step}"
    path.mkdir(parents=True)
    weights = path / "model.safetensors"
    save_file({"w": torch.arange(6.0)}, str(weights))
    if truncate_weights:
        weights.write_bytes(weights.read_bytes()[:-8])
    for name in ("optimizer.pt", "scheduler.pt", "rng_state.pth"):
        torch.save({"state": torch.ones(3)}, path / name)
    (path / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    start = resume.CellStart(run_id, run_key, "sqlite:///x.db", "1", parse_save("final"), 2, None)
    trainer = StepDiagnostics({})  # its running state, as a cell's trainer saves it
    trainer.batches_scored = step
    writer = resume.CheckpointWriter(trainer, folder, start)
    writer.keep_every = 0
    writer.complete(path, step)
    return path


def test_checkpoint_problems_are_named(results: Path) -> None:
    folder = CellFolder.for_run_key("key1")
    path = _fake_checkpoint(folder, 4, "key1")
    assert resume.checkpoint_problem(path, "key1") is None
    assert "names run key 'key1', not key2" in resume.checkpoint_problem(path, "key2")
    written = (path / "scheduler.pt").stat().st_size
    (path / "scheduler.pt").write_bytes(b"")
    assert resume.checkpoint_problem(path, "key1") == f"scheduler.pt has 0 bytes, {written} were written"
    (path / "scheduler.pt").unlink()
    assert resume.checkpoint_problem(path, "key1") == "scheduler.pt is missing"
    (path / resume.MARKER).unlink()
    assert "mrbench-resume.json is missing" in resume.checkpoint_problem(path, "key1")

    # A weights file already short when the checkpoint was completed: its own header tells.
    cut = _fake_checkpoint(folder, 6, "key1", truncate_weights=True)
    assert "model.safetensors is truncated" in resume.checkpoint_problem(cut, "key1")


def test_the_newest_good_checkpoint_is_used_and_bad_newer_ones_are_named(results: Path, caplog) -> None:
    folder = CellFolder.for_run_key("key1")
    # Newest first: completing a checkpoint removes the earlier ones.
    stray = _fake_checkpoint(folder, 4, "other-key")  # a marker that names another cell
    good = _fake_checkpoint(folder, 2, "key1")
    partial = folder.root / "checkpoint-6"
    partial.mkdir()
    (partial / "optimizer.pt").write_bytes(b"half")  # killed while saving: no marker yet
    with caplog.at_level(logging.WARNING, logger="mrbench.engine.cell.resume"):
        point = resume.latest_resume_point(folder, "key1")
    assert point is not None and point.path == good and point.step == 2
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 2 and str(partial) in warnings[0] and str(stray) in warnings[1]
    assert not partial.exists() and not stray.exists()


def test_reopen_run_continues_a_killed_run_and_refuses_a_finished_one(results: Path, tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    client = RetryingClient(uri)
    experiment = ensure_experiment("reopen", uri)
    run_id = client.create_run(experiment, tags={layout.tag(layout.RUN_KEY): "key1"}).info.run_id
    client.log_metric(run_id, layout.eval_before_metric("exact_match"), 0.25, step=0)
    client.log_param(run_id, layout.PARAM_SAVE, "final")
    client.log_param(run_id, layout.PARAM_CHECKPOINT_EVERY, "2")
    client.set_terminated(run_id, "KILLED")
    folder = CellFolder.for_run_key("key1")
    path = _fake_checkpoint(folder, 2, "key1", run_id)
    marker = json.loads((path / resume.MARKER).read_text())
    (path / resume.MARKER).write_text(
        json.dumps({**marker, "tracking_uri": uri, "experiment_id": experiment})
    )
    tags = {layout.PARENT_RUN_TAG: "new-parent"}

    got = resume.reopen_run(client, folder, "key1", experiment, tags, save="final", checkpoint_every=2)
    assert got is not None and got.run_id == run_id and got.metrics_before == {"exact_match": 0.25}
    run = client.get_run(run_id)
    assert run.info.status == "RUNNING" and run.data.tags[layout.PARENT_RUN_TAG] == "new-parent"
    assert layout.read_tag(run.data.tags, layout.RESUMED_FROM) == "2"
    assert resume.resumable_step("key1", run_id) == 2 and resume.resumable_step("key1", "other") is None

    client.set_terminated(run_id, "FINISHED")
    assert (
        resume.reopen_run(client, folder, "key1", experiment, tags, save="final", checkpoint_every=2) is None
    )


def test_checkpoint_every(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MRBENCH_CHECKPOINT_EVERY", raising=False)
    assert resume.resolve_checkpoint_every(None, 30) == 3 and resume.resolve_checkpoint_every(None, 4) == 1
    assert resume.resolve_checkpoint_every(7, 30) == 7 and resume.resolve_checkpoint_every(0, 30) == 0
    monkeypatch.setenv("MRBENCH_CHECKPOINT_EVERY", "5")
    assert resume.resolve_checkpoint_every(None, 30) == 5
    monkeypatch.setenv("MRBENCH_CHECKPOINT_EVERY", "often")
    with pytest.raises(UserError, match=r"MRBENCH_CHECKPOINT_EVERY.*'often'"):
        resume.resolve_checkpoint_every(None, 30)
    assert resume.parse_checkpoint_every("auto") is None
    with pytest.raises(UserError, match="-1"):
        resume.parse_checkpoint_every("-1")
