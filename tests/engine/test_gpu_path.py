"""The GPU path, as far as a CPU can check it: the train settings (bf16, gradient checkpointing,
vLLM), the dtype a cell trains in per device, TRL's config built from them, the error when vLLM
is asked for and missing, the routing of a multi-turn rollout's turns through TRL's colocated vLLM
engine (against a stand-in engine: vLLM needs a CUDA GPU), a real cell with gradient
checkpointing, and the GPU smoke script run on a CPU."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest
from mlflow.tracking import MlflowClient

from mrbench.core import layout
from mrbench.core.errors import UserError
from mrbench.engine.cell.runner import run_cell
from mrbench.engine.config import TrainSettings, resolve_spec
from mrbench.engine.evaluation.generation import require_vllm
from mrbench.engine.models.catalog import Precision, mixed_precision
from mrbench.engine.training.grpo_setup import grpo_config
from mrbench.engine.training.rollout_adapter import policy_sampler
from mrbench.tasks import build_task

REPO = Path(__file__).resolve().parents[2]
TASK_PARAMS = {"n_train": "16", "n_eval": "4"}
HAS_VLLM = importlib.util.find_spec("vllm") is not None


def test_gpu_train_settings_and_their_overrides() -> None:
    default = TrainSettings()
    assert default.precision == "auto" and not default.gradient_checkpointing and not default.use_vllm
    s = TrainSettings.from_overrides(
        {"precision": "fp32", "gradient_checkpointing": "true", "use_vllm": "on"}
    )
    assert (s.precision, s.gradient_checkpointing, s.use_vllm) == ("fp32", True, True)
    with pytest.raises(UserError, match="gradient_checkpointing"):
        TrainSettings.from_overrides({"gradient_checkpointing": "sometimes"})


def test_auto_precision_is_mixed_only_on_a_gpu_that_has_bfloat16(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert not mixed_precision("auto") and mixed_precision("bf16") and not mixed_precision("fp32")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    assert mixed_precision("auto") and not mixed_precision("fp32")
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)  # pre-Ampere
    assert not mixed_precision("auto")


def _config(tmp_path: Path, **train: Any) -> Any:
    spec = resolve_spec("grpo", "tool-calling", "tiny", 0, task_params=TASK_PARAMS, train=train)
    task = build_task(spec.task, spec.task_params)
    try:
        return grpo_config(
            spec, task, str(tmp_path), progress=False, precision=Precision.of(spec.train.precision)
        )
    finally:
        task.close()


def test_trl_config_on_a_cpu_follows_the_settings(tmp_path: Path) -> None:
    plain = _config(tmp_path)  # precision auto: float32 on a CPU
    assert plain.use_cpu and not (plain.bf16 or plain.gradient_checkpointing or plain.use_vllm)
    assert plain.model_init_kwargs is None  # the loaded policy is handed to TRL
    kl = _config(tmp_path, gradient_checkpointing=True, beta=0.01)
    assert kl.gradient_checkpointing is True
    assert kl.model_init_kwargs == {"dtype": "float32", "device_map": None}  # TRL's reference model


@pytest.mark.skipif(HAS_VLLM, reason="vLLM is installed here")
@pytest.mark.slow
def test_use_vllm_without_vllm_is_a_one_line_error_before_any_run(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    spec = resolve_spec("grpo", "tool-calling", "tiny", 0, task_params=TASK_PARAMS, train={"use_vllm": True})
    with pytest.raises(UserError, match=r"pip install 'mrbench\[vllm\]'"):
        run_cell(spec, tracking_uri=uri, experiment="vllm-missing", progress=False)
    assert MlflowClient(tracking_uri=uri).get_experiment_by_name("vllm-missing") is None
    command = [sys.executable, "-m", "mrbench", "run", "--train", "use_vllm=true", "--tracking-uri", uri]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    assert "mrbench[vllm]" in done.stderr and "Traceback" not in done.stderr


def test_use_vllm_needs_a_cuda_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: object() if name == "vllm" else real(name, *a)
    )
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(UserError, match="needs a CUDA GPU"):
        require_vllm()


def test_paper_preset_sets_memory_by_model_size_and_keeps_the_global_batch() -> None:
    """The paper preset's micro-batch per model: the most prompts per process (8, 4, 2, 1) whose
    memory plan fits an 80 GB GPU in every domain the model trains in, over 4 FSDP processes
    (the figures docs/paper.md prints); the optimizer step keeps its 32 prompts whatever the split."""
    from mrbench.sweeps.memory_plan import DEFAULT_GPU_BYTES, plan_memory
    from mrbench.sweeps.paper import (
        MICRO_CHOICES,
        PAPER_DISTRIBUTED,
        PAPER_PROCESSES,
        PAPER_PROMPTS_PER_STEP,
        shape_of,
    )
    from mrbench.sweeps.spec import build_sweep_spec

    spec = build_sweep_spec(preset="paper")
    seen: dict[str, tuple[int, int, bool]] = {}
    trained_in: dict[str, list[str]] = {}
    for task in spec.tasks:
        for model in spec.models_for(task):
            s = TrainSettings.from_overrides(spec.train_for(task, model))
            assert s.prompts_per_step * s.gradient_accumulation_steps == PAPER_PROMPTS_PER_STEP
            assert s.precision == "auto"
            got = (s.prompts_per_step, s.gradient_accumulation_steps, s.gradient_checkpointing)
            assert seen.setdefault(model, got) == got  # one split per model, in every domain
            trained_in.setdefault(model, []).append(task)
    assert seen == {
        "Qwen/Qwen2.5-Coder-0.5B-Instruct": (8, 4, False),
        "Qwen/Qwen2.5-Coder-1.5B-Instruct": (4, 8, False),
        "Qwen/Qwen2.5-Coder-3B-Instruct": (16, 2, True),
        "Qwen/Qwen2.5-Coder-7B-Instruct": (8, 4, True),
        "Qwen/Qwen2.5-7B-Instruct": (4, 8, True),
        "Qwen/Qwen3-4B-Thinking-2507": (32, 1, True),
        "Qwen/Qwen3-8B": (4, 8, True),
        "Qwen/Qwen2.5-3B-Instruct": (8, 4, True),
    }
    for model, (total, _, ckpt) in seen.items():  # the chosen split fits, the next larger does not
        micro = total // PAPER_PROCESSES
        assert micro in MICRO_CHOICES
        for per_process, fits in ((micro, True), (micro * 2, False)):
            if per_process not in MICRO_CHOICES:
                continue
            train = {
                "prompts_per_step": per_process * PAPER_PROCESSES,
                "gradient_accumulation_steps": PAPER_PROMPTS_PER_STEP // (per_process * PAPER_PROCESSES),
                "gradient_checkpointing": ckpt,
            }
            plans = [
                plan_memory(
                    shape_of(t, model, {**spec.task_train[t], **train}, PAPER_PROCESSES, PAPER_DISTRIBUTED),
                    DEFAULT_GPU_BYTES,
                )
                for t in trained_in[model]
            ]
            assert all(p.fits for p in plans) is fits, (model, per_process)


def test_model_train_in_a_sweep_file_applies_after_task_train(tmp_path: Path) -> None:
    from mrbench.sweeps.spec import build_sweep_spec

    path = tmp_path / "s.yaml"
    path.write_text(
        "tasks: [tool-calling]\nmodels: [tiny, tiny-s]\n"
        "task_train: {tool-calling: {gradient_checkpointing: false, prompts_per_step: 2}}\n"
        "model_train: {tiny-s: {gradient_checkpointing: true}}\n"
    )
    spec = build_sweep_spec(config=path)
    assert spec.train_for("tool-calling", "tiny-s") == {"gradient_checkpointing": True, "prompts_per_step": 2}
    assert spec.train_for("tool-calling", "tiny") == {"gradient_checkpointing": False, "prompts_per_step": 2}
    path.write_text("models: [tiny]\nmodel_train: {tiny-xl: {bf16: false}}\n")
    with pytest.raises(UserError, match="'model_train' names 'tiny-xl'"):
        build_sweep_spec(config=path)


# ------------------------------------------------------------------ rollout turns through vLLM


class _SamplingParams:
    """Stands in for ``vllm.SamplingParams``: keeps its keyword arguments."""

    def __init__(self, **kwargs: Any) -> None:
        self.kwargs = kwargs


class _Engine:
    """Stands in for ``vllm.LLM``: echoes each prompt's last id, then stops on 99 or the budget."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[dict[str, Any]], dict[str, Any]]] = []

    def generate(self, prompts: list[dict[str, Any]], sampling_params: Any, use_tqdm: bool) -> list[Any]:
        self.calls.append((prompts, sampling_params.kwargs))
        budget = sampling_params.kwargs["max_tokens"]
        outputs = []
        for prompt in prompts:
            ids = [prompt["prompt_token_ids"][-1], 99, 5][:budget]
            outputs.append(types.SimpleNamespace(outputs=[types.SimpleNamespace(token_ids=tuple(ids))]))
        return outputs


