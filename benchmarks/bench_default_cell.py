"""Wall time of the default ``mrbench run`` cell from scratch, and whether training helped.

Runs ``mrbench run`` (defaults: grpo, tool-calling, tiny, seed 0) in a fresh results folder, so
the tiny model is built and warm-started inside the measured time, then reads the MLflow run
and compares ``eval/exact_match`` after training with ``eval_before/exact_match``.

    python benchmarks/bench_default_cell.py [--method grpo]

Exits 1 if the cell takes more than 3 minutes or the primary metric does not improve.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mrbench.core import layout

TARGET_S = 180.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--method", default="grpo")
    args = parser.parse_args()
    from mlflow.tracking import MlflowClient

    with tempfile.TemporaryDirectory(prefix="mrbench-bench-") as tmp:
        results = Path(tmp) / "results"
        env = {**os.environ, "MRBENCH_RESULTS": str(results)}
        env.pop("MLFLOW_TRACKING_URI", None)
        start = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-m", "mrbench", "run", "--method", args.method, "--quiet"],
            env=env,
            capture_output=True,
            text=True,
        )
        wall = time.perf_counter() - start
        if proc.returncode != 0:
            print(proc.stderr[-3000:])
            return 1
        client = MlflowClient(tracking_uri=f"sqlite:///{results / 'mlflow.db'}")
        run = client.search_runs([client.get_experiment_by_name("mrbench-runs").experiment_id])[0]
        m = run.data.metrics
    before, after = m[layout.eval_before_metric("exact_match")], m[layout.eval_metric("exact_match")]
    print(f"`mrbench run --method {args.method}` (tool-calling, tiny, seed 0) from an empty results folder")
    print("| wall s | model build s | train s | eval s | exact_match before | after |")
    print("|---|---|---|---|---|---|")
    print(
        f"| {wall:.0f} | {m[layout.PERF_MODEL_PREPARE_S]:.0f} | {m[layout.PERF_TRAIN_S]:.0f} "
        f"| {m[layout.PERF_EVAL_S]:.0f} | {before:.3f} | {after:.3f} |"
    )
    ok = wall <= TARGET_S and after > before
    print(f"target: ≤ {TARGET_S:.0f} s and after > before → {'met' if ok else 'NOT met'}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
