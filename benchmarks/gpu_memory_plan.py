"""The memory plan against a measured peak: one paper cell at full size, random weights, one GPU.

``mrbench sweep --preset paper`` refuses a cell whose memory plan (:mod:`mrbench.sweeps.memory_plan`)
does not fit its GPU and picks each model's micro-batch with it. This checks that arithmetic on a
real GPU without the real weights (no hub needed):

- the model: ``--model``'s architecture at full size (its ``config.json`` sizes, vocabulary
  included, from :data:`mrbench.sweeps.memory_plan.CONFIGS`) with random weights, and a byte-level
  BPE tokenizer trained here on the tasks' text (ids past it are never in a prompt and decode to
  nothing). A random model almost never ends a completion, so every completion runs to the token
  budget: the plan's worst case;
- the cell: the paper preset's settings for that model and task on one process
  (``--processes-per-cell 1 --distributed ddp``: the micro-batch the preset picks for one 80 GB
  GPU), its loader and rewards on the rehearsal's stand-in data (``mrbench sweep --preset paper
  --rehearse`` uses the same), ``--steps`` optimizer steps, one evaluation item (evaluations are
  not measured);
- the measurement: ``torch.cuda.max_memory_allocated`` and ``max_memory_reserved`` over the
  trainer's ``train()`` (generation and training; not the model's loading nor the evaluations);
- the plan: :func:`~mrbench.sweeps.memory_plan.plan_memory` of the same cell twice: with the preset's
  assumed longest prompt (what ``--dry-run`` prints) and with the longest prompt of this run's
  training set, which is what the measurement saw. The plan includes a fixed 2 GiB headroom
  (CUDA context, allocator) that ``max_memory_allocated`` does not count; both are printed.

    python benchmarks/gpu_memory_plan.py --model Qwen/Qwen2.5-Coder-0.5B-Instruct --out /tmp/mp
    python benchmarks/gpu_memory_plan.py --tiny --device cpu    # the same code on a CPU, a tiny shape

With ``--out`` the figures go to ``<out>/memory_plan-<model>.json`` too.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

TINY = {
    "num_hidden_layers": 2,
    "hidden_size": 64,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 128,
    "vocab_size": 8192,
}
"""--tiny: the model's family and these sizes (a CPU check of the code path, not of the plan)."""
TOKENIZER_VOCAB = 4096


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="Qwen/Qwen2.5-Coder-0.5B-Instruct", help="a paper model")
    parser.add_argument("--task", default=None, help="default: the first paper task that trains --model")
    parser.add_argument("--steps", type=int, default=1)
    parser.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    parser.add_argument("--tiny", action="store_true", help="a tiny model of the family, 16 tokens")
    parser.add_argument("--out", type=Path, default=None)
    return parser.parse_args(argv)


def paper_task_of(model: str) -> str:
    from mrbench.sweeps.paper import PAPER_MODELS, TASKS

    for task in TASKS:
        if model in PAPER_MODELS[task]:
            return task
    sys.exit(
        f"{model!r} is not a paper model: {', '.join(sorted({m for t in TASKS for m in PAPER_MODELS[t]}))}"
    )


def cell_settings(model: str, task: str) -> tuple[dict[str, Any], dict[str, Any], list[str]]:
    """The paper preset's ``train`` overrides and task settings of ``model`` × ``task`` on one process,
    with the rehearsal's stand-in data; and the rehearsal's notes on what it substituted."""
    from mrbench.sweeps.rehearsal import rehearsal_spec
    from mrbench.sweeps.spec import build_sweep_spec

    spec = build_sweep_spec(preset="paper", overrides={"processes_per_cell": 1, "distributed": "ddp"})
    spec = replace(
        spec,
        tasks=(task,),
        models=(),
        task_models={task: (model,)},
        model_train={model: spec.model_train.get(model, {})},
        eval={},
    )
    train = dict(spec.train_for(task, model))
    rehearsed = rehearsal_spec(spec)
    data_notes = [n for n in rehearsed.notes if n.startswith(f"{task}:")]
    return train, dict(rehearsed.spec.task_params.get(task, {})), data_notes


def build_model(model: str, out: Path, tiny: bool) -> str:
    """Save ``model``'s architecture with random weights and a tokenizer trained here to ``out``."""
    import torch
    from transformers import AutoModelForCausalLM, Qwen2Config, Qwen3Config

    from mrbench.engine.models.catalog import load_tokenizer
    from mrbench.engine.models.standin import task_prompts
    from mrbench.engine.models.tiny import CHAT_TEMPLATE, collect_demonstrations, train_tokenizer
    from mrbench.sweeps.memory_plan import CONFIGS

    demos, _ = collect_demonstrations(60, seed=0)
    texts = [m["content"] for prompt, _ in demos for m in prompt] + [c for _, c in demos]
    texts += task_prompts(200) + CHAT_TEMPLATE.split("{%")
    tok = train_tokenizer(texts, TOKENIZER_VOCAB)
    sizes = {k: v for k, v in CONFIGS[model].items() if k != "model_type"}
    if tiny:
        sizes.update(TINY)
        sizes.pop("head_dim", None)
    config_class = Qwen3Config if CONFIGS[model]["model_type"] == "qwen3" else Qwen2Config
    config = config_class(
        **sizes,
        max_position_embeddings=32768,
        bos_token_id=tok.convert_tokens_to_ids("<|endoftext|>"),
        eos_token_id=tok.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tok.pad_token_id,
    )
    out.mkdir(parents=True, exist_ok=True)
    config.save_pretrained(out)  # first: AutoTokenizer picks the family's tokenizer class from it
    tok.save_pretrained(out)
    torch.manual_seed(0)
    policy = AutoModelForCausalLM.from_config(config)
    for key in ("eos_token_id", "pad_token_id", "bos_token_id"):
        setattr(policy.generation_config, key, getattr(config, key))
    config.architectures = [type(policy).__name__]
    config.save_pretrained(out)
    policy.save_pretrained(out)
    del policy
    load_tokenizer(str(out))
    return str(out)