def _trainer_stand_in(*, use_vllm: bool, mode: str = "colocate", tp: int = 1) -> Any:
    """The attributes of a ``MultiRewardGRPOTrainer`` that the samplers read, as TRL 1.16 sets them."""
    engine = types.SimpleNamespace(
        mode=mode,
        tensor_parallel_size=tp,
        enable_sleep_mode=False,
        temperature=0.7,
        top_p=0.9,
        top_k=0,
        min_p=None,
        repetition_penalty=1.0,
        generation_kwargs={"seed": 3},
        llm=_Engine(),
    )
    trainer = types.SimpleNamespace(use_vllm=use_vllm, vllm_generation=engine, eos_token_ids=[99, 7])
    return trainer


def test_a_rollouts_turns_go_through_trls_colocated_vllm_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(SamplingParams=_SamplingParams))
    trainer = _trainer_stand_in(use_vllm=True)
    generate = policy_sampler(trainer)
    assert generate([[1, 2, 3], [4]], 8) == [[3, 99, 5], [4, 99, 5]]
    assert generate([[6, 7]], 1) == [[7]]
    (first_prompts, first), (_, second) = trainer.vllm_generation.llm.calls
    assert first_prompts == [{"prompt_token_ids": [1, 2, 3]}, {"prompt_token_ids": [4]}]
    assert first == {
        "n": 1,
        "max_tokens": 8,
        "stop_token_ids": [99, 7],
        "temperature": 0.7,
        "top_p": 0.9,
        "top_k": 0,
        "min_p": 0.0,
        "repetition_penalty": 1.0,
        "seed": 3,
    }
    assert second["max_tokens"] == 1


