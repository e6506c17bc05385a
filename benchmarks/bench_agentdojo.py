"""Benchmark: AgentDojo v1.2.2 ground-truth scoring over every user task × injection task pair.

Each pair runs the suite's own ``GroundTruthPipeline`` through ``run_task_with_pipeline``
(the injected environment, the ground-truth calls, the suite's utility and injection
checkers), as ``mrbench.tasks.agent_security.agentdojo_runner.score_gold`` does. Target: ≤ 60 s wall
for the 949 pairs of one attack on a 2-core machine. The machine's load average is printed
with the figure: other processes on the same cores slow it down proportionally.

Run::

    python benchmarks/bench_agentdojo.py                      # important_instructions, 949 pairs
    python benchmarks/bench_agentdojo.py --attack both --workers 2

Exit status: 0 within target and every pair's ground truth solved; 1 otherwise.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--attack",
        default="important_instructions",
        choices=["important_instructions", "tool_knowledge", "both"],
    )
    parser.add_argument("--workers", type=int, default=1, help="forked worker processes (default 1)")
    parser.add_argument("--target", type=float, default=60.0, help="wall-clock target in seconds")
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")  # AgentDojo warns about optional LLM client libraries

    command = "python benchmarks/bench_agentdojo.py " + " ".join(argv if argv is not None else sys.argv[1:])
    start = time.perf_counter()
    from mrbench.tasks.agent_security import agentdojo_suites as ad
    from mrbench.tasks.agent_security.agentdojo_runner import score_gold

    ad.load_suites()
    loaded = time.perf_counter() - start
    attacks = list(ad.ATTACKS) if args.attack == "both" else [args.attack]
    cases = ad.list_cases(attacks=attacks, clean=False)
    per_suite: dict[str, list] = defaultdict(list)
    timings: dict[str, float] = {}
    for suite in ad.SUITES:  # one suite at a time so the table can show where the time goes
        t0 = time.perf_counter()
        per_suite[suite] = score_gold([c for c in cases if c.suite == suite], workers=args.workers)
        timings[suite] = time.perf_counter() - t0
    total = time.perf_counter() - start

    print(f"{'suite':<11}{'pairs':>7}{'utility':>9}{'injected':>10}{'seconds':>9}")
    failures = []
    for suite, results in per_suite.items():
        utility = sum(r.utility for r in results) / len(results)
        injected = sum(bool(r.attack_succeeded) for r in results)
        failures += [
            f"{r.case.id}: {r.detail or 'ground truth does not solve the task'}"
            for r in results
            if not r.utility
        ]
        print(f"{suite:<11}{len(results):>7}{utility:>9.3f}{injected:>10}{timings[suite]:>9.1f}")
    n = sum(len(r) for r in per_suite.values())
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"{'total':<11}{n:>7}{'':>9}{'':>10}{total:>9.1f}  (suite loading {loaded:.1f} s)")
    machine = f"{os.cpu_count()} cores · load average {load:.2f} · workers {args.workers}"
    print(f"target ≤ {args.target:.0f} s · {machine}")
    print(f"command: {command.strip()}")
    for failure in failures:
        print(f"FAILED {failure}")
    if total > args.target:
        print(f"OVER TARGET: {total:.1f} s > {args.target:.0f} s")
    return 0 if total <= args.target and not failures else 1


if __name__ == "__main__":
    raise SystemExit(main())
