"""Where a finished sweep's time went, per task, from its MLflow store alone.

    python benchmarks/profile_sweep.py [SWEEP] [--tracking-uri URI]

Reads every FINISHED cell of the sweep (default ``smoke`` in the default store) and prints, per
task (per task and model when the sweep has several models), the median of each phase the runner
logs (``perf/*``: model preparation, training, evaluation, the whole cell), how many cells reused
the pre-training evaluation (``mrbench.eval_before_from``), and what that evaluation costs where
it was computed (the median evaluation time of the cells that computed it minus that of the cells
that reused it), then the parent run's wall time (first cell start to last cell end).
"""

from __future__ import annotations

import argparse
import statistics

from mlflow.tracking import MlflowClient

from mrbench.core import layout
from mrbench.core.layout import PERF_EVAL_S, PERF_MODEL_PREPARE_S, PERF_TRAIN_S, PERF_WALL_S
from mrbench.store.local import resolve_tracking_uri


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweep", nargs="?", default="smoke")
    parser.add_argument("--tracking-uri", default=None)
    args = parser.parse_args()
    client = MlflowClient(resolve_tracking_uri(args.tracking_uri))
    experiment = client.get_experiment_by_name(args.sweep)
    if experiment is None:
        raise SystemExit(f"no sweep named {args.sweep!r} in the store")
    runs = [
        r
        for r in client.search_runs([experiment.experiment_id], max_results=10000)
        if r.info.status == "FINISHED" and layout.tag(layout.RUN_KEY) in r.data.tags
    ]
    several_models = len({r.data.tags[layout.tag(layout.MODEL)] for r in runs}) > 1
    by_task: dict[str, list] = {}
    for run in runs:
        group = run.data.tags[layout.tag(layout.TASK)]
        if several_models:
            group += " | " + run.data.tags[layout.tag(layout.MODEL)]
        by_task.setdefault(group, []).append(run)
    print(f"{len(runs)} FINISHED cells in sweep {args.sweep!r}")
    print(
        ("task | model" if several_models else "task")
        + " | cells | wall s | model prepare s | train s | eval s | eval before s (when computed) | reused"
    )

    def order(item: tuple[str, list]) -> tuple[str, float]:  # by task, then by model size
        sizes = [float(r.data.params.get(layout.PARAM_N_PARAMS, "nan")) for r in item[1]]
        return item[0].split(" | ")[0], _median([x for x in sizes if x == x])

    for task, task_runs in sorted(by_task.items(), key=order):
        m = {
            key: _median([r.data.metrics[key] for r in task_runs if key in r.data.metrics])
            for key in (
                layout.PERF_WALL_S,
                layout.PERF_MODEL_PREPARE_S,
                layout.PERF_TRAIN_S,
                layout.PERF_EVAL_S,
            )
        }
        reused = [r for r in task_runs if layout.tag(layout.EVAL_BEFORE_FROM) in r.data.tags]
        computed = [r for r in task_runs if r not in reused]
        before_s = _median(
            [r.data.metrics.get(layout.PERF_EVAL_S, float("nan")) for r in computed]
        ) - _median([r.data.metrics.get(layout.PERF_EVAL_S, float("nan")) for r in reused])
        print(
            f"{task} | {len(task_runs)} | {m[PERF_WALL_S]:.1f} | {m[PERF_MODEL_PREPARE_S]:.1f} | "
            f"{m[PERF_TRAIN_S]:.1f} | {m[PERF_EVAL_S]:.1f} | {before_s:.1f} | "
            f"{len(reused)}/{len(task_runs)}"
        )
    starts = [r.info.start_time for r in runs]
    ends = [r.info.end_time for r in runs if r.info.end_time]
    if starts and ends:
        print(f"first cell start to last cell end: {(max(ends) - min(starts)) / 1000:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
