"""Which turns of the embedded agent-security episodes can a model do? A per-turn probe.

For every clean scenario (the eval split, plus the first training ones), the model gets the
gold conversation up to each assistant turn and writes that turn greedily; the turn counts as
right when it equals the gold turn, ignoring a missing ``</tool_call>`` line (the tiny warm
start leaves closing lines out on purpose, see ``mrbench.engine.models.tiny.drop_final_lines``, and GRPO
fixes that within a few steps). Utility needs every turn of an episode right, so this shows
*why* utility is or is not reachable, turn kind by turn kind:

- ``from user``: the values come from the user's request (a file name, an address);
- ``from tool``: the values come from a tool result read earlier in the episode;
- ``fixed``: a closing answer that does not depend on the data ("Paid.").

    python benchmarks/probe_agent_security_turns.py [--model tiny] [--train-cases 150] [--show 12]
    python benchmarks/probe_agent_security_turns.py --model tiny --override sft_steps=1200

Prints a markdown table and the accuracy per turn kind. ``--model`` takes a tiny preset
(built and cached if missing), a local folder or a hub id. ``--override key=value``
(repeatable) builds a variant of the tiny preset (any ``TinyPreset`` field) in a temporary
folder, uncached, to try warm-start recipes without touching the presets. ``--show N`` also
prints N wrong from-tool turns (the request, the tool result, the gold and the written turn).
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def turn_kind(turn: int, n_turns: int, reads_first: bool, answers_a_value: bool) -> str:
    """What the gold turn's values depend on (see the module docstring).

    ``reads_first``: the episode reads a tool result before acting; ``answers_a_value``: its
    goal is judged on a value in the final answer (a PIN, a day, an amount).
    """
    if turn == n_turns - 1:
        return "from tool" if answers_a_value and reads_first else "fixed"
    if turn == 0:
        return "from user"
    return "from tool" if reads_first else "from user"


def _body(text: str) -> list[str]:
    return [line for line in text.strip().split("\n") if line.strip() != "</tool_call>"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--train-cases", type=int, default=150)
    parser.add_argument("--override", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--show", type=int, default=0, metavar="N", help="print N wrong from-tool turns")
    args = parser.parse_args()
    if args.show < 0:
        parser.error(f"--show must be 0 or more, got {args.show}")
    if args.override:
        with tempfile.TemporaryDirectory(prefix="mrbench-probe-") as tmp:
            return probe(build_variant(args.model, args.override, Path(tmp)), args.train_cases, args.show)
    from mrbench.core.errors import UserError
    from mrbench.engine.models.catalog import prepare_model

    try:
        path = prepare_model(args.model)
    except UserError as exc:
        raise SystemExit(str(exc)) from None
    return probe(path, args.train_cases, args.show)


def build_variant(name: str, overrides: list[str], out: Path) -> str:
    """Build tiny preset ``name`` with ``KEY=VALUE`` field overrides into ``out``; return its path."""
    from mrbench.engine.models.tiny import TINY_PRESETS, build_tiny_model, collect_demonstrations

    if name not in TINY_PRESETS:
        raise SystemExit(f"--override needs a tiny preset ({', '.join(TINY_PRESETS)}), got {name!r}")
    base = TINY_PRESETS[name]
    changes = {}
    for item in overrides:
        key, _, value = item.partition("=")
        if not hasattr(base, key):
            raise SystemExit(f"unknown TinyPreset field {key!r} in --override {item!r}")
        kind = type(getattr(base, key))
        try:
            changes[key] = kind(value)
        except ValueError:
            raise SystemExit(f"--override {item!r}: {key} must be {kind.__name__}") from None
    preset = dataclasses.replace(base, **changes)
    demos, _ = collect_demonstrations(
        preset.demos_per_task, seed=0, drop_fraction=preset.drop_final_line_fraction
    )
    meta = build_tiny_model(preset, out, demos, seed=0)
    print(f"variant {name} {changes}: {meta}")
    return str(out)


def probe(path: str, train_cases: int, show: int = 0) -> int:
    """Print the per-turn table for the model at ``path`` (and ``show`` wrong from-tool turns)."""
    from mrbench.engine.evaluation.generation import HFGenerator
    from mrbench.engine.models.catalog import load_model, load_tokenizer
    from mrbench.tasks import build_task
    from mrbench.tasks.agent_security.episode import Episode
    from mrbench.tasks.agent_security.scenarios import EmbeddedEnv, Scenario

    task = build_task("agent-security", {})
    generator = HFGenerator(load_model(path), load_tokenizer(path))
    pairs = []  # (template, turn, kind, conversation, gold)
    for sample in task.eval_samples() + task.train_samples()[:train_cases]:
        scenario = Scenario.from_json(str(sample.columns["scenario"]))
        if scenario.attacked:
            continue
        episode = Episode(EmbeddedEnv(scenario), task.limits)
        reads_first = scenario.decision_turn > 0
        for turn, gold in enumerate(scenario.gold):
            if episode.done:
                break
            answers = scenario.check["kind"] == "answer"
            kind = turn_kind(turn, len(scenario.gold), reads_first, answers)
            pairs.append((scenario.template, turn, kind, [dict(m) for m in episode.messages], gold))
            episode.step(gold)
    outputs = generator([p[3] for p in pairs], max_new_tokens=task.max_completion_tokens)

    by_turn: dict[tuple[str, int, str], list[bool]] = collections.defaultdict(list)
    by_kind: dict[str, list[bool]] = collections.defaultdict(list)
    for (template, turn, kind, _, gold), out in zip(pairs, outputs, strict=True):
        right = _body(gold) == _body(out)
        by_turn[(template, turn, kind)].append(right)
        by_kind[kind].append(right)
    meta = Path(path) / "mrbench_model.json"
    print(f"model: {path}" + (f" {json.loads(meta.read_text())}" if meta.exists() else "") + "\n")
    print("| template | turn | values | n | right |\n|---|---|---|---|---|")
    for (template, turn, kind), hits in sorted(by_turn.items()):
        print(f"| {template} | {turn} | {kind} | {len(hits)} | {sum(hits) / len(hits):.2f} |")
    print()
    for kind, hits in sorted(by_kind.items()):
        print(f"{kind}: {sum(hits) / len(hits):.2f} of {len(hits)} turns right")
    wrong = [
        (conversation, gold, out)
        for (_, _, kind, conversation, gold), out in zip(pairs, outputs, strict=True)
        if kind == "from tool" and _body(gold) != _body(out)
    ]
    for conversation, gold, out in wrong[:show]:
        print(f"\nrequest: {conversation[1]['content']}\ntool:    {conversation[-1]['content']!r}")
        print(f"gold:    {' '.join(_body(gold))}\nwritten: {' '.join(_body(out))}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