def longest_prompt(task_name: str, task_params: dict[str, Any], model_dir: str) -> int:
    """Tokens of the longest training prompt of the cell, chat template applied."""
    from mrbench.engine.models.catalog import load_tokenizer
    from mrbench.tasks import build_task

    tok = load_tokenizer(model_dir)
    task = build_task(task_name, task_params)
    try:
        samples = task.train_samples()
    finally:
        task.close()
    return max(
        len(tok.apply_chat_template(s.prompt, add_generation_prompt=True, tokenize=True, return_dict=False))
        for s in samples
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.device == "cpu":
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the data check's hub datasets: fail at once, offline
    import tempfile

    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("--device cuda: no CUDA GPU is visible")
    from mlflow.tracking import MlflowClient

    from mrbench.core import layout
    from mrbench.engine.cell.runner import run_cell
    from mrbench.engine.config import resolve_spec
    from mrbench.engine.training.trainer import MultiRewardGRPOTrainer
    from mrbench.sweeps.memory_plan import DEFAULT_GPU_BYTES, GB, architecture_of, plan_memory
    from mrbench.sweeps.paper import shape_of

    task = args.task or paper_task_of(args.model)
    train, task_params, notes = cell_settings(args.model, task)
    if task == "code-generation":
        task_params["n_sampled"] = 1  # one sampled completion per evaluation item: not measured
    if args.tiny:
        train["max_completion_length"] = 16
        task_params["max_completion_tokens"] = 16
    root = args.out or Path(tempfile.mkdtemp(prefix="memory-plan-"))
    root.mkdir(parents=True, exist_ok=True)
    os.environ["MRBENCH_RESULTS"] = str(root / "results")
    t0 = time.perf_counter()
    model_dir = build_model(args.model, root / ("model-" + args.model.replace("/", "--")), args.tiny)
    print(
        f"model {args.model} ({'tiny' if args.tiny else 'full size'}), random weights: "
        f"{time.perf_counter() - t0:.0f} s"
    )
    for note in notes:
        print(f"  {note}")
    cell_train = {**train, "steps": args.steps, "eval_limit": 1}
    spec = resolve_spec("grpo", task, model_dir, 0, task_params=task_params, train=cell_train)
    gpu = torch.cuda.is_available()
    peaks: dict[str, float] = {}
    original = MultiRewardGRPOTrainer.train

    def measured_train(self: Any, *a: Any, **k: Any) -> Any:
        if gpu:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        try:
            return original(self, *a, **k)
        finally:
            if gpu:
                peaks["allocated"] = torch.cuda.max_memory_allocated()
                peaks["reserved"] = torch.cuda.max_memory_reserved()

    MultiRewardGRPOTrainer.train = measured_train
    uri = f"sqlite:///{root / 'mlflow.db'}"
    try:
        result = run_cell(
            spec, tracking_uri=uri, experiment="memory-plan", progress=False, save="none", checkpoint_every=0
        )
    finally:
        MultiRewardGRPOTrainer.train = original
    metrics = MlflowClient(tracking_uri=uri).get_run(result.run_id).data.metrics
    gpu_bytes = torch.cuda.get_device_properties(0).total_memory if gpu else DEFAULT_GPU_BYTES
    arch = architecture_of(model_dir)
    assumed = shape_of(task, args.model, {**train, "precision": spec.train.precision}, 1, "ddp")
    assumed = replace(
        assumed,
        mixed=spec.train.precision != "fp32" and (gpu or spec.train.precision == "bf16"),
        completion_tokens=spec.train.max_completion_length or assumed.completion_tokens,
    )
    seen = replace(assumed, prompt_tokens=longest_prompt(task, task_params, model_dir))
    rows = {}
    for label, shape in (("plan, preset's prompt", assumed), ("plan, this run's prompt", seen)):
        plan = plan_memory(shape, gpu_bytes, arch)
        rows[label] = plan
        print(f"{label} ({shape.prompt_tokens} + {shape.completion_tokens} tokens): {plan.summary()}")
        print(
            f"  without the {plan.headroom / 2**30:.0f} GiB headroom: "
            f"{(plan.total - plan.headroom) / GB:.1f} GB"
        )
    device = torch.cuda.get_device_name(0) if gpu else "cpu"
    if gpu:
        print(
            f"measured on {device}: peak allocated {peaks['allocated'] / GB:.1f} GB, "
            f"peak reserved {peaks['reserved'] / GB:.1f} GB"
        )
    completion = metrics.get(layout.step_metric("completions/mean_length"))
    print(
        f"train {metrics[layout.PERF_TRAIN_S]:.1f} s for {args.steps} step(s); "
        f"mean completion length {completion}; torch {torch.__version__}"
    )
    if args.out:
        out = {
            "model": args.model,
            "task": task,
            "device": device,
            "torch": torch.__version__,
            "train": cell_train,
            "parameters": arch.params,
            "measured": peaks,
            "train_s": metrics[layout.PERF_TRAIN_S],
            "mean_completion_tokens": completion,
            "plans": {
                k: {
                    "shape": asdict(p.shape),
                    "total": p.total,
                    "state": p.state,
                    "training": p.training,
                    "generation": p.generation,
                    "headroom": p.headroom,
                }
                for k, p in rows.items()
            },
        }
        name = "memory_plan-" + args.model.rsplit("/", 1)[-1] + ("-tiny" if args.tiny else "") + ".json"
        (args.out / name).write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
