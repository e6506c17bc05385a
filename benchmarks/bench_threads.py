"""Does a tiny cell degrade gracefully when other mrbench processes share the machine?

Runs the same kind of ``mrbench run`` (grpo, tool-calling, tiny, ``--steps N``) alone, then
``--concurrent`` of them started together (other seeds), in one fresh results folder whose tiny
model is built first (not timed), and prints each run's wall time and its slowdown against the run
alone. ``--threads K`` sets ``MRBENCH_THREADS`` for every run (e.g. the cores of the machine, which
is what every process used before the thread policy).

    python benchmarks/bench_threads.py                 # the thread policy (1 thread for tiny)
    python benchmarks/bench_threads.py --threads 2     # every process with 2 threads

Time it on an otherwise idle machine and say the load; the target (issue 24) is that each of
three concurrent runs on 2 cores takes at most 3× its time alone.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _command(seed: int, steps: int) -> list[str]:
    run = ["run", "--method", "grpo", "--task", "tool-calling", "--model", "tiny"]
    return [sys.executable, "-m", "mrbench", *run, "--seed", str(seed), "--steps", str(steps), "--quiet"]


def _start(seed: int, steps: int, env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(_command(seed, steps), env=env, stdout=out, stderr=subprocess.STDOUT)


def _timed(seeds: list[int], steps: int, env: dict[str, str], logs: Path) -> list[float]:
    """Start one run per seed together; each one's wall time in seconds."""
    started = time.perf_counter()
    procs = {seed: _start(seed, steps, env, logs / f"seed{seed}.log") for seed in seeds}
    walls = {}
    while procs:
        for seed, proc in list(procs.items()):
            if proc.poll() is not None:
                if proc.returncode != 0:
                    sys.exit(
                        f"run seed {seed} failed (exit {proc.returncode}); see {logs / f'seed{seed}.log'}"
                    )
                walls[seed] = time.perf_counter() - started
                del procs[seed]
        time.sleep(0.05)
    return [walls[s] for s in seeds]


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--concurrent", type=int, default=3)
    parser.add_argument(
        "--threads", type=int, default=0, help="MRBENCH_THREADS for every run (0: the policy)"
    )
    parser.add_argument("--models", type=Path, help="a results folder's models/ to reuse (skips the build)")
    args = parser.parse_args()
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="mrbench-threads-") as tmp:
        env = {**os.environ, "MRBENCH_RESULTS": str(Path(tmp) / "results")}
        if args.models:
            (Path(tmp) / "results").mkdir()
            (Path(tmp) / "results" / "models").symlink_to(args.models.resolve())
        env.pop("MLFLOW_TRACKING_URI", None)
        if args.threads:
            env["MRBENCH_THREADS"] = str(args.threads)
        logs = Path(tmp)
        _timed([100], 1, env, logs)  # builds the tiny model and warms the caches: not timed
        alone = _timed([0], args.steps, env, logs)[0]
        together = _timed(list(range(1, args.concurrent + 1)), args.steps, env, logs)
    policy = f"MRBENCH_THREADS={args.threads}" if args.threads else "the thread policy"
    print(
        f"`mrbench run --model tiny --task tool-calling --steps {args.steps}` with {policy}, load at start "
        f"{load:.1f}"
    )
    print("| runs at once | wall s | slowdown |")
    print("|---|---|---|")
    print(f"| 1 | {alone:.1f} | 1.00× |")
    for wall in together:
        print(f"| {args.concurrent} | {wall:.1f} | {wall / alone:.2f}× |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
