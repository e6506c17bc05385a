"""What two small cells and an evaluation store, dumped for a before/after comparison of a refactor.

Runs, in a fresh results folder, ``mrbench run`` for grpo and gdpo (tool-calling, the tiny preset,
2 steps, 2×2 completions, 4 eval samples, seed 0) and ``mrbench eval --model run:<grpo cell>``,
then writes every run's status, params, tags, metric histories and artifact files (path and
SHA-256; JSON artifacts parsed) to ``OUT.json``, leaving out what differs between any two
invocations by design (run ids, times, durations, hosts, pids, paths of the temporary folder).

    python benchmarks/golden_runs.py OUT.json       # then, on the other commit:
    python benchmarks/golden_runs.py OUT2.json --compare OUT.json   # exit 1 on any difference

A refactor that claims "numbers unchanged" shows an empty comparison.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from mrbench.core import layout

CELL = ["--task", "tool-calling", "--model", "tiny", "--seed", "0", "--steps", "2", "--quiet"]
CELL += ["--train", "num_generations=2", "--train", "prompts_per_step=2", "--train", "eval_limit=4"]
# Names whose values differ between two identical invocations by design.
VOLATILE = re.compile(
    r"(run_id|eval_of|_s$|_s_|time|date|host|pid|heartbeat|invocation|git|version|uri|path|dir$|"
    r"checkpoint_dir|started|ended|user|source|log-model|mlflow\.|per_second|runtime)",
    re.IGNORECASE,
)
VOLATILE_FILES = re.compile(r"(\.log$|console|cell\.log|traceback)")


def _mrbench(args: list[str], env: dict[str, str]) -> str:
    proc = subprocess.run([sys.executable, "-m", "mrbench", *args], env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"mrbench {' '.join(args)} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    return proc.stdout


def _scrub(value: Any, tmp: str) -> Any:
    if isinstance(value, dict):
        return {k: _scrub(v, tmp) for k, v in sorted(value.items()) if not VOLATILE.search(str(k))}
    if isinstance(value, list):
        return [_scrub(v, tmp) for v in value]
    if isinstance(value, str):
        return re.sub(r"[0-9a-f]{32}", "<id>", value.replace(tmp, "<tmp>"))
    return value


def _artifacts(client: Any, run_id: str, tmp: str) -> dict[str, Any]:
    from mlflow.artifacts import download_artifacts

    local = Path(download_artifacts(run_id=run_id, tracking_uri=client._tracking_client.tracking_uri))
    files: dict[str, Any] = {}
    for path in sorted(p for p in local.rglob("*") if p.is_file()):
        name = str(path.relative_to(local))
        if VOLATILE_FILES.search(name):
            files[name] = "<present>"
        elif path.suffix == ".json":
            files[name] = _scrub(json.loads(path.read_text()), tmp)
        else:
            files[name] = hashlib.sha256(path.read_bytes()).hexdigest()
    return files


def dump(tmp: str, uri: str) -> list[dict[str, Any]]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    runs = []
    for exp in client.search_experiments():
        for run in client.search_runs([exp.experiment_id], order_by=["attributes.start_time ASC"]):
            history = {
                key: [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, key)]
                for key in sorted(run.data.metrics)
                if not VOLATILE.search(key)
            }
            runs.append(
                {
                    "experiment": exp.name,
                    "status": run.info.status,
                    "params": _scrub(dict(run.data.params), tmp),
                    "tags": _scrub(dict(run.data.tags), tmp),
                    "metrics": history,
                    "artifacts": _artifacts(client, run.info.run_id, tmp),
                }
            )
    return sorted(runs, key=lambda r: json.dumps([r["experiment"], r["params"], r["tags"]], sort_keys=True))


def differences(a: Any, b: Any, where: str = "") -> list[str]:
    """Every place two dumps differ (metric names that are volatile by design left out)."""
    return [d for d in _differences(a, b, where) if not VOLATILE.search(d.split(":")[0].rsplit("/", 1)[-1])]


def _differences(a: Any, b: Any, where: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        out = [f"{where}/{k}: only in one" for k in sorted(set(a) ^ set(b))]
        for k in sorted(set(a) & set(b)):
            out += _differences(a[k], b[k], f"{where}/{k}")
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [
            d for i, (x, y) in enumerate(zip(a, b, strict=True)) for d in _differences(x, y, f"{where}[{i}]")
        ]
    return [] if a == b else [f"{where}: {str(a)[:120]} != {str(b)[:120]}"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--compare", help="an earlier OUT.json: exit 1 on any difference")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="mrbench-golden-") as tmp:
        results = Path(tmp) / "results"
        env = {**os.environ, "MRBENCH_RESULTS": str(results)}
        env.pop("MLFLOW_TRACKING_URI", None)
        uri = f"sqlite:///{results / 'mlflow.db'}"
        for method in ("grpo", "gdpo"):
            _mrbench(["run", "--method", method, *CELL], env)
        from mlflow.tracking import MlflowClient

        client = MlflowClient(tracking_uri=uri)
        exp = client.get_experiment_by_name("mrbench-runs")
        runs = client.search_runs([exp.experiment_id])
        grpo = next(r for r in runs if layout.read_tag(r.data.tags, layout.METHOD) == "grpo")
        _mrbench(
            ["eval", "--model", f"run:{grpo.info.run_id}", "--task", "tool-calling", "--limit", "4"], env
        )
        runs = dump(tmp, uri)
    Path(args.out).write_text(json.dumps(runs, indent=1, sort_keys=True))
    print(f"{len(runs)} runs written to {args.out}")
    if args.compare:
        diffs = differences(
            json.loads(Path(args.compare).read_text()), json.loads(Path(args.out).read_text())
        )
        print("\n".join(diffs) if diffs else "identical")
        return 1 if diffs else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
