"""A GRPO training step of mrbench's trainer vs plain TRL ``GRPOTrainer``, on the same work.

Every arm gets the same model, prompts, reward functions, seed and config, the config a cell runs
(gradient checkpointing off, float32 on the CPU: :func:`mrbench.engine.training.grpo_setup.grpo_config`);
the harness uses the registered ``grpo`` method with TRL's ε (1e-4), so every arm computes the same
advantages. Arms:

- ``TRL``: plain ``GRPOTrainer`` with TRL's own CPU log-prob folds;
- ``mrbench shared prefix off``: what a cell ran before shared prefixes (the advantage hook,
  diagnostics and shadow estimators, mrbench's CPU folds: :mod:`mrbench.engine.training.cpu_logprob`);
- ``mrbench shared prefix on``: the same with each group's prompt encoded once
  (:mod:`mrbench.engine.training.shared_prefix`), when scoring and when generating.

Each arm runs in a fresh process (so its peak resident memory is its own), the arms in turn,
``--repeats`` times; the figures are ratios of median seconds per step (``trainer.train()`` over
``--steps`` steps, model loading excluded), measured in the same run. The shadows' own cost is
timed inside the runs (seconds in the shadow estimators over seconds per step).

    python benchmarks/bench_train_step.py [--steps 8] [--repeats 3] [--model tiny]
    python benchmarks/bench_train_step.py --model smollm2-135m --task tool-calling --prompts 2 \
        --generations 8 --lr 1e-5 --task-param max_completion_tokens=64 --steps 1 --repeats 1

The task gets the settings the model was built for (the tiny models: compact prompts) under the
``--task-param`` ones; ``--prompts`` × ``--generations`` completions a step.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

ARMS = ("TRL", "mrbench shared prefix off", "mrbench shared prefix on")


def run_arm(arm: str, args: argparse.Namespace) -> dict[str, float]:
    """Train ``args.steps`` steps with ``arm``'s trainer in this process: seconds per step, the
    shadows' seconds per step, mean completion length and this process's peak RSS (MiB)."""
    import torch
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    import mrbench.methods as methods
    from mrbench.engine.models.catalog import load_model, load_tokenizer, model_task_settings, prepare_model
    from mrbench.engine.processes.allocator import keep_freed_blocks
    from mrbench.engine.training import cpu_logprob
    from mrbench.engine.training.trainer import MultiRewardGRPOTrainer
    from mrbench.kit.keyvalue import parse_key_values
    from mrbench.tasks import build_task, get_task_entry

    torch.set_num_threads(max(1, torch.get_num_threads()))
    keep_freed_blocks()  # as every cell process does on the CPU, for every arm (engine.processes.allocator)
    model_path = prepare_model(args.model)
    accepted = get_task_entry(args.task).params
    built_for = {k: v for k, v in model_task_settings(args.model).items() if k in accepted}
    task = build_task(args.task, {**built_for, **parse_key_values(args.task_param, flag="--task-param")})
    tok = load_tokenizer(model_path)
    rows = [{"prompt": s.prompt, **s.columns} for s in task.train_samples()]
    with tempfile.TemporaryDirectory() as out:
        cfg = GRPOConfig(
            output_dir=out,
            max_steps=args.steps,
            per_device_train_batch_size=args.prompts * args.generations,
            num_generations=args.generations,
            max_completion_length=task.max_completion_tokens,
            learning_rate=args.lr,
            lr_scheduler_type="constant",
            logging_steps=1,
            report_to=[],
            save_strategy="no",
            use_cpu=True,
            bf16=False,
            gradient_checkpointing=False,  # as a cell runs (TRL 1.16 defaults it on)
            disable_tqdm=True,
            remove_unused_columns=False,
            seed=0,
        )
        common = {
            "model": load_model(model_path),
            "reward_funcs": [c.fn for c in task.reward_components()],
            "args": cfg,
            "train_dataset": Dataset.from_list(rows),
            "processing_class": tok,
        }
        if arm == "TRL":
            cpu_logprob.uninstall()
            trainer = GRPOTrainer(**common)
        else:
            cpu_logprob.install()
            trainer = MultiRewardGRPOTrainer(
                **common,
                method_fn=methods.get_method("grpo").obj,
                method_params={"eps": 1e-4},
                shared_prefix=arm.endswith("on"),
            )
        shadow_s = time_shadows(trainer)
        load_before = _load()
        start = time.perf_counter()
        trainer.train()
        elapsed = time.perf_counter() - start
        lengths = [
            r["completions/mean_length"] for r in trainer.state.log_history if "completions/mean_length" in r
        ]
    return {
        "load": max(load_before, _load()),
        "s_per_step": elapsed / args.steps,
        "shadow_s_per_step": shadow_s[0] / args.steps,
        "mean_completion_length": statistics.fmean(lengths),
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def _load() -> float:
    """The one-minute load average."""
    with open("/proc/loadavg") as fh:
        return float(fh.read().split()[0])


def time_shadows(trainer: Any) -> list[float]:
    """Add up, in the returned one-element list, the seconds ``trainer``'s shadow estimators take
    (``StepDiagnostics._shadow_step``); ``[0.0]`` for a trainer without them."""
    total = [0.0]
    diagnostics = getattr(trainer, "step_diagnostics", None)
    if diagnostics is None:
        return total
    inner = diagnostics._shadow_step

    def timed(*a: Any, **kw: Any) -> Any:
        start = time.perf_counter()
        try:
            return inner(*a, **kw)
        finally:
            total[0] += time.perf_counter() - start

    diagnostics._shadow_step = timed
    return total


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--task", default="tool-calling")
    parser.add_argument("--prompts", type=int, default=4, help="prompts per step")
    parser.add_argument("--generations", type=int, default=8, help="completions per prompt (G)")
    parser.add_argument("--lr", type=float, default=5e-4)
    parser.add_argument("--task-param", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument(
        "--arms", default=",".join(ARMS), help=f"comma-separated, TRL first (default: {', '.join(ARMS)})"
    )
    parser.add_argument("--arm", choices=ARMS, help=argparse.SUPPRESS)  # one arm, in this process
    args = parser.parse_args()
    if args.arm:
        print(json.dumps(run_arm(args.arm, args)))
        return 0
    arms = [a.strip() for a in args.arms.split(",")]
    if arms[0] != "TRL" or not set(arms) <= set(ARMS):
        parser.error(f"--arms: TRL first, then any of {', '.join(ARMS[1:])}")
    runs: dict[str, list[dict[str, float]]] = {arm: [] for arm in arms}
    for _ in range(args.repeats):
        for arm in arms:
            cmd = [sys.executable, __file__, *sys.argv[1:], "--arm", arm]
            done = subprocess.run(cmd, capture_output=True, text=True)
            if done.returncode != 0:  # e.g. killed for memory: say which arm, keep what ran
                print(f"arm {arm!r} failed (exit {done.returncode}): {done.stderr[-2000:]}", file=sys.stderr)
                return 1
            runs[arm].append(json.loads(done.stdout.strip().splitlines()[-1]))
    median = {arm: statistics.median(r["s_per_step"] for r in rs) for arm, rs in runs.items()}
    load = open("/proc/loadavg").read().split()[:3]
    print(
        f"model {args.model}, task {args.task}, {args.prompts}×{args.generations} completions,"
        f" {args.steps} steps × {args.repeats} alternating repeats; load average {' '.join(load)}"
    )
    print(
        "| trainer | median s/step | vs TRL | runs (s/step) | mean completion tokens | peak RSS MiB | load |"
    )
    print("|---|---|---|---|---|---|---|")
    trl = median["TRL"]
    for arm, rs in runs.items():
        each = ", ".join(f"{r['s_per_step']:.2f}" for r in rs)
        print(
            f"| {arm} | {median[arm]:.2f} | {trl / median[arm]:.2f}× faster | {each} |"
            f" {statistics.fmean(r['mean_completion_length'] for r in rs):.1f} |"
            f" {max(r['peak_rss_mib'] for r in rs):.0f} | {max(r['load'] for r in rs):.1f} |"
        )
    shares = [r["shadow_s_per_step"] / r["s_per_step"] for arm in arms[1:] for r in runs[arm]]
    if shares:
        print(f"shadow estimators, timed in the runs: {statistics.median(shares) * 100:.2f} % of a step")
    if ARMS[2] in median:
        print(f"shared prefix on vs plain TRL: {trl / median[ARMS[2]]:.2f}× faster")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
