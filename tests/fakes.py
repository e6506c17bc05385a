"""Scripted stand-ins for training, writing real MLflow runs in the exact layout of
:func:`mrbench.engine.cell.runner.run_cell` — for tests, the report benchmark and demos without a model.

- :func:`fake_resolve_spec` — like :func:`mrbench.engine.config.resolve_spec` over a fixed catalogue of
  methods and tasks (no registry imports); tasks named in ``$MRBENCH_FAKE_UNAVAILABLE`` raise
  ImportError, as a task whose code is not built does.
- :func:`fake_cell` — like ``run_cell``: one child run with the cell tags, params, per-step
  reward/advantage metrics, eval before/after and ``diagnostics.json``; ends FINISHED, or KILLED
  on Ctrl-C, or FAILED. ``$MRBENCH_FAKE_CELL_SECONDS`` makes it slow (for interrupt tests) and
  ``$MRBENCH_FAKE_CELL_FAIL`` (``fnmatch`` patterns over ``method|task|model|sSEED``) makes it fail;
  ``$MRBENCH_FAKE_CELL_RECORD_ENV`` (a folder) gets a file per cell with its ``CUDA_VISIBLE_DEVICES``.
- :func:`log_synthetic_run` — the layout writer both use; :func:`synthetic_sweep` fills a store
  with a whole sweep (parent + children) fast, through ``log_batch``.

The numbers are synthetic but structured: ``corrgrpo`` > ``gdpo`` > ``grpo`` on average, reward
curves rise with noise, so reports over them show real comparisons.
"""

from __future__ import annotations

import fnmatch
import hashlib
import math
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mrbench.core import layout
from mrbench.core.contracts import EvalResult, Generator, RewardComponent, Sample, Task
from mrbench.core.errors import UserError
from mrbench.core.records import Diagnostics, ShadowMeans
from mrbench.core.registry import UnknownNameError
from mrbench.engine.config import RunSpec, TrainSettings

# Names and hyper-parameter defaults as in the real registry (methods/).
FAKE_METHODS: dict[str, dict[str, Any]] = {
    "grpo": {"eps": 1e-6},
    "dr-grpo": {},
    "gdpo": {"eps": 1e-6},
    "gdpo-nobn": {"eps": 1e-6},
    "corrgrpo": {"eps": 1e-6},
    "corrgrpo-guarded": {"eps": 1e-6, "min_corr_sum": 1.0},
    "gdpo-corr": {"eps": 1e-6},
}


@dataclass(frozen=True)
class FakeTask:
    """The parts of a task that its runs' MLflow layout depends on."""

    components: tuple[str, ...]
    primary_metric: str
    eval_metrics: tuple[str, ...]
    lower_is_better: tuple[str, ...] = ()
    version: str = "fake-1"


FAKE_TASKS: dict[str, FakeTask] = {
    "code-generation": FakeTask(
        ("format", "syntax", "compile", "runtime", "accuracy", "ast_similarity", "efficiency"),
        "pass_at_1",
        ("pass_at_1", "executable_rate", "efficiency"),
    ),
    "tool-calling": FakeTask(
        ("function_name", "parameter", "values", "format"),
        "exact_match",
        ("exact_match", "format_rate"),
    ),
    "agent-security": FakeTask(
        ("utility", "safety"),
        "joint_accuracy",
        ("utility", "utility_under_attack", "asr", "joint_accuracy"),
        lower_is_better=("asr",),
    ),
}
_METHOD_GAIN = {
    "grpo": 0.0,
    "dr-grpo": -0.01,
    "gdpo": 0.03,
    "gdpo-nobn": 0.02,
    "corrgrpo": 0.06,
    "corrgrpo-guarded": 0.05,
    "gdpo-corr": 0.04,
}


def fake_resolve_spec(
    method: str,
    task: str,
    model: str,
    seed: int,
    *,
    method_params: dict[str, Any] | None = None,
    task_params: dict[str, Any] | None = None,
    train: TrainSettings | dict[str, Any] | None = None,
) -> RunSpec:
    """A :class:`RunSpec` for the fake catalogue, validated like ``resolve_spec``."""
    if method not in FAKE_METHODS:
        raise UserError(str(UnknownNameError("method", method, list(FAKE_METHODS))))
    if task not in FAKE_TASKS:
        raise UserError(str(UnknownNameError("task", task, list(FAKE_TASKS))))
    unavailable = [t.strip() for t in os.environ.get("MRBENCH_FAKE_UNAVAILABLE", "").split(",") if t.strip()]
    if task in unavailable:
        raise ModuleNotFoundError(f"No module named 'tasks.{task.replace('-', '_')}.task'")
    if not model or (model not in ("tiny", "tiny-s", "tiny-m", "tiny-l") and "/" not in model):
        raise UserError(f"unknown model {model!r}")
    params = dict(FAKE_METHODS[method])
    for key, value in (method_params or {}).items():
        if key not in params:
            known = ", ".join(params) or "none"
            raise UserError(f"unknown parameter {key!r} for {method!r}. Known parameters: {known}.")
        params[key] = type(params[key])(value)
    settings = train if isinstance(train, TrainSettings) else TrainSettings.from_overrides(train)
    return RunSpec(
        method=method,
        task=task,
        model=model,
        seed=seed,
        method_params=params,
        task_params=dict(task_params or {}),
        train=settings,
    )


