"""What a cell hands TRL: the ``GRPOConfig`` of a :class:`~mrbench.engine.config.RunSpec` and the
training dataset of a task's samples (:mod:`mrbench.engine.cell.runner` builds the trainer from them)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from mrbench.core.contracts import Sample, Task
from mrbench.engine.config import RunSpec
from mrbench.engine.models.catalog import Precision
from mrbench.engine.processes.distributed import per_process


def train_dataset(samples: list[Sample]) -> Any:
    """One dataset row per sample: ``prompt``, ``sample_id`` and the sample's columns."""
    from datasets import Dataset

    rows = [{"prompt": s.prompt, "sample_id": s.id, **s.columns} for s in samples]
    return Dataset.from_list(rows)


def grpo_config(
    spec: RunSpec,
    task: Task,
    output_dir: str,
    progress: bool,
    *,
    precision: Precision,
    save_every: int = 0,
    vllm_max_length: int | None = None,
) -> Any:
    """TRL's config for ``spec`` under ``precision`` (the cell's ``precision`` setting, resolved once
    by the cell: :meth:`~mrbench.engine.models.catalog.Precision.of`); ``save_every`` > 0 saves the
    model (only) every that many steps into ``output_dir/checkpoint-<step>``; ``vllm_max_length``:
    vLLM's context with ``use_vllm`` (:func:`mrbench.engine.evaluation.generation.vllm_context_cap`)."""
    import torch
    from trl import GRPOConfig

    train = spec.train
    on_gpu = torch.cuda.is_available()
    mixed = precision.mixed
    return GRPOConfig(
        output_dir=output_dir,
        max_steps=train.steps,
        # prompts_per_step is per generation batch over all processes of a multi-process cell.
        per_device_train_batch_size=per_process(train.prompts_per_step) * train.num_generations,
        gradient_accumulation_steps=train.gradient_accumulation_steps,
        num_generations=train.num_generations,
        learning_rate=train.learning_rate,
        # Short runs: a decaying schedule would spend half the steps at a low rate.
        lr_scheduler_type="constant",
        beta=train.beta,
        temperature=train.temperature,
        max_completion_length=train.max_completion_length or task.max_completion_tokens,
        reward_weights=[c.weight for c in task.reward_components()],
        logging_steps=1,
        report_to=[],
        save_strategy="steps" if save_every else "no",
        save_steps=save_every or 500,
        # With optimizer, scheduler and RNG state: a cell resumes from it (mrbench.engine.cell.resume, whose
        # callback also asks for the training checkpoints; save every:N ones end model-only).
        save_only_model=False,
        seed=spec.seed,
        use_cpu=not on_gpu,
        # Mixed precision: bfloat16 autocast over the float32 policy the cell loaded (the master weights).
        bf16=mixed,
        # With a KL term TRL builds the reference model from these: bfloat16 under mixed precision (it
        # is never updated), and on this process's device, not spread by device_map="auto" (which TRL
        # leaves on for FSDP). They apply to the reference only: the policy is passed loaded.
        model_init_kwargs={"dtype": "bfloat16" if mixed else "float32", "device_map": None}
        if train.beta > 0
        else None,
        gradient_checkpointing=train.gradient_checkpointing,
        # Colocated: vLLM shares the training GPU (TRL's default 30 % of its memory); TRL syncs the
        # policy's weights into it before each generation batch.
        use_vllm=train.use_vllm,
        vllm_mode="colocate",
        vllm_max_model_length=vllm_max_length if train.use_vllm else None,
        disable_tqdm=not progress,
        dataloader_num_workers=0,
        remove_unused_columns=False,
        log_completions=False,
    )


def vllm_dtype(precision: Precision) -> str:
    """The dtype a cell of ``precision`` generates in with vLLM: ``bfloat16`` under mixed precision,
    else ``float32`` — as its transformers generation computes. vLLM's own ``"auto"`` would turn
    the float32 folder a cell loads into bfloat16 (float16 on GPUs before Ampere) whatever the
    precision."""
    return "bfloat16" if precision.mixed else "float32"


@contextmanager
def vllm_engine_options(spec: RunSpec, precision: Precision) -> Iterator[None]:
    """While the trainer is built (TRL builds its colocated ``vllm.LLM`` in the constructor), hand
    ``vllm.LLM`` the options TRL 1.16 has no ``GRPOConfig`` field for: ``dtype`` (:func:`vllm_dtype`
    of the cell's resolved ``precision``).

    TRL calls ``LLM(...)`` by its name in ``trl.generation.vllm_generation``; that name is
    wrapped for the duration and put back after. Nothing happens without ``use_vllm`` or vLLM.
    """
    from trl.generation import vllm_generation

    original = getattr(vllm_generation, "LLM", None)
    if not spec.train.use_vllm or original is None:
        yield
        return
    options = {"dtype": vllm_dtype(precision)}

    def llm(*args: Any, **kwargs: Any) -> Any:
        return original(*args, **{**kwargs, **options})

    vllm_generation.LLM = llm
    try:
        yield
    finally:
        vllm_generation.LLM = original
