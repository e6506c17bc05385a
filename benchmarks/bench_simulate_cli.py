"""Benchmark: ``mrbench simulate`` as a user runs it — every registered method, 50 seeds × 200 steps,
MLflow tracking and figures included: ≤ 5 s per scenario, ≤ 20 s for four scenarios in one command.

    python benchmarks/bench_simulate_cli.py             # the three cases below
    python benchmarks/bench_simulate_cli.py --keep      # keep the temporary folders (printed)

Each case runs the ``mrbench`` console script of this interpreter's environment in a new process,
in a temporary working folder, with the default store (``./results/mlflow.db``) and report folder
(``./reports/lab/<scenario>/``), exactly as typed at a shell:

1. ``mrbench simulate --scenario scale --seeds 50 --steps 200`` in a fresh folder (the store's
   tables and MLflow's migrations are created on the way);
2. the same command again in that folder (the store exists);
3. ``mrbench simulate --scenario scale,redundant,collapse,anti --seeds 50 --steps 200`` in a fresh
   folder.

Wall time is what the user waits for; other work on the machine stretches it, so the CPU time of
the command (user + system, from the child's resource usage) and the load average at the start
are printed too. Prints a markdown table; exits non-zero when a target is missed.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PER_SCENARIO_S = 5.0
FOUR_S = 20.0
FOUR = ("scale", "redundant", "collapse", "anti")


def _mrbench() -> str:
    """The ``mrbench`` console script next to this interpreter (the project's environment)."""
    script = Path(sys.executable).with_name("mrbench")
    return str(script) if script.exists() else "mrbench"


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run(args: list[str], cwd: Path) -> tuple[float, float]:
    """Wall and CPU seconds of ``mrbench args`` run in ``cwd``; raises if the command fails."""
    env = {k: v for k, v in os.environ.items() if k not in ("MRBENCH_RESULTS", "MLFLOW_TRACKING_URI")}
    cpu0 = _children_cpu_s()
    start = time.perf_counter()
    done = subprocess.run([_mrbench(), *args], cwd=cwd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"mrbench {' '.join(args)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return wall, _children_cpu_s() - cpu0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=50)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--keep", action="store_true", help="keep the temporary working folders")
    opts = parser.parse_args()
    common = ["--seeds", str(opts.seeds), "--steps", str(opts.steps)]
    root = Path(tempfile.mkdtemp(prefix="bench-simulate-cli-"))
    one, four = root / "one", root / "four"
    one.mkdir()
    four.mkdir()
    print(f"machine: {os.cpu_count()} cores; load average at start {os.getloadavg()}")
    print(f"command: {_mrbench()} (every registered method, {opts.seeds} seeds × {opts.steps} steps)\n")
    cases = [
        ("one scenario, fresh results folder", ["simulate", "--scenario", "scale", *common], one, 1),
        ("one scenario, store exists", ["simulate", "--scenario", "scale", *common], one, 1),
        (
            "four scenarios in one command, fresh folder",
            ["simulate", "--scenario", ",".join(FOUR), *common],
            four,
            4,
        ),
    ]
    print("| case | command | wall s | CPU s | per scenario s | target | verdict |")
    print("|---|---|---|---|---|---|---|")
    missed = 0
    try:
        for label, args, cwd, n in cases:
            wall, cpu = run(args, cwd)
            target = PER_SCENARIO_S if n == 1 else FOUR_S
            ok = wall <= target
            missed += not ok
            print(
                f"| {label} | `mrbench {' '.join(args)}` | {wall:.2f} | {cpu:.2f} | {wall / n:.2f} "
                f"| ≤ {target:.0f} s | {'OK' if ok else 'MISSED'} |",
                flush=True,
            )
    finally:
        if opts.keep:
            print(f"\nfolders kept under {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    print(f"\nload average at end {os.getloadavg()}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
