"""Wall time of ``mrbench score --task tool-calling --dataset bfcl-<category> --gold --json``
for every BFCL category, end to end, and whether BFCL's own checker accepts every gold answer.

Each category runs as its own command in a fresh process (``python -m mrbench``: interpreter
start-up, imports, reading the data, loading the checker, scoring, the JSON output), exactly as
a user would type it. Needs the optional BFCL install: ``pip install --no-deps "bfcl-eval==2026.3.23"``.

Usage::

    python benchmarks/bench_score_bfcl.py [--budget 60]

Prints a markdown table and exits 1 if some gold answer is not valid under the checker, or if
all categories together take longer than ``--budget`` seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def run_category(category: str) -> tuple[float, dict]:
    """(wall seconds, the command's JSON output) for one category's gold answers."""
    command = [sys.executable, "-m", "mrbench", "score", "--task", "tool-calling"]
    command += ["--dataset", f"bfcl-{category}", "--gold", "--json"]
    started = time.perf_counter()
    proc = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, check=False)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(command[2:])} exited {proc.returncode}: {proc.stderr.strip()}")
    return wall, json.loads(proc.stdout)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=float, default=60.0, help="seconds allowed for all categories")
    args = parser.parse_args(argv)

    from mrbench.tasks.tool_calling.bfcl import CATEGORY_FILES

    rows, total, all_valid = [], 0.0, True
    for category in CATEGORY_FILES:
        wall, report = run_category(category)
        total += wall
        valid = sum(1 for item in report["items"] if item["rewards"].get("bfcl_valid") == 1.0)
        all_valid &= valid == report["n"] and not report["errors"]
        rows.append(
            (category, report["n"], valid, report["summary"].get("exact_match"), report["wall_s"], wall)
        )
    print("## `mrbench score --task tool-calling --dataset bfcl-<category> --gold --json`\n")
    print("| category | items | valid under BFCL's checker | exact_match | scoring s | command wall s |")
    print("|---|---:|---:|---:|---:|---:|")
    for category, n, valid, exact, scoring, wall in rows:
        print(f"| {category} | {n} | {valid} | {exact:.3f} | {scoring:.2f} | {wall:.2f} |")
    n_total = sum(r[1] for r in rows)
    print(f"| **all** | {n_total} | {sum(r[2] for r in rows)} | | | **{total:.2f}** |")
    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    print(
        f"\nMachine: {os.cpu_count()} CPUs, load average {load[0]:.1f}, Python {platform.python_version()}. "
        "Command wall = a fresh `python -m mrbench` process per category; scoring = its `wall_s`."
    )
    if not all_valid:
        print("\nFAIL: some gold answer is not valid under BFCL's checker", file=sys.stderr)
    if total > args.budget:
        print(f"\nFAIL: {total:.1f} s is over the {args.budget:g} s budget", file=sys.stderr)
    return 0 if all_valid and total <= args.budget else 1


if __name__ == "__main__":
    sys.exit(main())
