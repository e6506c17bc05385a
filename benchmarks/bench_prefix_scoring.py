"""The scoring forward+backward of a GRPO batch: TRL's repeated prompts vs shared prefixes.

A batch of ``--prompts`` chat prompts (a task's training prompts, chat-templated, cut or repeated
to ``--prompt-tokens``) with ``--generations`` random completions of ``--completion-tokens`` each
(the last completion of each group a third shorter: mixed lengths) is scored the way
``GRPOTrainer._compute_loss`` does (TRL's fused LM head, log-probabilities and entropies), and
``-mean(log p)`` is back-propagated. Mechanisms, timed in turn in the same process:

- ``trl``: TRL's own pass over ``[B, P + C]`` (each prompt ``G`` times);
- ``cache``: :mod:`mrbench.engine.training.shared_prefix`, the prompts once with a KV cache expanded to
  the ``B`` completions (what the trainer runs);
- ``packed``: one sequence per group, the prompt then its ``G`` completions, with a grouped
  attention mask (each completion sees the prompt and itself causally) and per-completion
  position ids; the LM head over the completion positions only.

Prints seconds (median of ``--repeats``), the speed-up over ``trl`` and the largest log-prob and
relative gradient differences from ``trl``. ``--table`` runs the 3 × 2 grid of prompt and
completion lengths instead (``trl`` and ``cache`` only).

    python benchmarks/bench_prefix_scoring.py --model smollm2-135m --prompt-tokens 470 \
        --completion-tokens 64 --prompts 2 --generations 8
    python benchmarks/bench_prefix_scoring.py --model smollm2-135m --table
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import torch


def build_batch(
    tok: Any, task: Any, prompts: int, g: int, p_len: int, c_len: int
) -> tuple[torch.Tensor, ...]:
    """``(input_ids [B, P + C], attention_mask [B, P + C], width P)``: left-padded prompts (the
    second ``p_len // 8`` tokens shorter), completions right-padded."""
    gen = torch.Generator().manual_seed(0)
    rows, masks = [], []
    samples = task.train_samples()
    for i in range(prompts):
        text = tok.apply_chat_template(samples[i].prompt, add_generation_prompt=True, tokenize=False)
        ids = tok(text, add_special_tokens=False)["input_ids"]
        want = p_len - (i % 2) * (p_len // 8)
        ids = (ids * (want // len(ids) + 1))[-want:]
        for j in range(g):
            n = c_len if j < g - 1 else max(1, 2 * c_len // 3)
            row = torch.full((p_len + c_len,), tok.pad_token_id, dtype=torch.long)
            mask = torch.zeros(p_len + c_len, dtype=torch.long)
            row[p_len - want : p_len] = torch.tensor(ids)
            mask[p_len - want : p_len + n] = 1
            row[p_len : p_len + n] = torch.randint(0, len(tok), (n,), generator=gen)
            rows.append(row)
            masks.append(mask)
    return torch.stack(rows), torch.stack(masks), p_len


def score_trl(
    model: Any, ids: torch.Tensor, mask: torch.Tensor, width: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """TRL's fused-head pass (what ``_get_per_token_logps_and_entropies`` calls): ``[B, C]`` twice."""
    keep = ids.size(1) - width
    labels = ids.masked_fill(mask == 0, -100)
    labels[:, :-keep] = -100
    out = model(input_ids=ids, attention_mask=mask, labels=labels, fused_lm_head=True)
    return out.log_probs[:, -keep:], out.entropy[:, -keep:]


def score_cache(
    model: Any, ids: torch.Tensor, mask: torch.Tensor, width: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The same through :func:`mrbench.engine.training.shared_prefix.scoring` (the model installed)."""
    from mrbench.engine.training import shared_prefix

    with shared_prefix.scoring(width):
        return score_trl(model, ids, mask, width)


def score_packed(
    model: Any, ids: torch.Tensor, mask: torch.Tensor, width: int, g: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """One packed sequence per group with a grouped mask; log-probs and entropies ``[B, C]``."""
    from trl.kernels.chunked_logprob import ChunkedLogProbFunction

    head = model.get_output_embeddings()
    out_lp, out_en = [], []
    for start in range(0, ids.size(0), g):
        rows = slice(start, start + g)
        prompt = ids[start, :width][mask[start, :width].bool()]
        lp = prompt.numel()
        comp_len = mask[rows, width:].sum(-1)
        pieces, pos, owner = [prompt], [torch.arange(lp)], [torch.full((lp,), -1)]
        for j in range(g):
            n = int(comp_len[j])
            pieces.append(ids[start + j, width : width + n])
            pos.append(torch.arange(lp, lp + n))
            owner.append(torch.full((n,), j))
        seq, positions, who = torch.cat(pieces), torch.cat(pos), torch.cat(owner)
        t = seq.numel()
        causal = torch.ones(t, t, dtype=torch.bool).tril()
        same = (who[:, None] == who[None, :]) | (who[None, :] == -1)
        allowed = (causal & same)[None, None]
        hidden = model.base_model(
            input_ids=seq[None], attention_mask=allowed, position_ids=positions[None]
        ).last_hidden_state[0]
        # completion token k of j is predicted from the previous token of j (or the prompt's last)
        prev, targets = [], []
        offset = lp
        for j in range(g):
            n = int(comp_len[j])
            idx = torch.cat([torch.tensor([lp - 1]), torch.arange(offset, offset + n - 1)])
            prev.append(idx)
            targets.append(seq[offset : offset + n])
            offset += n
        h = hidden[torch.cat(prev)]
        lp_flat, en_flat, *_ = ChunkedLogProbFunction.apply(
            h, head.weight, head.bias, torch.cat(targets), 1.0, 32768, None, 1.0, ("log_probs", "entropy")
        )
        out_lp.append(lp_flat)
        out_en.append(en_flat)
    flat_lp, flat_en = torch.cat(out_lp), torch.cat(out_en)
    valid = mask[:, width:].bool()
    logps = torch.zeros(valid.shape, dtype=flat_lp.dtype).masked_scatter(valid, flat_lp)
    ents = torch.zeros(valid.shape, dtype=flat_en.dtype).masked_scatter(valid, flat_en)
    return logps, ents


def timed(fn: Any, model: Any, valid: torch.Tensor) -> tuple[float, torch.Tensor, list[torch.Tensor]]:
    """Seconds of ``fn()`` forward + backward of ``-mean(log p)``; the log-probs and gradients."""
    model.zero_grad(set_to_none=True)
    start = time.perf_counter()
    logps, _ = fn()
    loss = -(logps * valid).sum() / valid.sum()
    loss.backward()
    seconds = time.perf_counter() - start
    return seconds, logps.detach(), [p.grad.clone() for p in model.parameters() if p.grad is not None]


def compare(
    model: Any, batch: tuple[torch.Tensor, ...], g: int, mechanisms: list[str], repeats: int
) -> dict[str, Any]:
    """Median seconds per mechanism (in turn, ``repeats`` times) and differences from ``trl``."""
    ids, mask, width = batch
    valid = mask[:, width:].float()
    fns = {
        "trl": lambda: score_trl(model, ids, mask, width),
        "cache": lambda: score_cache(model, ids, mask, width),
        "packed": lambda: score_packed(model, ids, mask, width, g),
    }
    seconds: dict[str, list[float]] = {m: [] for m in mechanisms}
    results: dict[str, Any] = {}
    for _ in range(repeats):
        for m in mechanisms:
            s, lp, grads = timed(fns[m], model, valid)
            seconds[m].append(s)
            results[m] = (lp, grads)
    ref_lp, ref_grads = results["trl"]
    out: dict[str, Any] = {}
    for m in mechanisms:
        lp, grads = results[m]
        rel = max(((a - b).norm() / b.norm()).item() for a, b in zip(grads, ref_grads, strict=True))
        out[m] = {
            "s": statistics.median(seconds[m]),
            "logp_diff": ((lp - ref_lp) * valid).abs().max().item(),
            "grad_rel": rel,
        }
    return out


def main() -> int:
    from trl.trainer.utils import add_fused_lm_head

    from mrbench.engine.models.catalog import load_model, load_tokenizer, model_task_settings, prepare_model
    from mrbench.engine.training import cpu_logprob, shared_prefix
    from mrbench.tasks import build_task, get_task_entry

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--task", default="tool-calling")
    parser.add_argument("--prompts", type=int, default=2)
    parser.add_argument("--generations", type=int, default=8)
    parser.add_argument("--prompt-tokens", type=int, default=470)
    parser.add_argument("--completion-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--mechanisms", default="trl,cache,packed")
    parser.add_argument("--table", action="store_true", help="3 prompt × 2 completion lengths, trl vs cache")
    args = parser.parse_args()
    cpu_logprob.install()  # as a cell runs
    path = prepare_model(args.model)
    tok = load_tokenizer(path)
    accepted = get_task_entry(args.task).params
    task = build_task(args.task, {k: v for k, v in model_task_settings(args.model).items() if k in accepted})
    model = load_model(path)
    model.train()
    add_fused_lm_head(model, outputs=("log_probs", "entropy"))
    assert shared_prefix.install(model), f"{args.model} is not supported by the shared-prefix path"
    load = " ".join(open("/proc/loadavg").read().split()[:3])
    print(f"model {args.model}, {args.prompts} prompts × G={args.generations}, float32, "
          f"{torch.get_num_threads()} threads, load average {load}")  # fmt: skip
    if args.table:
        print(
            "| prompt tokens | completion tokens | TRL s | shared prefix s | speed-up | max log-prob diff |"
        )
        print("|---|---|---|---|---|---|")
        for p_len in (128, 256, 512):
            for c_len in (32, 128):
                batch = build_batch(tok, task, args.prompts, args.generations, p_len, c_len)
                r = compare(model, batch, args.generations, ["trl", "cache"], args.repeats)
                trl, ours = r["trl"]["s"], r["cache"]["s"]
                diff = r["cache"]["logp_diff"]
                print(f"| {p_len} | {c_len} | {trl:.2f} | {ours:.2f} | {trl / ours:.2f}× | {diff:.1e} |")
        return 0
    batch = build_batch(tok, task, args.prompts, args.generations, args.prompt_tokens, args.completion_tokens)
    mechanisms = args.mechanisms.split(",")
    r = compare(model, batch, args.generations, mechanisms, args.repeats)
    print(
        f"prompt {args.prompt_tokens} tokens, completions {args.completion_tokens}"
        " (one per group 2/3 as long)"
    )
    print("| mechanism | median s (fwd+bwd) | speed-up vs trl | max log-prob diff | max grad rel diff |")
    print("|---|---|---|---|---|")
    for m in mechanisms:
        print(f"| {m} | {r[m]['s']:.2f} | {r['trl']['s'] / r[m]['s']:.2f}× |"
              f" {r[m]['logp_diff']:.1e} | {r[m]['grad_rel']:.1e} |")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
