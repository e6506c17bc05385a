"""A CPU cell with and without mrbench's two CPU settings, which must change no number.

- ``MRBENCH_MALLOC``: ``keep`` (default) makes glibc serve big blocks from its heap and keep them
  for reuse (:mod:`mrbench.engine.processes.allocator`); ``default`` leaves glibc alone.
- ``MRBENCH_CPU_FOLD``: ``mrbench`` (default) folds TRL's log-prob tiles in place, bit for bit as
  TRL does (:mod:`mrbench.engine.training.cpu_logprob`); ``trl`` keeps TRL's own folds.

Runs the same ``mrbench run`` (default: grpo, agent-security, tiny, the trainer's defaults) under
each pair of settings in turn, ``--repeats`` rounds, each run in a fresh results folder that shares
one built tiny model. Prints the median wall, user and system seconds per pair and checks that
every run ends with the same final metrics.

    python benchmarks/bench_cpu_cell.py --models DIR    # DIR: a results folder's models/
    python benchmarks/bench_cpu_cell.py --task tool-calling --repeats 3

Time it on an otherwise idle machine and say the load.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mrbench.core import layout

SETTINGS = (("default", "trl"), ("keep", "trl"), ("keep", "mrbench"))
"""(MRBENCH_MALLOC, MRBENCH_CPU_FOLD): neither, the allocator only, both (the defaults)."""


def _run(
    task: str, env: dict[str, str], log: Path, extra: tuple[str, ...] | list[str] = ()
) -> tuple[float, float, float]:
    """One ``mrbench run`` as a child process: its wall, user and system seconds."""
    run = ["run", "--method", "grpo", "--task", task, "--model", "tiny", *extra]
    command = [sys.executable, "-m", "mrbench", *run]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    with log.open("wb") as out:
        code = subprocess.run(command, env=env, stdout=out, stderr=subprocess.STDOUT).returncode
    wall = time.perf_counter() - started
    if code != 0:
        sys.exit(f"mrbench run failed (exit {code}); see {log}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, after.ru_utime - before.ru_utime, after.ru_stime - before.ru_stime


# Wall-clock readings, different in every run: mrbench's perf/ metrics, TRL's step and run times
# and its train_samples/steps_per_second.
TIMINGS = (layout.PERF, *(layout.TRAIN + k for k in ("step_time", "train_runtime", "train_s")))


def _final_metrics(results: Path) -> dict[str, float]:
    """The last value of every metric of the finished run (the only run in its store) but the
    wall-clock readings: evaluation, rewards, advantages, loss, gradient norm, entropy."""
    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{results / 'mlflow.db'}")
    runs = [r for e in client.search_experiments() for r in client.search_runs([e.experiment_id])]
    finished = [r for r in runs if r.info.status == "FINISHED"]
    if len(finished) != 1:
        sys.exit(f"expected one finished run in {results}, found {len(finished)}")
    return {k: v for k, v in finished[0].data.metrics.items() if not k.startswith(TIMINGS)}


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--task", default="agent-security")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--models", type=Path, help="a results folder's models/ to reuse (skips the build)")
    args = parser.parse_args()
    load = os.getloadavg()[0]
    times: dict[tuple[str, str], list[tuple[float, float, float]]] = {s: [] for s in SETTINGS}
    metrics: dict[tuple[str, str], list[dict[str, float]]] = {s: [] for s in SETTINGS}
    with tempfile.TemporaryDirectory(prefix="mrbench-cpu-cell-") as tmp:
        base_env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
        models = args.models.resolve() if args.models else Path(tmp) / "build" / "models"
        if not args.models:  # build the tiny model once with a one-step run: not timed
            env = {**base_env, "MRBENCH_RESULTS": str(Path(tmp) / "build")}
            _run(args.task, env, Path(tmp) / "build.log", ["--steps", "1"])
        for i in range(args.repeats):
            for setting in SETTINGS:
                results = Path(tmp) / f"{'-'.join(setting)}-{i}"
                results.mkdir()
                (results / "models").symlink_to(models)
                malloc, fold = setting
                env = {**base_env, "MRBENCH_RESULTS": str(results)}
                env.update(MRBENCH_MALLOC=malloc, MRBENCH_CPU_FOLD=fold)
                times[setting].append(_run(args.task, env, results / "run.log"))
                metrics[setting].append(_final_metrics(results))
    print(
        f"grpo | {args.task} | tiny, {args.repeats} runs per setting, alternating (load {load:.1f} at start)"
    )
    for setting in SETTINGS:
        wall, user, sys_s = (statistics.median(t[k] for t in times[setting]) for k in range(3))
        label = f"MRBENCH_MALLOC={setting[0]:<7} MRBENCH_CPU_FOLD={setting[1]:<7}"
        print(f"  {label} wall {wall:6.1f} s   user {user:6.1f} s   sys {sys_s:5.1f} s")
    first = metrics[SETTINGS[0]][0]
    same = all(m == first for ms in metrics.values() for m in ms)
    print(f"  final metrics equal across every run: {same}")
    if not same:
        print(json.dumps({"+".join(k): v for k, v in metrics.items()}, indent=1, sort_keys=True))
        return 1
    base = statistics.median(t[0] for t in times[SETTINGS[0]])
    for setting in SETTINGS[1:]:
        wall = statistics.median(t[0] for t in times[setting])
        print(f"  {'+'.join(setting)} / {'+'.join(SETTINGS[0])} wall: {wall / base:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
