"""The ``paper`` sweep preset's tables: the paper's models, data, evaluations and hyper-parameters
per domain, the micro-batches chosen from the memory plan, and the steps from the training sets.

Every number here that the paper does not state is an assumption, listed with where it came from
in ``docs/paper.md`` (a test keeps that table and these values equal).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from mrbench.core.errors import UserError
from mrbench.sweeps.memory_plan import DEFAULT_GPU_BYTES, CellShape, plan_memory

TASKS = ("code-generation", "tool-calling", "agent-security")
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
PAPER_DATA_ROOT = "~/mrbench-data"
"""The data root every paper task reads its files from (:data:`mrbench.tasks.sources.LAYOUT`):
``ToolRL/`` (ToolRL's repository: ``dataset/rlla_4k`` and ``benchmarks/API-Bank``), ``ASB/``,
``InjecAgent/`` and ``code_generation_lite/test6.jsonl`` (docs/paper.md says how to get each)."""
EVERY_TOOLRL = {"n_train": 8_000, "n_eval": 2_000}
EVERY_AGENTDOJO = {"n_train": 10_000, "n_eval": 10_000}
"""``n_train`` / ``n_eval`` meaning "every item of the split": each split is smaller (ToolRL's
``rlla_4k`` holds 4,000 items; AgentDojo's training split 1,644 cases), and these are the
settings' upper bounds."""
PAPER_COMPLETION_TOKENS = {"code-generation": 1024, "tool-calling": 512, "agent-security": 512}
"""Completion budgets (per assistant turn for agent security): the paper states none; these are the
loaders' defaults for LeetCodeDataset, ToolRL and AgentDojo."""
PAPER_PROMPT_TOKENS = {"code-generation": 512, "tool-calling": 1536, "agent-security": 3584}
"""The longest prompt (agent security: the episode's context before its last turn) the memory
plan assumes: an assumption, docs/paper.md."""
PAPER_TASK_PARAMS: dict[str, dict[str, Any]] = {
    # LeetCodeDataset trains; HumanEval is the cell's own evaluation (MBPP and LiveCodeBench extra).
    "code-generation": {
        "dataset": "leetcode",
        "eval_dataset": "humaneval",
        "max_completion_tokens": PAPER_COMPLETION_TOKENS["code-generation"],
        "data_path": PAPER_DATA_ROOT,
    },
    # ToolRL's rlla_4k trains and its test split evaluates (API-Bank and BFCL extra).
    "tool-calling": {
        "dataset": "toolrl",
        **EVERY_TOOLRL,
        "max_completion_tokens": PAPER_COMPLETION_TOKENS["tool-calling"],
        "data_path": PAPER_DATA_ROOT,
    },
    # AgentDojo v1.2.2's training split trains, its held-out user tasks evaluate (ASB, InjecAgent extra).
    "agent-security": {
        "dataset": "agentdojo",
        **EVERY_AGENTDOJO,
        "max_completion_tokens": PAPER_COMPLETION_TOKENS["agent-security"],
        "data_path": PAPER_DATA_ROOT,
    },
}
PAPER_EVAL: dict[str, tuple[str, ...]] = {
    "code-generation": ("mbpp", "livecodebench"),
    "tool-calling": ("apibank", "bfcl"),
    "agent-security": ("asb", "injecagent"),
}
PAPER_PROMPTS_PER_STEP = 32
"""Prompts per optimizer step: not in the paper (an assumption, docs/paper.md)."""
PAPER_PROCESSES = 4
PAPER_DISTRIBUTED = "fsdp"
"""Each cell trains sharded over 4 GPUs: the 7–8B models' float32 state alone (16 bytes a
parameter, 122–131 GB) does not fit one 80 GB GPU, and one setting serves every cell."""
PAPER_TRAIN: dict[str, dict[str, Any]] = {
    task: {
        "learning_rate": 1e-6,
        "num_generations": 4 if task == "tool-calling" else 8,
        "temperature": 1.0,
        "beta": 0.0 if task == "tool-calling" else 0.001,
        "max_completion_length": PAPER_COMPLETION_TOKENS[task],
        "precision": "auto",
    }
    for task in TASKS
}
"""Per-domain hyper-parameters (REFERENCE.md): lr 1e-6, rollouts 4 (tools) / 8 (code, security),
temperature 1.0, KL 0.001 (code, security) / none (tools). The steps come from the training sets
(:func:`paper_steps`)."""
MICRO_CHOICES = (8, 4, 2, 1)
"""Prompts per process per micro-batch the preset tries, largest first."""


def checkpointing(model: str) -> bool:
    """Gradient checkpointing from 3B up (recomputing activations costs about a third more compute)."""
    from mrbench.sweeps.memory_plan import ARCHITECTURES

    return ARCHITECTURES[model].params >= 2_500_000_000


def shape_of(task: str, model: str, train: Mapping[str, Any], processes: int, distributed: str) -> CellShape:
    """The :class:`CellShape` of a paper cell with ``train`` (its merged TrainSettings overrides)."""
    return CellShape(
        model=model,
        prompts_per_step=int(train.get("prompts_per_step", 4)),
        gradient_accumulation_steps=int(train.get("gradient_accumulation_steps", 1)),
        num_generations=int(train.get("num_generations", 8)),
        prompt_tokens=PAPER_PROMPT_TOKENS.get(task, 1024),
        completion_tokens=int(train.get("max_completion_length") or PAPER_COMPLETION_TOKENS.get(task, 512)),
        beta=float(train.get("beta", 0.0)),
        gradient_checkpointing=bool(train.get("gradient_checkpointing", False)),
        use_vllm=bool(train.get("use_vllm", False)),
        mixed=train.get("precision", "auto") != "fp32",
        processes=processes,
        distributed=distributed,
    )


def paper_model_train(
    processes: int = PAPER_PROCESSES, distributed: str = PAPER_DISTRIBUTED, gpu_bytes: int = DEFAULT_GPU_BYTES
) -> dict[str, dict[str, Any]]:
    """Per model, the micro-batch of the :data:`PAPER_PROMPTS_PER_STEP` prompts of an optimizer
    step: the most prompts per process (:data:`MICRO_CHOICES`) whose memory plan fits a GPU of
    ``gpu_bytes`` in every domain the model trains in, as ``prompts_per_step`` (over all
    ``processes``) × ``gradient_accumulation_steps``; the update is the same whatever the split.
    A model that fits with none keeps one prompt per process (the plan then refuses its cells).

    >>> paper_model_train()["Qwen/Qwen2.5-7B-Instruct"]
    {'prompts_per_step': 4, 'gradient_accumulation_steps': 8, 'gradient_checkpointing': True}
    >>> paper_model_train(1, "ddp")["Qwen/Qwen2.5-Coder-0.5B-Instruct"]["prompts_per_step"]
    2
    """
    if PAPER_PROMPTS_PER_STEP % processes:
        raise UserError(
            f"the paper preset's {PAPER_PROMPTS_PER_STEP} prompts per optimizer step cannot be split over "
            f"{processes} processes per cell: give --processes-per-cell 1, 2, 4, 8, 16 or 32"
        )
    tasks_of = {m: [t for t in TASKS if m in PAPER_MODELS[t]] for t in TASKS for m in PAPER_MODELS[t]}
    chosen: dict[str, dict[str, Any]] = {}
    for model, tasks in tasks_of.items():
        ckpt = checkpointing(model)
        fitting = [1]
        for micro in MICRO_CHOICES:
            total = micro * processes
            if PAPER_PROMPTS_PER_STEP % total:
                continue
            settings = {
                "prompts_per_step": total,
                "gradient_accumulation_steps": PAPER_PROMPTS_PER_STEP // total,
                "gradient_checkpointing": ckpt,
            }
            shapes = [
                shape_of(t, model, {**PAPER_TRAIN[t], **settings}, processes, distributed) for t in tasks
            ]
            if all(plan_memory(s, gpu_bytes).fits for s in shapes):
                fitting = [micro]
                break
        total = fitting[0] * processes
        chosen[model] = {
            "prompts_per_step": total,
            "gradient_accumulation_steps": PAPER_PROMPTS_PER_STEP // total,
            "gradient_checkpointing": ckpt,
        }
    return chosen


PAPER_MODEL_TRAIN = paper_model_train()


def paper_steps(task: str, n_train: int, prompts_per_optimizer_step: int = PAPER_PROMPTS_PER_STEP) -> int:
    """Optimizer steps for the paper's epochs of ``task`` over ``n_train`` training prompts.

    >>> paper_steps("code-generation", 2641)
    1238
    """
    return math.ceil(PAPER_EPOCHS[task] * n_train / prompts_per_optimizer_step)
