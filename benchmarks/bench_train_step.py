"""Training-step overhead of the harness's advantage hook vs plain TRL ``GRPOTrainer``.

All trainers get the same model, data, reward functions, seed and config; the harness uses the
registered ``grpo`` method with TRL's ε (1e-4), so every arm computes identical advantages and
takes identical optimisation steps: the only difference is the hook (advantage recomputation,
``adv/...`` diagnostics and, by default, the shadow estimators). Three arms run in turn
(TRL / mrbench without shadows / mrbench with every other method as a shadow) to spread machine
noise over all of them; the figures are ratios of median seconds per step. The shadows' own
cost is also timed inside the run (seconds in ``_shadow_step`` per step over seconds per step),
which is not blurred by run-to-run noise.

    python benchmarks/bench_train_step.py [--steps 8] [--repeats 3] [--model tiny]
    python benchmarks/bench_train_step.py --model smollm2-135m --task code-generation \
        --prompts 2 --generations 8 --lr 1e-5 --task-param max_completion_tokens=48 --steps 2 --repeats 2

The task gets the settings the model was built for (the tiny models: compact prompts) under the
``--task-param`` ones; ``--prompts`` × ``--generations`` completions a step.

Exits 1 if the harness (with shadows) is more than 5 % slower than TRL or the shadows take more
than 5 % of a step.
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
from mrbench.engine.models import load_model, load_tokenizer, model_task_settings, prepare_model
from mrbench.kit.keyvalue import parse_key_values
from mrbench.tasks import build_task, get_task_entry

TARGET = 0.05


def seconds_per_step(
    trainer_cls, model_path, task, steps, extra, batch=(4, 8), lr=5e-4
) -> tuple[float, float]:
    """(seconds per step, seconds per step spent in the shadow estimators, 0 without them)."""
    tok = load_tokenizer(model_path)
    rows = [{"prompt": s.prompt, **s.columns} for s in task.train_samples()]
    with tempfile.TemporaryDirectory() as out:
        cfg = GRPOConfig(
            output_dir=out,
            max_steps=steps,
            per_device_train_batch_size=batch[0] * batch[1],
            num_generations=batch[1],
            max_completion_length=task.max_completion_tokens,
            learning_rate=lr,
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
        elapsed = time.perf_counter() - start
        return elapsed / steps, getattr(trainer, "shadow_s", 0.0) / steps


def timed_shadows(base):
    """``base`` (a MultiRewardGRPOTrainer) that adds up the seconds its shadow estimators take."""

    class TimedShadows(base):
        shadow_s = 0.0

        def _shadow_step(self, rewards, weights, adv):
            start = time.perf_counter()
            try:
                return super()._shadow_step(rewards, weights, adv)
            finally:
                self.shadow_s += time.perf_counter() - start

    return TimedShadows


def main() -> int:
    from mrbench.engine.trainer import MultiRewardGRPOTrainer, resolve_shadows

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--task", default="tool-calling")
    parser.add_argument("--prompts", type=int, default=4, help="prompts per step")
    parser.add_argument("--generations", type=int, default=8, help="completions per prompt (G)")
    parser.add_argument("--lr", type=float, default=5e-4)
    parser.add_argument("--task-param", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()
    torch.set_num_threads(max(1, torch.get_num_threads()))
    model_path = prepare_model(args.model)
    accepted = get_task_entry(args.task).params
    built_for = {k: v for k, v in model_task_settings(args.model).items() if k in accepted}
    task = build_task(args.task, {**built_for, **parse_key_values(args.task_param, flag="--task-param")})
    shape = (args.prompts, args.generations)
    ours = {"method_fn": methods.get_method("grpo").obj, "method_params": {"eps": 1e-4}}
    arms = {
        "TRL GRPOTrainer": (GRPOTrainer, {}),
        "mrbench, grpo via hook, no shadows": (MultiRewardGRPOTrainer, {**ours, "shadow_methods": ()}),
        "mrbench, grpo via hook + shadows": (timed_shadows(MultiRewardGRPOTrainer), ours),
    }
    shadows = list(resolve_shadows(ours["method_fn"], None))
    runs: dict[str, list[float]] = {name: [] for name in arms}
    shadow_runs: list[float] = []
    seconds_per_step(GRPOTrainer, model_path, task, 2, {}, shape, args.lr)  # warm-up: imports, allocator
    for _ in range(args.repeats):
        for name, (cls, extra) in arms.items():
            per_step, shadow_per_step = seconds_per_step(
                cls, model_path, task, args.steps, extra, shape, args.lr
            )
            runs[name].append(per_step)
            if shadow_per_step:
                shadow_runs.append(shadow_per_step / per_step)
    median = {name: statistics.median(values) for name, values in runs.items()}
    plain, bare, full = median.values()
    overhead = full / plain - 1
    shadow_share = statistics.median(shadow_runs)
    print(
        f"model {args.model}, task {args.task}, {args.steps} steps"
        f" × {args.repeats} alternating repeats, {args.prompts}×{args.generations} batch;"
        f" shadows: {', '.join(shadows)}"
    )
    print("| trainer | median s/step | all runs (s/step) |")
    print("|---|---|---|")
    for name, values in runs.items():
        print(f"| {name} | {median[name]:.3f} | {', '.join(f'{x:.3f}' for x in values)} |")
    print(f"hook with shadows vs TRL: {overhead * 100:+.1f} % (target ≤ {TARGET * 100:.0f} %)")
    print(f"shadows on vs off (A/B, noisy): {(full / bare - 1) * 100:+.1f} %")
    print(
        f"shadow estimators, timed in the run: {shadow_share * 100:.2f} % of a step"
        f" (runs: {', '.join(f'{x * 100:.2f}' for x in shadow_runs)}; target ≤ {TARGET * 100:.0f} %)"
    )
    return 0 if overhead <= TARGET and shadow_share <= TARGET else 1


if __name__ == "__main__":
    raise SystemExit(main())