@pytest.mark.parametrize(("mode", "tp"), [("server", 1), ("colocate", 2)])
def test_a_rollout_refuses_vllm_engines_it_cannot_drive_turn_by_turn(
    monkeypatch: pytest.MonkeyPatch, mode: str, tp: int
) -> None:
    monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(SamplingParams=_SamplingParams))
    with pytest.raises(ValueError, match="colocate"):
        policy_sampler(_trainer_stand_in(use_vllm=True, mode=mode, tp=tp))


# ------------------------------------------------------------------ real training on a CPU


def test_a_real_cell_trains_with_gradient_checkpointing(
    micro_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MRBENCH_RESULTS", str(tmp_path / "results"))
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    train = {"steps": 2, "num_generations": 2, "prompts_per_step": 2, "eval_limit": 4}
    spec = resolve_spec(
        "grpo",
        "tool-calling",
        str(micro_model_dir),
        0,
        task_params=TASK_PARAMS,
        train={**train, "gradient_checkpointing": True},
    )
    result = run_cell(spec, tracking_uri=uri, experiment="ckpt", progress=False, save="none")
    assert result.status == "FINISHED"
    run = MlflowClient(tracking_uri=uri).get_run(result.run_id)
    assert run.data.params["train.gradient_checkpointing"] == "True"
    assert run.data.params["train.precision"] == "auto"  # float32 on a CPU
    assert layout.step_metric("loss") in run.data.metrics


@pytest.mark.slow  # about 1-2 minutes on a 2-core machine: a model, a tokenizer, two short trainings
def test_gpu_smoke_script_runs_on_a_cpu(tmp_path: Path) -> None:
    command = [
        sys.executable,
        str(REPO / "benchmarks" / "gpu_smoke.py"),
        "--device",
        "cpu",
        "--steps",
        "2",
        "--tiny",
        "--methods",
        "grpo",
        "--out",
        str(tmp_path),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "mrbench tokens/s as a share of plain TRL's" in done.stdout
    import json

    summary = json.loads((tmp_path / "gpu_smoke.json").read_text())
    assert summary["device"] == "cpu"
    assert [r["path"] for r in summary["rows"]] == ["plain TRL", "mrbench grpo"]
    assert all(r["tokens"] > 0 and r["train_s"] > 0 for r in summary["rows"])
