"""Can a tiny preset's architecture learn in-context lookup, and after how many steps?

Agent-security's read-first goals need a value looked up in a tool result: the amount paid to
``AC-2`` among three history lines, the day of one person's mail. That is associative recall,
which a transformer does with an *induction* circuit (a head that finds the earlier occurrence
of the current key and copies the token after it). This probe trains a fresh, randomly
initialised model of a tiny preset's shape on nothing but synthetic recall and prints how
often it answers right as training goes on. A model that only guesses among the values it
was shown scores about ``1 / pairs``; a flat curve means no lookup formed within the steps.

Each sequence: ``pairs`` (key, value, separator) triples with distinct random keys, then a
query marker and one of the keys; the loss is on the next token (the key's value) only.
Keys come from ``--keys`` token ids, values from ``--values`` ids (10 by default: as few as the
digits that the embedded environment's amounts and accounts are made of).

    python benchmarks/probe_associative_recall.py [--model tiny] [--steps 5000] [--lr 1e-3]
        [--kv-heads 4] [--pairs 3] [--threads 1]

Not a speed target: it says whether the warm start's budget (``sft_steps``, ~1000) could
teach lookup at all (``docs/benchmarks.md``, agent-security section).
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

QUERY, SEPARATOR, FIRST_KEY = 7, 5, 100


def recall_batch(rng: random.Random, size: int, pairs: int, keys: int, values: int) -> tuple[list, list]:
    """``size`` sequences of ``3 * pairs + 2`` token ids and the value each should end with."""
    first_value = FIRST_KEY + keys
    inputs, targets = [], []
    for _ in range(size):
        chosen = rng.sample(range(FIRST_KEY, FIRST_KEY + keys), pairs)
        vals = [rng.randrange(first_value, first_value + values) for _ in chosen]
        seq = [tok for k, v in zip(chosen, vals, strict=True) for tok in (k, v, SEPARATOR)]
        asked = rng.randrange(pairs)
        inputs.append([*seq, QUERY, chosen[asked]])
        targets.append(vals[asked])
    return inputs, targets


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny", help="a tiny preset (its architecture only)")
    parser.add_argument("--steps", type=int, default=5000)
    parser.add_argument("--lr", type=float, default=None, help="default: the preset's sft_lr")
    parser.add_argument("--kv-heads", type=int, default=None, help="default: the preset's")
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--keys", type=int, default=20)
    parser.add_argument("--values", type=int, default=10)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--every", type=int, default=500, help="evaluate every this many steps")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=0, help="torch threads; 0 = torch's default")
    args = parser.parse_args()

    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from mrbench.engine.models.tiny import TINY_PRESETS, qwen2_kwargs

    if args.model not in TINY_PRESETS:
        parser.error(f"unknown tiny preset {args.model!r}; choose from {', '.join(TINY_PRESETS)}")
    for name in ("steps", "pairs", "values", "batch", "every"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1, got {getattr(args, name)}")
    if args.keys < args.pairs:
        parser.error(f"--keys ({args.keys}) must be at least --pairs ({args.pairs}): keys are distinct")
    preset = TINY_PRESETS[args.model]
    if args.kv_heads is not None:
        preset = dataclasses.replace(preset, num_key_value_heads=args.kv_heads)
    lr = args.lr if args.lr is not None else preset.sft_lr
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    model = Qwen2ForCausalLM(Qwen2Config(**qwen2_kwargs(preset)))
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    held_out = recall_batch(random.Random(f"held-out/{args.seed}"), 512, args.pairs, args.keys, args.values)

    print(
        f"{args.model} (kv heads {preset.num_key_value_heads}), lr {lr:g}, batch {args.batch}, "
        f"{args.pairs} pairs, {args.keys} keys, {args.values} values; guessing among the shown values "
        f"scores about {1 / args.pairs:.2f}\n"
    )
    print("| step | held-out accuracy | seconds |\n|---:|---:|---:|")
    start = time.perf_counter()
    for step in range(1, args.steps + 1):
        inputs, targets = recall_batch(rng, args.batch, args.pairs, args.keys, args.values)
        logits = model(input_ids=torch.tensor(inputs)).logits[:, -1]  # [B, V]: the query's next token
        loss = torch.nn.functional.cross_entropy(logits, torch.tensor(targets))
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % args.every == 0 or step == args.steps:
            with torch.no_grad():
                guess = model(input_ids=torch.tensor(held_out[0])).logits[:, -1].argmax(-1)
            accuracy = (guess == torch.tensor(held_out[1])).float().mean().item()
            print(f"| {step} | {accuracy:.2f} | {time.perf_counter() - start:.0f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
