"""The ``paper`` sweep preset's tables: the paper's models per domain, its per-domain
hyper-parameters, and memory settings per model size for one GPU (see ``docs/cluster.md``)."""

from __future__ import annotations

from typing import Any

# The paper's models per domain and per-domain hyper-parameters (REFERENCE.md): lr 1e-6,
# rollouts 4 (tools) / 8 (code, security), temperature 1.0, KL 0.001 (code, security) / none
# (tools), 15 epochs (code, tools) / 7 (security).
PAPER_MODELS: dict[str, tuple[str, ...]] = {
    "code-generation": (
        "Qwen/Qwen2.5-Coder-0.5B-Instruct",
        "Qwen/Qwen2.5-Coder-1.5B-Instruct",
        "Qwen/Qwen2.5-Coder-3B-Instruct",
        "Qwen/Qwen2.5-Coder-7B-Instruct",
    ),
    "tool-calling": ("Qwen/Qwen2.5-7B-Instruct", "Qwen/Qwen3-4B-Thinking-2507", "Qwen/Qwen3-8B"),
    "agent-security": ("Qwen/Qwen2.5-3B-Instruct", "Qwen/Qwen2.5-7B-Instruct", "Qwen/Qwen3-8B"),
}
PAPER_EPOCHS = {"code-generation": 15, "tool-calling": 15, "agent-security": 7}
# Training prompts per domain: LeetCodeDataset train (2,641), ToolRL (4k), AgentDojo's 629
# security cases. The papers state epochs, our trainer counts optimizer steps; the batch size
# is not in REFERENCE.md, so 32 prompts per optimizer step (split into micro-batches by model
# size, PAPER_MODEL_TRAIN) is our assumption: steps = ceil(epochs × n / 32).
PAPER_TRAIN_PROMPTS = {"code-generation": 2641, "tool-calling": 4000, "agent-security": 629}
PAPER_PROMPTS_PER_STEP = 32
PAPER_TRAIN: dict[str, dict[str, Any]] = {
    task: {
        "learning_rate": 1e-6,
        "num_generations": 4 if task == "tool-calling" else 8,
        "temperature": 1.0,
        "beta": 0.0 if task == "tool-calling" else 0.001,
        "steps": -(-PAPER_EPOCHS[task] * PAPER_TRAIN_PROMPTS[task] // PAPER_PROMPTS_PER_STEP),
        "precision": "auto",
    }
    for task in PAPER_EPOCHS
}
PAPER_MODEL_BILLIONS = {
    "Qwen/Qwen2.5-Coder-0.5B-Instruct": 0.5,
    "Qwen/Qwen2.5-Coder-1.5B-Instruct": 1.5,
    "Qwen/Qwen2.5-Coder-3B-Instruct": 3.1,
    "Qwen/Qwen2.5-3B-Instruct": 3.1,
    "Qwen/Qwen3-4B-Thinking-2507": 4.0,
    "Qwen/Qwen2.5-Coder-7B-Instruct": 7.6,
    "Qwen/Qwen2.5-7B-Instruct": 7.6,
    "Qwen/Qwen3-8B": 8.2,
}


def paper_memory(billions: float) -> dict[str, Any]:
    """Memory settings of a ``billions``-parameter model per 80 GB GPU (float32 master weights:
    7B–8B models need their cell sharded over several GPUs, ``docs/cluster.md``): the
    PAPER_PROMPTS_PER_STEP prompts of an optimizer step as ``prompts_per_step`` per micro-batch ×
    ``gradient_accumulation_steps``, smaller micro-batches and recomputed activations (gradient
    checkpointing) from 3B up. The update is the same whatever the split.

    >>> paper_memory(0.5), paper_memory(7.6)["prompts_per_step"]
    ({'prompts_per_step': 8, 'gradient_accumulation_steps': 4, 'gradient_checkpointing': False}, 2)
    """
    micro = 8 if billions < 3 else 4 if billions < 6 else 2
    return {
        "prompts_per_step": micro,
        "gradient_accumulation_steps": PAPER_PROMPTS_PER_STEP // micro,
        "gradient_checkpointing": billions >= 3,
    }


PAPER_MODEL_TRAIN: dict[str, dict[str, Any]] = {
    model: paper_memory(billions) for model, billions in PAPER_MODEL_BILLIONS.items()
}
