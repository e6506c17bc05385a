"""Advantage estimators: vectorised vs plain per-group loop, measured side by side in one run.

    python benchmarks/bench_advantages.py [--prompts 1024] [--group-size 16] [--components 7]

Random rewards ``[P, G, K]`` (float32, components at different scales, ~2 % missing values and
~1 % unscorable rollouts). For every registered method: the median wall time of the vectorised
implementation (after warm-up) and of its loop reference in ``methods/reference.py`` on the same
input. Prints a markdown table and exits 1 if any method is slower than ``--max-ms`` or less than
``--min-speedup`` times faster than its loop.

Timings are wall-clock. Run on a quiet machine: when other processes keep the cores busy, a
multi-threaded run stalls in OpenMP waiting for a descheduled worker (tens of ms per call);
``--threads 1`` is then the steadier figure.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without install

from mrbench.methods import METHODS
from mrbench.methods.reference import REFERENCES


def _median_ms(fn: Callable[[], object], reps: int, warmup: int) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def make_rewards(p: int, g: int, k: int, seed: int = 0) -> torch.Tensor:
    """Float32 rewards ``[P, G, K]`` with per-component scales, a few NaNs and unscorable rows."""
    gen = torch.Generator().manual_seed(seed)
    scale = 10.0 ** torch.linspace(-1, 2, k)
    r = torch.rand(p, g, k, generator=gen) * scale
    r[torch.rand(p, g, k, generator=gen) < 0.02] = torch.nan
    r[torch.rand(p, g, generator=gen) < 0.01] = torch.nan
    return r


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=1024)
    parser.add_argument("--group-size", type=int, default=16)
    parser.add_argument("--components", type=int, default=7)
    parser.add_argument("--reps", type=int, default=50, help="timed repetitions of each vectorised method")
    parser.add_argument("--loop-reps", type=int, default=3, help="timed repetitions of each loop reference")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--max-ms", type=float, default=5.0)
    parser.add_argument("--min-speedup", type=float, default=50.0)
    args = parser.parse_args(argv)

    torch.set_num_threads(args.threads)
    rewards = make_rewards(args.prompts, args.group_size, args.components)
    weights = torch.ones(args.components)
    load = os.getloadavg()[0]
    print(
        f"P={args.prompts} G={args.group_size} K={args.components} float32, torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads, median of {args.reps} (vectorised) / {args.loop_reps} (loop) "
        f"runs, load average {load:.2f} on {os.cpu_count()} CPUs\n"
    )
    if load > (os.cpu_count() or 1):
        print("warning: the machine is busy; wall times are inflated, rerun when quiet\n", file=sys.stderr)
    print("| method | vectorised ms | loop ms | speed-up |")
    print("|---|---:|---:|---:|")
    failures = []
    for entry in METHODS:
        fast = entry.obj
        slow = REFERENCES[entry.name]
        fast_ms = _median_ms(lambda f=fast: f(rewards, weights), args.reps, warmup=5)
        slow_ms = _median_ms(lambda f=slow: f(rewards, weights), args.loop_reps, warmup=1)
        speedup = slow_ms / fast_ms
        print(f"| {entry.name} | {fast_ms:.2f} | {slow_ms:.1f} | {speedup:.0f}× |")
        if fast_ms > args.max_ms or speedup < args.min_speedup:
            failures.append(entry.name)
    if failures:
        print(
            f"\nFAIL: {', '.join(failures)} slower than {args.max_ms} ms or < {args.min_speedup}× the loop",
            file=sys.stderr,
        )
        return 1
    print(f"\nOK: every method ≤ {args.max_ms} ms and ≥ {args.min_speedup}× faster than its loop")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
