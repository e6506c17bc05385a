"""A cell trained by 2 processes (``accelerate launch``, DDP over gloo on CPU) equals the same cell
trained by 1: same advantages on every step, same loss, same MLflow metrics.

Both see the same global batch: ``train.prompts_per_step`` is global, so each of the 2 processes
gets half of it. Completions come from a fixed rollout (a pure function of the prompt and the
completion's place in its group), so the batch is the same whoever generates it; what can differ
is only what the processes compute from it. Every process records the advantages it trains on
(``MRBENCH_TEST_RECORD``); the 2-process cell is launched through the real launcher with
:func:`recording_run_cell` as its cell function (imported by path: this folder is on
``PYTHONPATH``).
"""

from __future__ import annotations

import json
import os
import zlib
from pathlib import Path
from typing import Any

import pytest
from mlflow.tracking import MlflowClient

import mrbench.engine.training.trainer as trainer_module
from mrbench.core.rollout import RolloutBatch, RolloutContext
from mrbench.engine.cell.runner import run_cell
from mrbench.engine.config import resolve_spec
from mrbench.engine.processes.distributed import launch_cell, rank
from mrbench.tasks.tool_calling.task import ToolCallingTask

HERE = Path(__file__).resolve().parent
TASK = f"{Path(__file__).stem}:fixed_rollout_task"
G = 4
RECORD_ENV = "MRBENCH_TEST_RECORD"


class FixedRolloutTask(ToolCallingTask):
    """Tool calling whose training completions are fixed: completion ``i`` of a group is candidate
    ``(crc32(prompt) + i) % 4`` (three gold calls of other prompts and a refusal), so rewards vary
    within and between groups."""

    def training_hooks(self) -> dict[str, Any]:
        golds = [gold for _prompt, gold in self.demonstrations(3, seed=0)]
        candidates = [*golds, "I cannot help with that."]

        def rollout(prompts: list[list[dict]], context: RolloutContext) -> RolloutBatch:
            tok = context.tokenizer
            prompt_ids, completion_ids = [], []
            for i, prompt in enumerate(prompts):
                text = tok.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True)
                prompt_ids.append(tok(text, add_special_tokens=False)["input_ids"])
                choice = (zlib.crc32(text.encode()) + i % G) % len(candidates)
                ids = tok(candidates[choice], add_special_tokens=False)["input_ids"]
                completion_ids.append([*ids, context.eos_token_ids[0]])
            masks = [[1] * len(ids) for ids in completion_ids]
            return RolloutBatch(prompt_ids, completion_ids, masks)

        return {"rollout": rollout}


def fixed_rollout_task(*, n_train: int = 16, n_eval: int = 2, prompt_style: str = "chat") -> FixedRolloutTask:
    return FixedRolloutTask(
        n_train=n_train,
        n_eval=n_eval,
        seed=0,
        dataset="embedded",
        max_completion_tokens=0,
        prompt_style=prompt_style,
    )


class RecordingTrainer(trainer_module.MultiRewardGRPOTrainer):
    """Appends, per generation batch, this process's rank, the gathered rewards ``[B_global, K]``
    and the advantages it trains on ``[B_local]`` to ``$MRBENCH_TEST_RECORD/rank<r>.jsonl``."""

    def _calculate_rewards(self, *args, **kwargs):
        rewards = super()._calculate_rewards(*args, **kwargs)
        self.recorded_rewards = rewards.detach().cpu().tolist()
        return rewards

    def _generate_and_score_completions(self, inputs):
        out = super()._generate_and_score_completions(inputs)
        row = {"rank": rank(), "rewards": self.recorded_rewards, "advantages": out["advantages"].tolist()}
        with (Path(os.environ[RECORD_ENV]) / f"rank{rank()}.jsonl").open("a") as fh:
            fh.write(json.dumps(row) + "\n")
        return out


def recording_run_cell(spec: Any, **kwargs: Any) -> Any:
    """:func:`run_cell` with :class:`RecordingTrainer` as its trainer."""
    original = trainer_module.MultiRewardGRPOTrainer
    trainer_module.MultiRewardGRPOTrainer = RecordingTrainer
    try:
        return run_cell(spec, **kwargs)
    finally:
        trainer_module.MultiRewardGRPOTrainer = original


