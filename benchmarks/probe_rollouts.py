"""Is there anything for GRPO to learn? Sampled rollouts of an untrained model, scored per component.

GRPO learns from a reward component only where it differs between the completions of one prompt.
This probe samples ``--generations`` completions for each of ``--prompts`` training prompts at the
training temperature and budget, scores them with the task's own reward functions (the ones the
trainer calls), and prints per component: its mean, the share of rollouts above the component's
minimum, and the share of groups in which it varies (the groups GRPO gets a signal from).
Agent security runs whole sampled episodes (the task's own episode runner).

    python benchmarks/probe_rollouts.py --model smollm2-135m --task tool-calling
    python benchmarks/probe_rollouts.py --model smollm2-135m --task agent-security --prompts 24

The task gets the settings the model was built for (the tiny models: compact prompts) under
``--task-param`` ones. Prints a table, or JSON with ``--json``.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from typing import Any


def sample_rollouts(
    task: Any, model: Any, tokenizer: Any, samples: list[Any], g: int, temperature: float
) -> list[dict[str, float]]:
    """``g`` sampled rollouts per sample, each as ``{component: reward}`` (NaN = unscorable), grouped."""
    from mrbench.engine.evaluation.generation import HFGenerator

    generator = HFGenerator(model, tokenizer, temperature=temperature)
    repeated = [s for s in samples for _ in range(g)]
    components = task.reward_components()
    if task.name == "agent-security":
        outcomes, _ = task.run(
            repeated, lambda convs: generator(convs, max_new_tokens=task.max_completion_tokens)
        )
        from mrbench.tasks.agent_security.rewards import reward_values

        return [{c.name: reward_values(o, task.invalid)[c.name] for c in components} for o in outcomes]
    completions = generator([s.prompt for s in repeated], max_new_tokens=task.max_completion_tokens)
    prompts = [s.prompt for s in repeated]
    columns = {key: [s.columns[key] for s in repeated] for key in repeated[0].columns}
    columns["sample_id"] = [s.id for s in repeated]
    rewards = [[] for _ in repeated]
    for c in components:
        values = c.fn(prompts, [[{"role": "assistant", "content": t}] for t in completions], **columns)
        for row, value in zip(rewards, values, strict=True):
            row.append(math.nan if value is None else float(value))
    return [dict(zip([c.name for c in components], row, strict=True)) for row in rewards]


def spread(items: list[Any], n: int) -> list[Any]:
    """``n`` items evenly spaced over ``items`` (all of them when there are fewer): the first ``n``
    training prompts of a task can all come from one or two templates.

    >>> spread(list(range(10)), 3)
    [0, 3, 6]
    """
    if n >= len(items):
        return list(items)
    step = len(items) / n
    return [items[int(i * step)] for i in range(n)]


def summarize(task: Any, rows: list[dict[str, float]], g: int) -> dict[str, dict[str, float]]:
    """Per component: mean, share of rollouts above its minimum, share of groups where it varies."""
    out = {}
    for c in task.reward_components():
        values = [r[c.name] for r in rows]
        finite = [v for v in values if math.isfinite(v)]
        groups = [values[i : i + g] for i in range(0, len(values), g)]
        varies = [len({v for v in grp if math.isfinite(v)}) > 1 for grp in groups]
        out[c.name] = {
            "mean": statistics.fmean(finite) if finite else math.nan,
            "above_min": sum(v > c.low for v in finite) / len(values),
            "groups_varying": sum(varies) / len(groups),
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--task", default="tool-calling")
    parser.add_argument(
        "--prompts", type=int, default=16, help="training prompts, evenly spaced over the training set"
    )
    parser.add_argument("--generations", type=int, default=8, help="rollouts per prompt (G)")
    parser.add_argument("--temperature", type=float, default=1.0, help="sampling temperature (TRL's default)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--task-param", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    from transformers import set_seed

    from mrbench.engine.evaluation.policy import load_policy
    from mrbench.engine.models.catalog import model_task_settings, prepare_model
    from mrbench.kit.keyvalue import parse_key_values
    from mrbench.tasks import build_task, get_task_entry

    accepted = get_task_entry(args.task).params
    settings = {k: v for k, v in model_task_settings(args.model).items() if k in accepted}
    task = build_task(args.task, {**settings, **parse_key_values(args.task_param, flag="--task-param")})
    started = time.perf_counter()
    model, tokenizer = load_policy(prepare_model(args.model))
    set_seed(args.seed)
    samples = spread(task.train_samples(), args.prompts)
    rows = sample_rollouts(task, model, tokenizer, samples, args.generations, args.temperature)
    summary = summarize(task, rows, args.generations)
    wall = time.perf_counter() - started
    task.close()
    if args.json:
        print(
            json.dumps(
                {
                    "model": args.model,
                    "task": args.task,
                    "rollouts": len(rows),
                    "wall_s": wall,
                    "components": summary,
                }
            )
        )
        return
    print(
        f"{args.model} on {args.task}: {len(rows)} rollouts ({args.prompts} prompts × {args.generations}) "
        f"at temperature {args.temperature}, {wall:.0f} s"
    )
    print(f"{'component':<16}{'mean':>8}{'> min':>8}{'groups varying':>16}")
    for name, s in summary.items():
        print(f"{name:<16}{s['mean']:>8.3f}{s['above_min']:>8.2f}{s['groups_varying']:>16.2f}")


if __name__ == "__main__":
    main()
