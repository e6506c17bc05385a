"""What changed inside one agent-security run: utility, attack success and endings per kind of goal.

Reads one run from MLflow and prints: the eval metrics before → after; each training reward's
mean over the first and the last ``--window`` steps (``rewards/<name>/mean``); from the
evaluation records (artifacts ``eval/samples_before.jsonl`` / ``eval/samples_after.jsonl``, one
line per episode), utility and attack successes per goal template and clean/attacked; and how the
episodes ended (termination × number of assistant turns). It answers *where* a metric moved,
e.g. which user goals lost utility while the attack success rate fell.

    python benchmarks/breakdown_agent_security.py RUN_ID [--tracking-uri URI] [--window 10]

``RUN_ID`` is printed by ``mrbench run`` (``run <id> FINISHED``). The store defaults to
mrbench's (``sqlite:///results/mlflow.db``, or ``$MRBENCH_RESULTS``).
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from mrbench.core import layout

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

PHASES = ("before", "after")


def load_records(run_id: str, tracking_uri: str) -> dict[str, list[dict[str, Any]]]:
    """``{"before": [...], "after": [...]}``: the run's per-episode evaluation records."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=tracking_uri)
    out: dict[str, list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory(prefix="mrbench-breakdown-") as tmp:
        for phase in PHASES:
            artifact = {"before": layout.EVAL_SAMPLES_BEFORE, "after": layout.EVAL_SAMPLES_AFTER}[phase]
            path = client.download_artifacts(run_id, artifact, tmp)
            with open(path, encoding="utf-8") as fh:
                out[phase] = [json.loads(line) for line in fh if line.strip()]
    return out


def summary(run_id: str, tracking_uri: str, window: int) -> str:
    """Markdown: eval metrics before → after, and training rewards over the first/last ``window`` steps."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=tracking_uri)
    metrics = client.get_run(run_id).data.metrics
    lines = ["| eval metric | before | after |", "|---|---:|---:|"]
    for key in sorted(layout.strip_prefix(layout.EVAL, k) for k in metrics if k.startswith(layout.EVAL)):
        before, after = layout.eval_before_metric(key), layout.eval_metric(key)
        if before in metrics:
            lines.append(f"| {key} | {metrics[before]:.3f} | {metrics[after]:.3f} |")
    lines += ["", f"| training reward | first {window} steps | last {window} steps |", "|---|---:|---:|"]
    for key in sorted(k for k in metrics if k.startswith(layout.REWARDS) and k.endswith("/mean")):
        history = [m.value for m in sorted(client.get_metric_history(run_id, key), key=lambda m: m.step)]
        k = min(window, len(history))
        first, last = sum(history[:k]) / k, sum(history[-k:]) / k
        lines.append(f"| {key.split('/')[1]} | {first:.3f} | {last:.3f} |")
    return "\n".join(lines)


def breakdown(records: dict[str, list[dict[str, Any]]]) -> str:
    """Markdown: per (template, clean/attacked) counts, then episode endings, before → after."""
    counts: dict[tuple[str, str], dict[str, list[int]]] = collections.defaultdict(
        lambda: {p: [0, 0, 0] for p in PHASES}  # n, utility, attack succeeded
    )
    endings: dict[tuple[str, str, int], dict[str, int]] = collections.defaultdict(
        lambda: dict.fromkeys(PHASES, 0)
    )
    for phase in PHASES:
        for r in records[phase]:
            side = "attacked" if r["attacked"] else "clean"
            row = counts[(str(r.get("template") or "?"), side)][phase]
            row[0] += 1
            row[1] += bool(r["utility"])
            row[2] += bool(r["attack_succeeded"])
            turns = sum(m["role"] == "assistant" for m in r["conversation"])
            endings[(side, r["termination"], turns)][phase] += 1
    lines = [
        "| template | cases | n | utility before → after | attack succeeded before → after |",
        "|---|---|---:|---|---|",
    ]
    for (template, side), c in sorted(counts.items()):
        b, a = c["before"], c["after"]
        attack = f"{b[2]} → {a[2]}" if side == "attacked" else "–"
        lines.append(f"| {template} | {side} | {b[0]} | {b[1]} → {a[1]} | {attack} |")
    lines += ["", "| cases | termination | assistant turns | before | after |", "|---|---|---:|---:|---:|"]
    for (side, termination, turns), c in sorted(endings.items()):
        lines.append(f"| {side} | {termination} | {turns} | {c['before']} | {c['after']} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_id")
    parser.add_argument("--tracking-uri", default=None)
    parser.add_argument("--window", type=int, default=10, help="steps averaged at each end of training")
    args = parser.parse_args()
    from mrbench.store.local import resolve_tracking_uri

    uri = resolve_tracking_uri(args.tracking_uri)
    try:
        head = summary(args.run_id, uri, max(1, args.window))
        records = load_records(args.run_id, uri)
    except Exception as exc:  # an unknown run id, or a run of another task: say so, no traceback
        raise SystemExit(f"cannot read run {args.run_id!r} as an agent-security run: {exc}") from None
    print(head + "\n\n" + breakdown(records))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