def _records(folder: Path, name: str) -> list[dict]:
    path = folder / name
    return [json.loads(line) for line in path.read_text().splitlines()]


def _metrics(client: MlflowClient, run_id: str) -> dict[tuple[str, int], float]:
    """Every logged metric point ``(name, step) → value``, timings left out."""
    run = client.get_run(run_id)
    points = {}
    for name in run.data.metrics:
        if name.startswith("perf/") or name.endswith(("runtime", "per_second", "step_time")):
            continue
        for m in client.get_metric_history(run_id, name):
            points[(name, m.step)] = m.value
    return points


@pytest.mark.slow
def test_two_processes_train_like_one(micro_model_dir, tmp_path, monkeypatch):
    two_processes_train_like_one(micro_model_dir, tmp_path, monkeypatch, learning_rate=1e-3)


def two_processes_train_like_one(
    model_dir: Path,
    tmp_path: Path,
    monkeypatch: Any,
    learning_rate: float,
    task_params: dict[str, Any] | None = None,
) -> None:
    """The fixed-rollout cell of ``model_dir`` trained by 2 gloo processes and by 1: the same
    advantages on every generation batch and the same MLflow metrics."""
    monkeypatch.setenv("MRBENCH_RESULTS", str(tmp_path / "results"))
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")])))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    train = {
        "steps": 2,
        "num_generations": G,
        "prompts_per_step": 2,
        "eval_limit": 1,
        "max_completion_length": 48,
        "learning_rate": learning_rate,
    }
    spec = resolve_spec("gdpo", TASK, str(model_dir), 0, task_params=task_params, train=train)
    common = {"tracking_uri": uri, "progress": False, "save": "none"}

    one_dir, two_dir = tmp_path / "one", tmp_path / "two"
    one_dir.mkdir()
    two_dir.mkdir()
    monkeypatch.setenv(RECORD_ENV, str(one_dir))
    one = recording_run_cell(spec, experiment="one", **common)
    monkeypatch.setenv(RECORD_ENV, str(two_dir))
    two = launch_cell(
        spec,
        processes=2,
        cell_fn=f"{Path(__file__).stem}:recording_run_cell",
        threads=2,
        log=tmp_path / "two.log",
        experiment="two",
        **common,
    )

    # Advantages: per generation batch, the 2 ranks' slices side by side are the 1-process batch.
    single = _records(one_dir, "rank0.jsonl")
    rank0, rank1 = _records(two_dir, "rank0.jsonl"), _records(two_dir, "rank1.jsonl")
    assert len(single) == len(rank0) == len(rank1) == 2  # one generation batch per step
    for batch, a, b in zip(single, rank0, rank1, strict=True):
        assert len(a["advantages"]) == len(b["advantages"]) == len(batch["advantages"]) // 2 == G
        assert a["advantages"] + b["advantages"] == pytest.approx(batch["advantages"], abs=1e-6)
        # Every rank saw the rewards of the whole global batch [B_global, K].
        assert a["rewards"] == b["rewards"] == batch["rewards"]
        assert any(abs(x) > 0.1 for x in batch["advantages"])  # not a trivial all-zero batch

    # MLflow: only rank 0 logged (one run), and every metric point equals the 1-process run's.
    client = MlflowClient(tracking_uri=uri)
    runs = client.search_runs([client.get_experiment_by_name("two").experiment_id])
    assert [r.info.run_id for r in runs] == [two["run_id"]] and runs[0].info.status == "FINISHED"
    ones, twos = _metrics(client, one.run_id), _metrics(client, two["run_id"])
    assert set(ones) == set(twos)
    for key in (("train/loss", 1), ("train/loss", 2), ("reward", 1), ("adv/std", 2), ("train/grad_norm", 1)):
        assert key in ones, key
    different = {k: (ones[k], twos[k]) for k in ones if twos[k] != pytest.approx(ones[k], rel=1e-4, abs=1e-6)}
    assert not different
    assert two["metrics_after"] == pytest.approx(one.metrics_after)
