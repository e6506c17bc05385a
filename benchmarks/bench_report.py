"""Benchmark: `mrbench report` over 300 cells × 3 seeds of synthetic logged runs must take ≤ 30 s.

    python benchmarks/bench_report.py            # build a temporary store, time the report
    python benchmarks/bench_report.py --keep /tmp/bench-store   # reuse/keep the store between runs

The store is filled with complete fake cell runs in the exact MLflow layout of a real sweep
(:func:`fakes.synthetic_sweep` in ``tests/``: tags, params, 30 steps of per-component rewards and
advantage diagnostics, eval before/after, ``diagnostics.json``): 10 method variants × 3 tasks ×
10 models = 300 cells, × 3 seeds = 900 runs. Building it is not timed. The timed part is the
real command in a fresh process (``python -m mrbench.cli.app report …``), imports included.
Exits non-zero when the target is missed.
"""

from __future__ import annotations

import argparse
import os
import resource
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET_S = 30.0
TESTS = Path(__file__).resolve().parents[1] / "tests"
METHODS = [
    "grpo",
    "dr-grpo",
    "gdpo",
    "gdpo-nobn",
    "corrgrpo",
    "gdpo-corr",
    "corrgrpo-guarded:min_corr_sum=0.5",
    "corrgrpo-guarded:min_corr_sum=1.0",
    "corrgrpo-guarded:min_corr_sum=2.0",
    "corrgrpo-guarded:min_corr_sum=4.0",
]
TASKS = ["code-generation", "tool-calling", "agent-security"]
MODELS = [
    "tiny",
    "tiny-s",
    "tiny-m",
    "tiny-l",
    "Qwen/Qwen2.5-0.5B-Instruct",
    "Qwen/Qwen2.5-1.5B-Instruct",
    "Qwen/Qwen2.5-3B-Instruct",
    "Qwen/Qwen2.5-7B-Instruct",
    "Qwen/Qwen3-4B",
    "Qwen/Qwen3-8B",
]
SEEDS = [0, 1, 2]
SWEEP = "bench-report"


def build_store(folder: Path, steps: int) -> str:
    """Fill ``folder`` with the synthetic sweep (once); return its tracking URI."""
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    marker = folder / "complete"
    if marker.exists():
        print(f"reusing the synthetic store in {folder}")
        return uri
    os.environ["MRBENCH_RESULTS"] = str(folder)  # artifacts of the fake runs go under the store folder
    sys.path.insert(0, str(TESTS))  # the fake runs' writer is test code (tests/fakes.py)
    from fakes import synthetic_sweep

    t0 = time.perf_counter()
    synthetic_sweep(
        uri,
        SWEEP,
        methods=METHODS,
        tasks=TASKS,
        models=MODELS,
        seeds=SEEDS,
        steps=steps,
        failed=["gdpo|tool-calling|tiny-m|s2"],
    )
    marker.write_text("ok\n")
    runs = len(METHODS) * len(TASKS) * len(MODELS) * len(SEEDS)
    print(f"built {runs} synthetic runs in {time.perf_counter() - t0:.0f} s (not timed)")
    return uri


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--keep", type=Path, help="store folder to reuse or keep (default: a temporary folder)"
    )
    parser.add_argument("--steps", type=int, default=30, help="logged training steps per run (default 30)")
    args = parser.parse_args()
    tmp = None
    if args.keep is None:
        tmp = tempfile.TemporaryDirectory(prefix="mrbench-bench-report-")
        folder = Path(tmp.name)
    else:
        folder = args.keep.resolve()
        folder.mkdir(parents=True, exist_ok=True)
    try:
        uri = build_store(folder, args.steps)
        out = folder / "report"
        command = [
            sys.executable,
            "-m",
            "mrbench.cli.app",
            "report",
            SWEEP,
            "--tracking-uri",
            uri,
            "--out",
            str(out),
        ]
        shown = shlex.join(["mrbench", "report", SWEEP, "--tracking-uri", uri, "--out", str(out)])
        env = {**os.environ, "MRBENCH_RESULTS": str(folder)}
        load = os.getloadavg()[0]
        cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        proc = subprocess.run(command, env=env, capture_output=True, text=True)
        elapsed = time.perf_counter() - t0
        cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
        if proc.returncode != 0:
            print(proc.stdout + proc.stderr)
            print(f"FAILED: `{shown}` exited with {proc.returncode}")
            return 1
        figures = len(list(out.glob("*.png")))
        size_kb = (out / "report.md").stat().st_size / 1024
        verdict = "OK" if elapsed <= TARGET_S else "TOO SLOW"
        print(f"command: {shown}")
        print(
            f"report over {len(METHODS) * len(TASKS) * len(MODELS)} cells × {len(SEEDS)} seeds "
            f"({len(METHODS) * len(TASKS) * len(MODELS) * len(SEEDS)} runs): {elapsed:.1f} s "
            f"(target ≤ {TARGET_S:.0f} s) {verdict}; {figures} figures, report.md {size_kb:.0f} KiB"
        )
        # Wall time depends on what else runs on the machine; CPU time is the work itself.
        print(
            f"CPU time (report process and its figure workers): {cpu:.1f} s; "
            f"1-minute load average at start: {load:.1f} on {os.cpu_count()} cores"
        )
        return 0 if elapsed <= TARGET_S else 1
    finally:
        if tmp is not None:
            tmp.cleanup()


if __name__ == "__main__":
    sys.exit(main())
