"""Benchmark: the estimator lab — every preset × every registered method × 50 seeds × 200 steps ≤ 30 s.

    python benchmarks/bench_simulate.py                # the full grid on 2 processes, then per-update costs
    python benchmarks/bench_simulate.py --workers 1    # the grid in this process only

Timed: :func:`mrbench.lab.simulate.simulate` for each preset scenario with every registered
method (the training loops, reward sampling, advantage estimation with the registered
estimators, exact expected rewards and the per-step diagnostics; not the bootstrap statistics,
figures or MLflow logging of ``mrbench simulate``). With ``--workers N`` the methods train in N
processes (:func:`mrbench.lab.simulate.process_pool`; its start-up is included in the time).

Then the per-update cost (one seed's policy update: sample, score, estimate, step) of the
vectorised loop (all seeds batched) against a plain per-seed Python loop (the same simulation
called once per seed), on the ``scale`` preset, per method, in the same run. Both produce the same
numbers (tests/lab/test_simulate.py checks it). Prints markdown tables; exits non-zero when the
grid misses the target.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import sys
import time
from dataclasses import replace

TARGET_S = 30.0


def _cpu_s() -> float:
    """CPU seconds of this process and its finished children (the pool's workers once shut down)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def grid(seeds: int, steps: int, workers: int) -> tuple[float, float, list[tuple[str, float]]]:
    """Wall time and CPU time of the whole grid, and the wall time per scenario."""
    from mrbench.lab.presets import PRESETS, get_scenario
    from mrbench.lab.simulate import process_pool, simulate

    rows = []
    cpu0 = _cpu_s()
    start = time.perf_counter()
    pool = process_pool(workers) if workers > 1 else None
    try:
        for name in PRESETS:
            scenario = replace(get_scenario(name), steps=steps)
            t0 = time.perf_counter()
            simulate(scenario, None, range(seeds), executor=pool)
            rows.append((name, time.perf_counter() - t0))
    finally:
        if pool is not None:
            pool.shutdown()
    return time.perf_counter() - start, _cpu_s() - cpu0, rows


def per_update(seeds: int, steps: int) -> list[tuple[str, float, float]]:
    """(method, µs per seed-update vectorised, µs per seed-update in a per-seed loop)."""
    from mrbench.lab.presets import get_scenario
    from mrbench.lab.simulate import default_methods, simulate

    scenario = replace(get_scenario("scale"), steps=steps)
    rows = []
    for method in default_methods():
        t0 = time.perf_counter()
        simulate(scenario, [method], range(seeds))
        batched = time.perf_counter() - t0
        t0 = time.perf_counter()
        for seed in range(seeds):
            simulate(scenario, [method], [seed])
        looped = time.perf_counter() - t0
        updates = seeds * steps
        rows.append((method, batched / updates * 1e6, looped / updates * 1e6))
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=50)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    parser.add_argument("--loop-steps", type=int, default=40, help="steps of the per-update comparison")
    args = parser.parse_args()

    from mrbench.lab.presets import PRESETS
    from mrbench.lab.simulate import default_methods

    methods = default_methods()
    cpu = platform.processor() or platform.machine()
    print(f"machine: {os.cpu_count()} cores, {cpu}, load {os.getloadavg()}")
    print(
        f"grid: {len(PRESETS)} scenarios × {len(methods)} methods ({', '.join(methods)}) "
        f"× {args.seeds} seeds × {args.steps} steps, {args.workers} process(es)\n"
    )
    total, cpu, rows = grid(args.seeds, args.steps, args.workers)
    print("| scenario | wall s |")
    print("|---|---|")
    for name, wall in rows:
        print(f"| {name} | {wall:.2f} |")
    verdict = "OK" if total <= TARGET_S else "MISSED"
    print(f"| **all** | **{total:.2f}** (target ≤ {TARGET_S:.0f} s: {verdict}) |\n")
    # Other work on the machine stretches the wall time; the CPU time does not depend on it
    # (on an idle machine the wall time is about CPU time / processes).
    per_process = cpu / args.workers
    print(f"CPU time of the grid: {cpu:.1f} s over {args.workers} process(es) → {per_process:.1f} s each\n")

    print(f"per-update cost on `scale`, {args.seeds} seeds × {args.loop_steps} steps", end="")
    print(" (µs per seed per update):\n")
    print("| method | vectorised | per-seed loop | speed-up |")
    print("|---|---|---|---|")
    for method, batched, looped in per_update(args.seeds, args.loop_steps):
        print(f"| {method} | {batched:.1f} | {looped:.1f} | {looped / batched:.1f}× |")
    print(f"\nload after: {os.getloadavg()}")
    return 0 if total <= TARGET_S else 1


if __name__ == "__main__":
    sys.exit(main())
