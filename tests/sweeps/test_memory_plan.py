"""The memory plan (mrbench.sweeps.memory_plan): sizes, the paper models' parameters and the
arithmetic per GPU checked by hand, sharding, the fix it names, and the gpu_memory setting."""

from __future__ import annotations

import pytest

from mrbench.core.errors import UserError
from mrbench.sweeps.memory_plan import (
    ARCHITECTURES,
    GB,
    HEADROOM_BYTES,
    CellShape,
    architecture_of,
    fix_for,
    parse_size,
    plan_memory,
)
from mrbench.sweeps.spec import build_sweep_spec

QWEN7 = "Qwen/Qwen2.5-7B-Instruct"


def test_sizes_are_read_with_their_units_and_anything_else_is_refused() -> None:
    assert parse_size("80GB") == 80 * 10**9
    assert parse_size("141GiB") == 141 * 2**30
    assert parse_size("512 MiB") == 512 * 2**20
    for bad in ("80", "eighty GB", "0GB", "-3GB", "80 GBs", None, True, 0):
        with pytest.raises(UserError, match="not a size"):
            parse_size(bad)


def test_parameter_counts_match_the_published_sizes() -> None:
    # Qwen2.5-7B by hand: a layer = q,k,v,o (3584·3584 + 2·3584·512 + 3584·3584) + their biases
    # (3584 + 2·512) + MLP 3·3584·18944 + two norms 2·3584; 28 layers, untied 152064-token
    # embedding and head, a final norm.
    layer = 3584 * 3584 * 2 + 2 * 3584 * 512 + 3584 + 1024 + 3 * 3584 * 18944 + 2 * 3584
    assert ARCHITECTURES[QWEN7].params == 28 * layer + 2 * 152064 * 3584 + 3584 == 7_615_616_512
    published = {  # billions, the models' cards
        "Qwen/Qwen2.5-Coder-0.5B-Instruct": 0.49,
        "Qwen/Qwen2.5-Coder-1.5B-Instruct": 1.54,
        "Qwen/Qwen2.5-3B-Instruct": 3.09,
        "Qwen/Qwen3-4B-Thinking-2507": 4.02,
        "Qwen/Qwen3-8B": 8.19,
    }
    for model, billions in published.items():
        assert ARCHITECTURES[model].params / 1e9 == pytest.approx(billions, abs=0.01), model


def test_the_plan_of_one_gpu_is_the_hand_arithmetic() -> None:
    shape = CellShape(
        QWEN7,
        prompts_per_step=2,
        gradient_accumulation_steps=16,
        num_generations=8,
        prompt_tokens=512,
        completion_tokens=1024,
        beta=0.001,
        gradient_checkpointing=True,
    )
    plan = plan_memory(shape, 80 * GB)
    p = 7_615_616_512
    assert (plan.weights, plan.gradients, plan.adam, plan.reference) == (4 * p, 4 * p, 8 * p, 2 * p)
    # 16 bytes a parameter: 121.8 GB before anything else, so a 7B cell never fits one 80 GB GPU.
    assert plan.weights + plan.gradients + plan.adam == 121_849_864_192
    # TRL generates per_device (2 prompts × 8) × steps_per_generation (16) = 256 sequences at once;
    # KV per token 2 × 28 layers × 4 kv heads × 128 × 2 bytes.
    assert shape.generation_sequences == 256
    assert plan.kv_cache == 256 * 1536 * (2 * 28 * 4 * 128 * 2)
    # checkpointed activations: each layer's float32 input plus one layer's, for 16 sequences
    per_layer = 18 * 3584 + 4 * 4 * 128 + 8 * 18944
    assert plan.activations == 16 * 1536 * (28 * 4 * 3584 + per_layer)
    assert plan.logits == 16 * 1024 * 152064 * 3 * 2
    assert plan.total == plan.state + max(plan.training, plan.generation)
    assert plan.state == 18 * p + HEADROOM_BYTES
    assert not plan.fits
    assert (fix_for(plan) or "").startswith("--processes-per-cell 4 --distributed fsdp")


def test_sharding_divides_the_state_and_ddp_replicates_it() -> None:
    base = CellShape(QWEN7, 8, 4, 8, 512, 1024, beta=0.001, gradient_checkpointing=True, processes=4)
    fsdp = plan_memory(CellShape(**{**base.__dict__, "distributed": "fsdp"}), 80 * GB)
    ddp = plan_memory(CellShape(**{**base.__dict__, "distributed": "ddp"}), 80 * GB)
    assert fsdp.adam * 4 == ddp.adam == 8 * ARCHITECTURES[QWEN7].params
    assert fsdp.reference * 4 == ddp.reference
    assert fsdp.kv_cache == ddp.kv_cache  # every process generates its own sequences
    assert fsdp.fits and not ddp.fits


def test_vllm_takes_its_share_and_holds_the_kv_cache() -> None:
    shape = CellShape("Qwen/Qwen2.5-Coder-0.5B-Instruct", 4, 8, 8, 512, 1024, use_vllm=True)
    plan = plan_memory(shape, 80 * GB)
    assert plan.vllm == int(0.3 * 80 * GB) and plan.kv_cache == 0


def test_an_unknown_model_has_no_architecture_but_a_folder_is_read(tmp_path) -> None:
    assert architecture_of("tiny") is None
    (tmp_path / "config.json").write_text(
        '{"model_type": "qwen2", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, '
        '"num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 1000, '
        '"tie_word_embeddings": true}'
    )
    arch = architecture_of(str(tmp_path))
    assert arch is not None and arch.head_dim == 16 and arch.params > 0


def test_gpu_memory_is_a_sweep_setting_read_as_a_size() -> None:
    spec = build_sweep_spec(preset="paper", overrides={"gpu_memory": "141GiB"})
    assert spec.gpu_memory == 141 * 2**30
    with pytest.raises(UserError, match=r"'gpu_memory'.*80GB or 141GiB, got 'lots'"):
        build_sweep_spec(preset="paper", overrides={"gpu_memory": "lots"})


def test_a_bad_gpu_memory_on_the_command_line_exits_2_naming_it(tmp_path) -> None:
    import os
    import subprocess
    import sys

    env = {**os.environ, "MRBENCH_RESULTS": str(tmp_path / "results")}
    proc = subprocess.run(
        [sys.executable, "-m", "mrbench", "sweep", "--preset", "paper", "--gpu-memory", "80", "--dry-run"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "gpu_memory" in proc.stderr and "got '80'" in proc.stderr
    assert not (tmp_path / "results").exists()
