"""One worker with every core, or one worker per core? The same real sweep run both ways.

Runs ``mrbench sweep`` on the tool-calling task with the ``tiny`` model (built first, outside the
timing) for two methods × two seeds, the default training settings, once with ``--workers 1``
(one cell at a time in the sweep's process) and once with ``--workers 2`` (two cells at a time,
forked from the sweep's cell server). A tiny model computes on one thread either way
(``mrbench.engine.processes.threads``). Each arm
gets its own store and an empty pre-training-evaluation cache, so neither reuses the other's
work; the model cache is shared.

    python benchmarks/bench_workers.py [--seeds 0,1] [--methods grpo,gdpo] [--task tool-calling]
        [--models results/models]   # reuse built models instead of building tiny first

Prints each arm's wall seconds, its per-cell mean, the load average before each arm, and the
speed-up of two workers over one. Needs a quiet machine: other load distorts both arms.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def run_arm(results: Path, workers: int, args: argparse.Namespace) -> float:
    """Wall seconds of one sweep with ``workers`` workers into its own store under ``results``."""
    shutil.rmtree(results / "eval_cache", ignore_errors=True)
    store = results / f"workers{workers}.db"
    cmd = [
        sys.executable,
        "-m",
        "mrbench",
        "sweep",
        "--name",
        f"bench-workers-{workers}",
        "--methods",
        args.methods,
        "--tasks",
        args.task,
        "--models",
        "tiny",
        "--seeds",
        args.seeds,
        "--workers",
        str(workers),
        "--tracking-uri",
        f"sqlite:///{store}",
        "--no-report",
    ]
    env = {**os.environ, "MRBENCH_RESULTS": str(results)}
    t0 = time.perf_counter()
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0,1")
    parser.add_argument("--methods", default="grpo,gdpo")
    parser.add_argument("--task", default="tool-calling")
    parser.add_argument("--models", type=Path, help="a results folder's models/ to reuse (skips the build)")
    args = parser.parse_args()
    n_cells = len(args.seeds.split(",")) * len(args.methods.split(","))
    with tempfile.TemporaryDirectory(prefix="bench-workers-") as tmp:
        results = Path(tmp)
        if args.models:
            (results / "models").symlink_to(args.models.resolve())
        env = {**os.environ, "MRBENCH_RESULTS": str(results)}
        code = "from mrbench.engine.models.catalog import prepare_model; prepare_model('tiny')"
        subprocess.run([sys.executable, "-c", code], env=env, check=True)
        timings = {}
        for workers in (1, 2):
            load = os.getloadavg()[0]
            timings[workers] = run_arm(results, workers, args)
            print(
                f"workers={workers}: {timings[workers]:.1f} s for {n_cells} cells "
                f"({timings[workers] / n_cells:.1f} s per cell), load before {load:.1f}"
            )
    print(f"speed-up of 2 workers over 1: {timings[1] / timings[2]:.2f}×")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
