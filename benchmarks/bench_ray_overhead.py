"""Ray's overhead per cell: one real micro cell run by ``run_sweep`` on the local executor (in this
process, as ``workers: 1`` does) and on the Ray executor (a local Ray), alternately, a few times.

The cell trains the micro Qwen2 of the tests (``tests/conftest.py``, built once here) 2 GRPO
steps on tool calling and evaluates it before and after, logging a complete MLflow run to a
sqlite store. Both arms run the whole sweep path (grid, resume, parent run, claims, the cell,
ending the parent run), each repeat under a new sweep name so that the cell really runs. Ray is
started once before the repeats (its start-up is printed apart: a sweep pays it once, not per
cell) with as many CPUs as this machine has, and the cell asks for all of them, so that both arms
train with the same number of threads. Each arm first runs one warm-up cell (printed apart): the
local arm pays this process's imports in it, the Ray arm its worker process's start and imports
(a CPU-only cell reuses an idle Ray worker, as the local executor reuses its process; a GPU cell
gets a fresh worker, so that figure is what each GPU cell pays).

    python benchmarks/bench_ray_overhead.py [--repeats 3]

Prints the median wall seconds of each arm, their difference (the overhead per cell) and the load
average; exits 1 if the overhead is over 5 s.
"""

from __future__ import annotations

import argparse
import io
import os
import secrets
import statistics
import sys
import tempfile
import time
from pathlib import Path

# A local Ray on loopback (Ray 2.60 binds the machine's network address otherwise); read at import.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

TESTS = Path(__file__).resolve().parents[1] / "tests"
sys.path.insert(0, str(TESTS))  # the micro model is the tests' (tests/conftest.py)

TARGET_S = 5.0
TASK_PARAMS = {"n_train": 16, "n_eval": 4}
TRAIN = {"steps": 2, "num_generations": 2, "prompts_per_step": 2, "eval_limit": 4}


def sweep_seconds(name: str, model_dir: Path, uri: str, executor: str, cpus: int) -> float:
    """Wall seconds of one ``run_sweep`` of the one-cell micro sweep ``name``; fails unless FINISHED."""
    from rich.console import Console

    from mrbench.sweeps.orchestrator import run_sweep
    from mrbench.sweeps.spec import SweepSpec

    spec = SweepSpec(
        name=name,
        methods=("gdpo",),
        tasks=("tool-calling",),
        models=(str(model_dir),),
        seeds=(0,),
        task_params={"tool-calling": dict(TASK_PARAMS)},
        train=dict(TRAIN),
        executor=executor,
        cpus_per_cell=float(cpus),
        report=False,
    )
    t0 = time.perf_counter()
    outcome = run_sweep(spec, tracking_uri=uri, console=Console(file=io.StringIO()))
    seconds = time.perf_counter() - t0
    statuses = [o.status for o in outcome.outcomes]
    if statuses != ["FINISHED"]:
        raise SystemExit(f"{executor} cell did not finish: {[(o.status, o.error) for o in outcome.outcomes]}")
    return seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    # A throwaway token for the throwaway Ray (else Ray saves a new one under ~/.ray).
    os.environ.setdefault("RAY_AUTH_TOKEN", secrets.token_hex(16))

    import ray
    from conftest import MICRO, micro_demos

    from mrbench.engine.models.tiny import build_tiny_model
    from mrbench.sweeps.executors.local import available_cores

    cpus = available_cores()
    with tempfile.TemporaryDirectory(prefix="bench-ray-") as tmp:
        os.environ["MRBENCH_RESULTS"] = str(Path(tmp) / "results")  # forwarded to the Ray tasks too
        uri = f"sqlite:///{tmp}/mlflow.db"
        model_dir = Path(tmp) / "micro"
        build_tiny_model(MICRO, model_dir, micro_demos(), seed=0)
        warm_local = sweep_seconds("warmup-local", model_dir, uri, "local", cpus)
        t0 = time.perf_counter()
        ray.init(
            num_cpus=cpus,
            include_dashboard=False,
            log_to_driver=False,
            object_store_memory=80 * 2**20,
            _temp_dir=str(Path(tmp) / "ray"),
        )
        ray_start = time.perf_counter() - t0
        local, remote = [], []
        try:
            warm_ray = sweep_seconds("warmup-ray", model_dir, uri, "ray", cpus)
            for i in range(args.repeats):
                local.append(sweep_seconds(f"local-{i}", model_dir, uri, "local", cpus))
                remote.append(sweep_seconds(f"ray-{i}", model_dir, uri, "ray", cpus))
        finally:
            ray.shutdown()
    overhead = statistics.median(remote) - statistics.median(local)
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"cores {cpus}; load average {load}; Ray start {ray_start:.1f} s")
    print(f"warm-up (first) cell: local {warm_local:.1f} s, Ray {warm_ray:.1f} s")
    print("local executor, s per one-cell sweep: " + ", ".join(f"{s:.1f}" for s in local))
    print("Ray executor,   s per one-cell sweep: " + ", ".join(f"{s:.1f}" for s in remote))
    verdict = "ok" if overhead <= TARGET_S else "OVER"
    print(
        f"Ray overhead per cell (median difference): {overhead:+.1f} s (target ≤ {TARGET_S:.0f} s): {verdict}"
    )
    return 0 if overhead <= TARGET_S else 1


if __name__ == "__main__":
    sys.exit(main())