@dataclass
class FakeCellResult:
    """Mirrors :class:`mrbench.engine.cell.runner.CellResult`."""

    run_id: str
    run_key: str
    status: str
    metrics_before: dict[str, float] = field(default_factory=dict)
    metrics_after: dict[str, float] = field(default_factory=dict)
    wall_s: float = 0.0
    primary_metric: str = ""


def _unit_noise(*parts: object) -> float:
    """A deterministic pseudo-random number in [-1, 1] from ``parts``."""
    digest = hashlib.sha256("|".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**63 - 1.0


def _quality(spec: RunSpec) -> float:
    """Final performance in [0, 1]: model base + method gain + seed noise."""
    base = 0.35 + 0.2 * (0.5 + 0.5 * _unit_noise("model", spec.task, spec.model))
    gain = _METHOD_GAIN.get(spec.method, 0.0) + 0.01 * _unit_noise(sorted(spec.method_params.items()))
    noise = 0.03 * _unit_noise(spec.method, spec.task, spec.model, spec.seed)
    return min(1.0, max(0.0, base + gain + noise))


def synthetic_metrics(
    spec: RunSpec, *, every: int = 1
) -> tuple[list[tuple[str, float, int]], dict[str, float], dict[str, float], Diagnostics]:
    """The numbers of one fake run: ``(step metrics [(key, value, step)], eval_before, eval_after,
    diagnostics)`` in the layout ``run_cell`` logs, for ``spec.train.steps`` steps."""
    method, task, model, seed, steps = spec.method, spec.task, spec.model, spec.seed, spec.train.steps
    fake = FAKE_TASKS.get(task, FakeTask(("a", "b"), "score", ("score",)))
    k = len(fake.components)
    q = _quality(spec)
    rows: list[tuple[str, float, int]] = []
    others = [m for m in ("grpo", "gdpo", "corrgrpo") if m != method]  # shadows (real runs: all others)
    for step in range(1, steps + 1, every):
        progress = 1.0 - math.exp(-3.0 * step / steps)
        total = 0.0
        for i, comp in enumerate(fake.components):
            start = 0.1 + 0.05 * i / k
            value = start + (q - start) * progress + 0.02 * _unit_noise(method, model, seed, comp, step)
            total += value
            rows.append((layout.reward_mean(comp), value, step))
            rows.append((layout.adv_share(comp), (1.0 + 0.3 * _unit_noise(method, comp)) / k, step))
        rows += [
            (layout.REWARD, total, step),
            (layout.adv_metric("mean_offdiag_corr"), 0.3 + 0.2 * _unit_noise(task, step), step),
            (layout.adv_metric("frac_zero_var_groups"), 0.2 * (1 - progress), step),
            (layout.adv_metric("denominator_mean"), 1.0 + 0.1 * _unit_noise(method, step), step),
            (layout.adv_metric("sign_flip_vs_grpo"), 0.0 if method == "grpo" else 0.05, step),
            (layout.adv_metric("abs_mean"), 0.8, step),
            (layout.TRAIN + "loss", 0.1 * _unit_noise(seed, step), step),
            (layout.ADV_RESOLUTION, _shadow(method, method).resolution, step),
        ]
        for other in others:  # how the other estimators would have judged this batch
            values = zip(layout.SHADOW_STATS, _shadow(method, other).stats(), strict=True)
            rows += [(layout.shadow_metric(other, s), v, step) for s, v in values]
    before, after = {}, {}
    for metric in fake.eval_metrics:
        b = 0.2 + 0.1 * (0.5 + 0.5 * _unit_noise("before", task, model, metric))
        a = b + (q - 0.2) * (1.0 + 0.1 * _unit_noise(metric, method, seed))
        if metric in fake.lower_is_better:
            b, a = 1.0 - b, 1.0 - a
        before[metric], after[metric] = b, a
    corr = [
        [1.0 if i == j else 0.5 * _unit_noise(task, method, min(i, j), max(i, j)) for j in range(k)]
        for i in range(k)
    ]
    share_raw = [1.0 + 0.3 * _unit_noise(method, c) for c in fake.components]
    share = [s / sum(share_raw) for s in share_raw]
    # Constant over steps: the values are the run means.
    shadow = {
        o: _shadow(method, o, steps) for o in others
    }  # constant over steps: the values are the run means
    resolution = _shadow(method, method).resolution
    diagnostics = Diagnostics(list(fake.components), corr, share, steps, resolution, shadow)
    return rows, before, after, diagnostics


def _shadow(method: str, other: str, steps: int = 0) -> ShadowMeans:
    u = _unit_noise("shadow", method, other)  # ``other`` judging ``method``'s batches; GRPO resolves least
    return ShadowMeans(0.85 + u / 10, 0.7 + u / 5, (0.6, 0.9)[other != "grpo"], steps)


def cell_tags(spec: RunSpec, sweep: str | None, git_sha: str = "fake0000") -> dict[str, str]:
    """The ``mrbench.*`` tags of a fake cell (:func:`mrbench.core.layout.cell_tags`, as the runner's)."""
    fake = FAKE_TASKS.get(spec.task, FakeTask(("a", "b"), "score", ("score",)))
    return layout.cell_tags(
        method=spec.method,
        task=spec.task,
        task_version=fake.version,
        model=spec.model,
        seed=spec.seed,
        run_key=spec.run_key(),
        git_sha=git_sha,
        sweep=sweep,
        primary_metric=fake.primary_metric,
        lower_is_better=frozenset(fake.lower_is_better),
        reward_components=list(fake.components),
    )


def log_synthetic_run(
    client: Any,
    experiment_id: str,
    spec: RunSpec,
    *,
    parent_run_id: str | None = None,
    sweep: str | None = None,
    status: str = "FINISHED",
    every: int = 1,
    diagnostics: bool = True,
) -> str:
    """Write one complete fake cell run (tags, params, metrics, diagnostics) and end it with ``status``."""
    from mlflow.entities import Metric, Param

    tags = cell_tags(spec, sweep)
    if parent_run_id:
        tags[layout.PARENT_RUN_TAG] = parent_run_id
    run_id = client.create_run(experiment_id, tags=tags, run_name=spec.label()).info.run_id
    _log_body(client, run_id, spec, every=every, diagnostics=diagnostics, Metric=Metric, Param=Param)
    client.set_terminated(run_id, status)
    return run_id


# Parameter counts the fake cells log for the tiny presets (other models log none, like older runs).
FAKE_SIZES = {"tiny": 560_000, "tiny-s": 1_900_000, "tiny-m": 8_400_000, "tiny-l": 32_500_000}


def _log_body(
    client: Any,
    run_id: str,
    spec: RunSpec,
    *,
    every: int,
    diagnostics: bool,
    Metric: Any,
    Param: Any,
    pause: Any = None,
) -> tuple[dict[str, float], dict[str, float]]:
    now = int(time.time() * 1000)
    rows, before, after, diag = synthetic_metrics(spec, every=every)
    metrics = [Metric(layout.eval_before_metric(k), v, now, 0) for k, v in before.items()]
    metrics += [Metric(layout.eval_metric(k), v, now, 0) for k, v in before.items()]
    metrics += [Metric(key, value, now, step) for key, value, step in rows]
    if pause is not None:
        pause()
    metrics += [Metric(layout.eval_metric(k), v, now + 1, spec.train.steps) for k, v in after.items()]
    metrics.append(Metric(layout.PERF_WALL_S, 1.0, now + 1, spec.train.steps))
    params = [Param(k, v) for k, v in spec.flat_params().items()]
    if spec.model in FAKE_SIZES:  # as the runner logs the loaded policy's size
        params.append(Param(layout.PARAM_N_PARAMS, str(FAKE_SIZES[spec.model])))
    for start in range(0, max(len(metrics), 1), 1000):
        client.log_batch(run_id, metrics=metrics[start : start + 1000], params=params if start == 0 else [])
    if diagnostics:
        client.log_dict(run_id, diag.to_json(), layout.DIAGNOSTICS_ARTIFACT)
    return before, after


def fake_cell(
    spec: RunSpec,
    *,
    tracking_uri: str,
    experiment: str,
    parent_run_id: str | None = None,
    sweep: str | None = None,
    progress: bool = True,
) -> FakeCellResult:
    """A fast stand-in for ``run_cell`` with the same signature, run statuses and MLflow layout."""
    from mlflow.entities import Metric, Param
    from mlflow.tracking import MlflowClient

    from mrbench.store.client import ensure_experiment

    started = time.perf_counter()
    client = MlflowClient(tracking_uri=tracking_uri)
    experiment_id = ensure_experiment(experiment, tracking_uri)
    tags = cell_tags(spec, sweep)
    if parent_run_id:
        tags[layout.PARENT_RUN_TAG] = parent_run_id
    run_id = client.create_run(experiment_id, tags=tags, run_name=spec.label()).info.run_id
    seconds = float(os.environ.get("MRBENCH_FAKE_CELL_SECONDS", "0") or 0)
    patterns = [p for p in os.environ.get("MRBENCH_FAKE_CELL_FAIL", "").split(",") if p]
    record = os.environ.get("MRBENCH_FAKE_CELL_RECORD_ENV")
    if record:  # the GPUs this cell process was given (tests of mrbench.engine.processes.devices)
        Path(record, spec.run_key()).write_text(os.environ.get("CUDA_VISIBLE_DEVICES", "<unset>"))

    def pause() -> None:
        # Sleep in small slices so that Ctrl-C / SIGINT lands promptly, mid-cell.
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            time.sleep(min(0.05, max(0.0, end - time.monotonic())))
        if any(fnmatch.fnmatch(spec.label(), p) for p in patterns):
            raise RuntimeError(f"scripted failure of cell {spec.label()}")

    try:
        before, after = _log_body(
            client, run_id, spec, every=1, diagnostics=True, Metric=Metric, Param=Param, pause=pause
        )
        client.set_terminated(run_id, "FINISHED")
    except KeyboardInterrupt:
        client.set_terminated(run_id, "KILLED")
        raise
    except BaseException as exc:
        client.set_tag(run_id, layout.tag(layout.ERROR), f"{type(exc).__name__}: {exc}")
        client.set_terminated(run_id, "FAILED")
        raise
    fake = FAKE_TASKS.get(spec.task)
    return FakeCellResult(
        run_id,
        spec.run_key(),
        "FINISHED",
        before,
        after,
        time.perf_counter() - started,
        fake.primary_metric if fake else "score",
    )


def _variant_params(method: str) -> dict[str, str]:
    """Hyper-parameters of a method entry ``"name:key=value,..."`` (none for a plain ``"name"``)."""
    params = method.partition(":")[2]
    return dict(item.split("=", 1) for item in params.split(",") if item)


def synthetic_sweep(
    tracking_uri: str,
    name: str,
    *,
    methods: Sequence[str],
    tasks: Sequence[str],
    models: Sequence[str],
    seeds: Sequence[int],
    steps: int = 30,
    every: int = 1,
    command: str = "mrbench sweep (synthetic)",
    failed: Sequence[str] = (),
    unavailable: dict[str, str] | None = None,
) -> str:
    """Fill ``tracking_uri`` with a finished sweep ``name`` (parent run + one child per cell); return
    the parent run id. A method entry may carry hyper-parameters, ``"corrgrpo-guarded:min_corr_sum=2"``
    (the report labels such variants apart). Cells whose label matches a pattern in ``failed`` end FAILED."""
    from mlflow.tracking import MlflowClient

    from mrbench.store.client import ensure_experiment
    from mrbench.sweeps.cell import Cell
    from mrbench.sweeps.parent import finish_parent_run, start_parent_run
    from mrbench.sweeps.spec import SweepSpec

    sweep_spec = SweepSpec(
        name=name,
        methods=tuple(methods),
        tasks=tuple(tasks),
        models=tuple(models),
        seeds=tuple(seeds),
        steps=steps,
    )
    client = MlflowClient(tracking_uri=tracking_uri)
    experiment_id = ensure_experiment(name, tracking_uri)
    cells = [
        Cell(
            fake_resolve_spec(
                m.partition(":")[0], t, mo, s, method_params=_variant_params(m), train={"steps": steps}
            )
        )
        for s in seeds
        for t in tasks
        for mo in models
        for m in methods
    ]
    parent = start_parent_run(
        client, experiment_id, sweep_spec, command=command, cells=cells, unavailable=unavailable or {}
    )
    for cell in cells:
        status = "FAILED" if any(fnmatch.fnmatch(cell.label, p) for p in failed) else "FINISHED"
        log_synthetic_run(
            client,
            experiment_id,
            cell.spec,
            parent_run_id=parent,
            sweep=name,
            status=status,
            every=every,
            diagnostics=status == "FINISHED",
        )
    finish_parent_run(client, parent, "FINISHED")
    return parent


class EmptyTask(Task):
    """The least a task implements (the contract's required members), with no data and no rewards:
    for tests of the machinery around a task."""

    name = "plain"
    version = "0"
    primary_metric = "score"
    max_completion_tokens = 8

    def train_samples(self) -> list[Sample]:
        return []

    def eval_samples(self) -> list[Sample]:
        return []

    def reward_components(self) -> list[RewardComponent]:
        return []

    def evaluate(self, generator: Generator, samples: list[Sample] | None = None) -> EvalResult:
        return EvalResult({})
