"""Resume inside a cell: how much training a cell killed with SIGKILL repeats, and what checkpoints cost.

    python benchmarks/bench_resume.py [--steps 30] [--checkpoint-every auto]

Real ``mrbench run`` processes (one thread each) train the micro Qwen2 of the tests
(``tests/conftest.py``, built once here) on tool calling, logging to a sqlite store:

1. the cell without training checkpoints (``--checkpoint-every 0``) and with them (the default
   "auto": a tenth of the steps), uninterrupted: the difference of their ``perf/train_s`` is what
   the checkpoints cost, and the size of one checkpoint is printed;
2. the cell killed with SIGKILL just before its next checkpoint is due (the worst case: the most
   steps since the last one), then the same command again. From the run's metric history it counts
   the optimizer steps the second attempt trained (those logged after it started) and the steps
   both attempts trained (repeated work).

Prints those figures and the load average; exits 1 if the resumed attempt trained other steps than
those after its checkpoint, or repeated more steps than the checkpoint interval.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mrbench.core import layout

TESTS = Path(__file__).resolve().parents[1] / "tests"
sys.path.insert(0, str(TESTS.parent))  # run from a checkout without install
sys.path.insert(0, str(TESTS))  # the micro model is the tests' (tests/conftest.py)

TASK_PARAMS = {"n_train": "16", "n_eval": "4"}
LOSS = layout.TRAIN + "loss"


def command(model_dir: Path, uri: str, steps: int, every: str) -> list[str]:
    args = [sys.executable, "-m", "mrbench", "run", "--method", "gdpo", "--model", str(model_dir)]
    args += ["--seed", "1", "--tracking-uri", uri, "--experiment", "resume", "--quiet"]
    args += ["--checkpoint-every", every]
    args += [x for k, v in TASK_PARAMS.items() for x in ("--task-param", f"{k}={v}")]
    train = {"steps": steps, "num_generations": 2, "prompts_per_step": 2, "eval_limit": 4}
    return args + [x for k, v in train.items() for x in ("--train", f"{k}={v}")]


def start(args: list[str], results: Path, log: Path) -> subprocess.Popen:
    env = {**os.environ, "MRBENCH_RESULTS": str(results), "OMP_NUM_THREADS": "1"}
    env.pop("MRBENCH_CHECKPOINT_EVERY", None)
    return subprocess.Popen(args, stdout=log.open("wb"), stderr=subprocess.STDOUT, env=env)


def finish(proc: subprocess.Popen, log: Path) -> None:
    if proc.wait() != 0:
        sys.exit(f"the cell failed:\n{log.read_text(errors='replace')[-3000:]}")


def only_run(client, experiment: str = "resume"):
    found = client.get_experiment_by_name(experiment)
    runs = client.search_runs([found.experiment_id]) if found else []
    return runs[0] if len(runs) == 1 else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--checkpoint-every", default="auto", help="N, or auto (a tenth of the steps)")
    args = parser.parse_args()

    from conftest import MICRO, micro_demos

    from mrbench.engine.cell.resume import parse_checkpoint_every, resolve_checkpoint_every

    every = resolve_checkpoint_every(parse_checkpoint_every(args.checkpoint_every), args.steps)
    if every < 1:
        sys.exit("--checkpoint-every must leave checkpoints to resume from")
    tmp = Path(tempfile.mkdtemp(prefix="mrbench-bench-resume-"))
    model_dir = tmp / "model"
    from mrbench.engine.models.tiny import build_tiny_model

    build_tiny_model(MICRO, model_dir, micro_demos(), seed=0)
    print(f"micro cell, {args.steps} steps, a training checkpoint every {every}")
    try:
        return measure(args.steps, every, model_dir, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def measure(steps: int, every: int, model_dir: Path, tmp: Path) -> int:
    """Run the cells (see the module docstring) in ``tmp``; print the figures; 0 when they hold."""
    from mlflow.tracking import MlflowClient

    from mrbench.engine.cell.checkpoints import folder_size_mb

    # 1. What the checkpoints cost.
    train_s = {}
    for name, option in (("without", "0"), ("with", str(every))):
        root = tmp / name
        uri = f"sqlite:///{root}/mlflow.db"
        root.mkdir()
        proc = start(command(model_dir, uri, steps, option), root / "results", root / "cell.log")
        finish(proc, root / "cell.log")
        train_s[name] = only_run(MlflowClient(uri)).data.metrics[layout.PERF_TRAIN_S]
    size_mb = 0.0
    probe = tmp / "probe"  # one checkpoint's size: a cell stopped right after its first checkpoint
    probe.mkdir()
    proc = start(command(model_dir, f"sqlite:///{probe}/mlflow.db", steps, str(every)), probe, probe / "log")
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and proc.poll() is None:
        markers = list((probe / "checkpoints").glob("*/checkpoint-*/mrbench-resume.json"))
        if markers:
            size_mb = folder_size_mb(markers[0].parent)
            break
        time.sleep(0.05)
    proc.kill()
    proc.wait()

    # 2. Kill just before the next checkpoint, resume, count.
    root = tmp / "killed"
    root.mkdir()
    uri = f"sqlite:///{root}/mlflow.db"
    client = MlflowClient(uri)
    checkpoint = max(every, (2 * steps // 3) // every * every)
    kill_at = min(checkpoint + every - 1, steps - 1)
    victim = start(command(model_dir, uri, steps, str(every)), root / "results", root / "first.log")
    logged: list[int] = []
    while True:
        if victim.poll() is not None:
            sys.exit(f"the cell ended before step {kill_at}:\n{(root / 'first.log').read_text()[-3000:]}")
        run = only_run(client)
        logged = [m.step for m in client.get_metric_history(run.info.run_id, LOSS)] if run else []
        if max(logged, default=0) >= kill_at:
            victim.send_signal(signal.SIGKILL)
            victim.wait()
            break
        time.sleep(0.02)
    run_id = only_run(client).info.run_id
    killed_steps = {m.step for m in client.get_metric_history(run_id, LOSS)}
    resumed_at_ms = int(time.time() * 1000)
    again = start(command(model_dir, uri, steps, str(every)), root / "results", root / "again.log")
    t0 = time.perf_counter()
    finish(again, root / "again.log")
    resume_wall = time.perf_counter() - t0
    run = only_run(client)
    if run is None or run.info.run_id != run_id or run.info.status != "FINISHED":
        sys.exit("the resumed cell did not finish its own run")
    resumed_from = int(layout.read_tag(run.data.tags, layout.RESUMED_FROM))
    second = sorted(m.step for m in client.get_metric_history(run_id, LOSS) if m.timestamp >= resumed_at_ms)
    repeated = sorted(set(second) & killed_steps)
    load = os.getloadavg()[0]

    print(
        f"checkpoints: {size_mb:.1f} MB each; train {train_s['with']:.1f} s with them, "
        f"{train_s['without']:.1f} s without ({train_s['with'] - train_s['without']:+.1f} s)"
    )
    print(f"killed after step {max(killed_steps)}; resumed from step {resumed_from} in the same run")
    print(
        f"the resumed attempt trained {len(second)} steps ({second[0]}..{second[-1]}), "
        f"{len(repeated)} of them repeated (at most {every}, the checkpoint interval); "
        f"a restart from scratch trains {steps}, repeating {max(killed_steps)}; "
        f"resumed attempt {resume_wall:.1f} s wall (load {load:.1f})"
    )
    ok = second == list(range(resumed_from + 1, steps + 1)) and len(repeated) <= every
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
