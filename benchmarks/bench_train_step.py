"""Training-step overhead of the harness's advantage hook vs plain TRL ``GRPOTrainer``.

Both trainers get the same model, data, reward functions, seed and config; the harness uses the
registered ``grpo`` method with TRL's ε (1e-4), so both compute identical advantages and take
identical optimisation steps: the only difference is the hook (advantage recomputation +
``adv/...`` diagnostics). Runs alternate A/B/A/B to spread machine noise over both sides; the
figure is the ratio of median seconds per step.

    python benchmarks/bench_train_step.py [--steps 8] [--repeats 3] [--model tiny]

Exits 1 if the overhead exceeds 5 %.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import torch
from datasets import Dataset
from trl import GRPOConfig, GRPOTrainer

import mrbench.methods as methods
from mrbench.engine.models import load_model, load_tokenizer, prepare_model
from mrbench.tasks import build_task

TARGET = 0.05


def seconds_per_step(trainer_cls, model_path, task, steps, extra):
    tok = load_tokenizer(model_path)
    rows = [{"prompt": s.prompt, **s.columns} for s in task.train_samples()]
    with tempfile.TemporaryDirectory() as out:
        cfg = GRPOConfig(
            output_dir=out,
            max_steps=steps,
            per_device_train_batch_size=32,
            num_generations=8,
            max_completion_length=task.max_completion_tokens,
            learning_rate=5e-4,
            lr_scheduler_type="constant",
            logging_steps=1,
            report_to=[],
            save_strategy="no",
            use_cpu=True,
            bf16=False,
            disable_tqdm=True,
            remove_unused_columns=False,
            seed=0,
        )
        trainer = trainer_cls(
            model=load_model(model_path),
            reward_funcs=[c.fn for c in task.reward_components()],
            args=cfg,
            train_dataset=Dataset.from_list(rows),
            processing_class=tok,
            **extra,
        )
        start = time.perf_counter()
        trainer.train()
        return (time.perf_counter() - start) / steps


def main() -> int:
    from mrbench.engine.trainer import MultiRewardGRPOTrainer

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--task", default="tool-calling")
    args = parser.parse_args()
    torch.set_num_threads(max(1, torch.get_num_threads()))
    model_path = prepare_model(args.model)
    task = build_task(args.task)
    ours = {"method_fn": methods.get_method("grpo").obj, "method_params": {"eps": 1e-4}}
    plain, harness = [], []
    seconds_per_step(GRPOTrainer, model_path, task, 2, {})  # warm-up: imports, allocator, kernels
    for _ in range(args.repeats):
        plain.append(seconds_per_step(GRPOTrainer, model_path, task, args.steps, {}))
        harness.append(seconds_per_step(MultiRewardGRPOTrainer, model_path, task, args.steps, ours))
    p, h = statistics.median(plain), statistics.median(harness)
    overhead = h / p - 1
    print(
        f"model {args.model}, task {args.task}, {args.steps} steps"
        f" × {args.repeats} alternating repeats, 4×8 batch"
    )
    print("| trainer | median s/step | all runs (s/step) |")
    print("|---|---|---|")
    print(f"| TRL GRPOTrainer | {p:.3f} | {', '.join(f'{x:.3f}' for x in plain)} |")
    print(f"| mrbench (grpo via hook) | {h:.3f} | {', '.join(f'{x:.3f}' for x in harness)} |")
    print(f"overhead: {overhead * 100:+.1f} % (target ≤ {TARGET * 100:.0f} %)")
    return 0 if overhead <= TARGET else 1


if __name__ == "__main__":
    raise SystemExit(main())
