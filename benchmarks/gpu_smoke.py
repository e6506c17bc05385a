"""GPU smoke test and throughput comparison: mrbench's cell path vs plain TRL, no hub needed.

Builds a randomly initialised Qwen2-shaped model of about 100 M parameters here (a byte-level BPE
tokenizer trained on the task's demonstrations, :func:`mrbench.engine.models.tiny.train_tokenizer`),
then trains it for ``--steps`` GRPO steps

- once per method through mrbench's cell path (:func:`mrbench.engine.cell.runner.run_cell`: evaluation
  before and after, the method's advantages, diagnostics and shadows, MLflow logging), and
- once through plain TRL ``GRPOTrainer`` with the same GRPO settings (TRL's config as mrbench
  builds it) and one reward function: the weighted sum of the task's components,

each without vLLM and, where vLLM is installed and a CUDA GPU is visible, with it (colocated).
Both get the same policy in the same precision (``--precision``, as a cell reads it: float32
master weights, bfloat16 autocast under mixed precision), so the comparison measures mrbench's
overhead, not a dtype. Like with like in the timed part too: neither side writes a checkpoint
while it trains (the cell's training checkpoints are off, ``checkpoint_every=0``; plain TRL's
``save_strategy`` is ``"no"``), and the peak GPU memory is that of the training alone, read around
the trainer's ``train()`` on both sides (:func:`training_peak`; mrbench's evaluations before and
after are not in it). Each run is a process of its own that sees one GPU, the first visible one
(:func:`row_env`): a cell process that sees several stops before it runs, and plain TRL would
wrap the model in ``DataParallel``; a colocated vLLM engine ends with the process. It prints, per
run: training seconds, seconds per step, tokens per second (prompt and completion tokens TRL
counted, over the training seconds) and peak GPU memory, then mrbench's tokens/s as a share of
plain TRL's. Training time only: mrbench's evaluations are timed apart (``perf/eval_s``).

    python benchmarks/gpu_smoke.py                                  # GPU: ~100 M model, 20 steps
    python benchmarks/gpu_smoke.py --task agent-security            # the multi-turn rollout
    python benchmarks/gpu_smoke.py --device cpu --steps 2 --tiny    # the same code on a CPU, in minutes

Results and models go to a temporary folder (or ``--out``). A random model's completions run to
the token budget, so every run generates about the same number of tokens.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

SHAPES = {
    # hidden, layers, heads, kv heads, MLP width: ~105 M parameters with a 4k vocabulary.
    "smoke": (768, 12, 12, 2, 3072),
    "tiny": (64, 2, 4, 2, 128),
}
VOCAB = 4096


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--tiny", action="store_true", help="a ~0.3 M model instead of ~100 M (CPU checks)")
    parser.add_argument("--methods", default="grpo,gdpo,corrgrpo")
    parser.add_argument("--task", default="tool-calling")
    parser.add_argument("--vllm", choices=("auto", "on", "off"), default="auto")
    parser.add_argument("--out", type=Path, default=None, help="folder for the model and the MLflow store")
    parser.add_argument("--precision", choices=("auto", "bf16", "fp32"), default="auto")
    # One run of the table, in this process (what main() starts once per run):
    parser.add_argument("--row", default=None, help=argparse.SUPPRESS)  # "plain" or a method
    parser.add_argument("--row-vllm", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--row-model", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--row-json", type=Path, default=None, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def build_model(out: Path, task_name: str, tiny: bool) -> tuple[str, int]:
    """Save a random Qwen2-shaped model and its tokenizer to ``out``; return (path, parameters)."""
    from mrbench.engine.models.catalog import load_tokenizer
    from mrbench.engine.models.tiny import TinyPreset, train_tokenizer, untrained_model
    from mrbench.tasks import build_task

    task = build_task(task_name)
    try:
        demos = task.demonstrations(300, 0)
    finally:
        task.close()
    texts = [m["content"] for prompt, _ in demos for m in prompt] + [c for _, c in demos]
    hidden, layers, heads, kv_heads, mlp = SHAPES["tiny" if tiny else "smoke"]
    preset = TinyPreset(hidden, layers, heads, kv_heads, mlp, sft_steps=0, sft_lr=0.0, vocab_size=VOCAB)
    tok = train_tokenizer(texts, preset.vocab_size)
    model = untrained_model(preset, tok)
    model.config.save_pretrained(out)  # first: AutoTokenizer picks its class from the config
    tok.save_pretrained(out)
    model.save_pretrained(out)
    load_tokenizer(str(out))  # fails here, not mid-run, if it does not load back
    return str(out), sum(p.numel() for p in model.parameters())


def peak_memory_gb() -> float | None:
    import torch

    return torch.cuda.max_memory_allocated() / 2**30 if torch.cuda.is_available() else None


def reset_peak() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


@contextmanager
def training_peak(
    trainer_class: type,
    reset: Callable[[], None] = reset_peak,
    read: Callable[[], float | None] = peak_memory_gb,
) -> Iterator[dict[str, float | None]]:
    """While the block runs, every ``trainer_class(...).train()`` resets the peak-memory counter as
    it starts and reads it as it ends: the yielded dict's ``peak_gb`` is the training's own peak,
    not the model's loading nor an evaluation's (None on a CPU)."""
    original, own = trainer_class.train, "train" in vars(trainer_class)
    seen: dict[str, float | None] = {"peak_gb": None}

    def train(self: Any, *args: Any, **kwargs: Any) -> Any:
        reset()
        try:
            return original(self, *args, **kwargs)
        finally:
            seen["peak_gb"] = read()

    trainer_class.train = train
    try:
        yield seen
    finally:
        if own:
            trainer_class.train = original
        else:  # inherited: the base class's method shows through again
            del trainer_class.train


def row_env(env: Mapping[str, str]) -> dict[str, str]:
    """The environment of one run's process: ``env`` with ``CUDA_VISIBLE_DEVICES`` narrowed to the
    first GPU it shows (unchanged on a machine without GPUs, or with the variable empty)."""
    from mrbench.engine.processes.devices import VISIBLE, visible_gpus

    out = dict(env)
    gpus = visible_gpus(out)
    if gpus:
        out[VISIBLE] = gpus[0]
    return out


def train_settings(args: argparse.Namespace, use_vllm: bool) -> dict[str, Any]:
    small = args.tiny
    return {
        "steps": args.steps,
        "prompts_per_step": 2 if small else 8,
        "num_generations": 2 if small else 8,
        "learning_rate": 1e-5,
        "eval_limit": 4 if small else 16,
        "use_vllm": use_vllm,
        "precision": args.precision,
    }


def task_params(args: argparse.Namespace) -> dict[str, Any]:
    n_train = max(16, args.steps * (2 if args.tiny else 8))
    return {"n_train": n_train, "n_eval": 4 if args.tiny else 16} if args.task == "tool-calling" else {}


def run_mrbench(
    args: argparse.Namespace, model: str, method: str, use_vllm: bool, uri: str
) -> dict[str, Any]:
    from mlflow.tracking import MlflowClient

    from mrbench.core import layout
    from mrbench.engine.cell.runner import run_cell
    from mrbench.engine.config import resolve_spec
    from mrbench.engine.training.trainer import MultiRewardGRPOTrainer

    spec = resolve_spec(
        method, args.task, model, 0, task_params=task_params(args), train=train_settings(args, use_vllm)
    )
    with training_peak(MultiRewardGRPOTrainer) as peak:
        # No training checkpoints in the timed part: plain TRL writes none either.
        result = run_cell(
            spec, tracking_uri=uri, experiment="gpu-smoke", progress=False, save="none", checkpoint_every=0
        )
    metrics = MlflowClient(tracking_uri=uri).get_run(result.run_id).data.metrics
    return {
        "path": f"mrbench {method}",
        "vllm": use_vllm,
        "train_s": metrics[layout.PERF_TRAIN_S],
        "tokens": metrics[layout.step_metric("num_tokens")],
        "peak_gb": peak["peak_gb"],
    }


def plain_trl_trainer(args: argparse.Namespace, model: str, use_vllm: bool, out_dir: str) -> tuple[Any, Any]:
    """Plain ``GRPOTrainer`` as a cell would be set up, one summed reward function: the config
    mrbench builds for the cell and its policy loaded as the cell loads it (float32, the master
    weights under mixed precision). Returns ``(trainer, task)``; close the task when done."""
    from datasets import Dataset
    from trl import GRPOTrainer

    from mrbench.engine.config import resolve_spec
    from mrbench.engine.evaluation.policy import load_policy
    from mrbench.engine.models.catalog import Precision
    from mrbench.engine.training.grpo_setup import grpo_config
    from mrbench.tasks import build_task

    spec = resolve_spec(
        "grpo", args.task, model, 0, task_params=task_params(args), train=train_settings(args, use_vllm)
    )
    task = build_task(spec.task, spec.task_params)
    components = task.reward_components()

    def summed_reward(prompts: list[Any], completions: list[Any], **columns: Any) -> list[float]:
        total = [0.0] * len(completions)
        for component in components:
            values = component.fn(prompts=prompts, completions=completions, **columns)
            for i, value in enumerate(values):
                total[i] += component.weight * (value if value is not None else 0.0)
        return total

    rows = [{"prompt": s.prompt, "sample_id": s.id, **s.columns} for s in task.train_samples()]
    config = grpo_config(spec, task, out_dir, progress=False, precision=Precision.of(spec.train.precision))
    config.reward_weights = None  # one reward function: weight 1
    if "rollout" in task.training_hooks():
        # Plain TRL has no multi-turn rollout of its own: compare single-turn generation only.
        print("plain TRL: the task's multi-turn rollout is mrbench's; TRL generates one turn")
    policy, tokenizer = load_policy(model, dtype="float32")  # as run_cell loads it
    trainer = GRPOTrainer(
        model=policy,
        reward_funcs=[summed_reward],
        args=config,
        train_dataset=Dataset.from_list(rows),
        processing_class=tokenizer,
    )
    return trainer, task


def run_plain_trl(args: argparse.Namespace, model: str, use_vllm: bool) -> dict[str, Any]:
    """Plain ``GRPOTrainer`` (:func:`plain_trl_trainer`), trained and timed."""
    with tempfile.TemporaryDirectory(prefix="gpu-smoke-trl-") as out_dir:
        trainer, task = plain_trl_trainer(args, model, use_vllm, out_dir)
        try:
            with training_peak(type(trainer)) as peak:
                t0 = time.perf_counter()
                trainer.train()
                train_s = time.perf_counter() - t0
            tokens = float(trainer.state.num_input_tokens_seen)
        finally:
            task.close()
    return {
        "path": "plain TRL",
        "vllm": use_vllm,
        "train_s": train_s,
        "tokens": tokens,
        "peak_gb": peak["peak_gb"],
    }


def vllm_modes(choice: str) -> list[bool]:
    import torch

    available = importlib.util.find_spec("vllm") is not None and torch.cuda.is_available()
    if choice == "on" and not available:
        sys.exit("--vllm on: vLLM is not installed or no CUDA GPU is visible (pip install 'mrbench[vllm]')")
    return {"off": [False], "on": [True], "auto": [False, True] if available else [False]}[choice]


def print_table(rows: list[dict[str, Any]], steps: int) -> None:
    print(f"\n{'path':<18} {'vllm':<5} {'train s':>8} {'s/step':>7} {'tokens/s':>9} {'peak GPU GB':>11}")
    for r in rows:
        peak = f"{r['peak_gb']:.2f}" if r["peak_gb"] is not None else "-"
        print(
            f"{r['path']:<18} {r['vllm']!s:<5} {r['train_s']:>8.1f} {r['train_s'] / steps:>7.2f} "
            f"{r['tokens'] / r['train_s']:>9.0f} {peak:>11}"
        )
    for use_vllm in sorted({r["vllm"] for r in rows}):
        trl = [r for r in rows if r["vllm"] == use_vllm and r["path"] == "plain TRL"]
        ours = [r for r in rows if r["vllm"] == use_vllm and r["path"] != "plain TRL"]
        if trl and ours:
            base = trl[0]["tokens"] / trl[0]["train_s"]
            shares = ", ".join(f"{r['path']} {r['tokens'] / r['train_s'] / base:.1%}" for r in ours)
            print(f"vllm={use_vllm}: mrbench tokens/s as a share of plain TRL's: {shares}")


def run_row(args: argparse.Namespace) -> int:
    """One run of the table in this process (``--row``): its row as JSON in ``--row-json``."""
    uri = f"sqlite:///{args.out / 'mlflow.db'}"
    if args.row == "plain":
        row = run_plain_trl(args, args.row_model, args.row_vllm)
    else:
        row = run_mrbench(args, args.row_model, args.row, args.row_vllm, uri)
    args.row_json.write_text(json.dumps(row))
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.device == "cpu":
        os.environ["CUDA_VISIBLE_DEVICES"] = ""  # before torch sees the GPUs
    if args.row is not None:
        return run_row(args)
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("--device cuda: no CUDA GPU is visible")
    with tempfile.TemporaryDirectory(prefix="gpu-smoke-") as tmp:
        root = args.out or Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        os.environ["MRBENCH_RESULTS"] = str(root / "results")
        model, n_params = build_model(root / "model", args.task, args.tiny)
        device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
        print(f"model: {n_params / 1e6:.1f} M parameters; device: {device}; torch {torch.__version__}")
        rows = []
        for use_vllm in vllm_modes(args.vllm):
            for path in ["plain", *args.methods.split(",")]:
                out = root / f"row-{path}-{int(use_vllm)}.json"
                command = [sys.executable, __file__, *(argv if argv is not None else sys.argv[1:])]
                command += ["--out", str(root), "--row", path, "--row-model", model, "--row-json", str(out)]
                command += ["--row-vllm"] if use_vllm else []
                done = subprocess.run(command, check=False, env=row_env(os.environ))
                if done.returncode != 0:
                    sys.exit(f"the run {path} (vllm={use_vllm}) failed with exit code {done.returncode}")
                rows.append(json.loads(out.read_text()))
        print_table(rows, args.steps)
        if not torch.cuda.is_available():
            rss_gb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20
            print(f"(CPU run: peak resident memory of a run's process {rss_gb:.2f} GB)")
        if args.out:
            summary = {"device": device, "params": n_params, "steps": args.steps, "rows": rows}
            (root / "gpu_smoke.json").write_text(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
