"""Run configuration: one cell = method × task × model × seed (+ trainer settings).

A :class:`RunSpec` is validated against the registries when it is resolved, and its content hash
(:meth:`RunSpec.run_key`) identifies the cell: a sweep skips a cell whose run key already has a
finished run. Anything that changes what a cell computes must therefore live in the spec; how it
runs (:class:`CellOptions`: checkpoint interval, store retry bound) travels with it, outside the key.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from dataclasses import dataclass, field
from typing import Any

from mrbench.core import layout, limits
from mrbench.core.errors import UserError
from mrbench.core.registry import Range

RUN_KEY_VERSION = 1  # bump when the meaning of a spec field changes, to invalidate old run keys
SHARED_PREFIX = ("auto", "on", "off")
ROUNDING_ONLY = frozenset({"shared_prefix"})
"""TrainSettings fields that change a cell's numbers by float rounding only: never in the run key,
and in :meth:`RunSpec.to_dict` and the params only when not at their default."""


@dataclass(frozen=True)
class TrainSettings:
    """Trainer knobs. Defaults are sane for the tiny models on a CPU; the `paper` preset overrides them."""

    steps: int = 30
    """Optimizer steps of GRPO training."""
    num_generations: int = 8
    """G: completions sampled per prompt (the group size of every estimator)."""
    prompts_per_step: int = 4
    """Prompts per optimizer step; the batch holds prompts_per_step × num_generations completions."""
    learning_rate: float = 3e-4
    """AdamW learning rate (tiny models need far more than the paper's 1e-6 for 7B models)."""
    beta: float = 0.0
    """KL coefficient against the reference model (0 = no reference model, as TRL's default)."""
    temperature: float = 1.0
    """Sampling temperature for rollouts."""
    max_completion_length: int = 0
    """Token budget per completion; 0 = the task's own `max_completion_tokens`."""
    eval_limit: int = 0
    """Evaluate on at most this many held-out samples; 0 = all of them."""
    gradient_accumulation_steps: int = 1
    """Micro-batches per optimizer step (for large models on small devices)."""
    precision: str = "auto"
    """``auto``: bfloat16 mixed precision on a CUDA GPU that computes in bfloat16, float32 elsewhere;
    ``bf16``: bfloat16 mixed precision everywhere (a CPU too); ``fp32``: float32 throughout. Mixed
    precision keeps float32 master weights, gradients and AdamW states and computes under bfloat16
    autocast (see :func:`mrbench.engine.models.catalog.mixed_precision`)."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass: less memory, about a third more compute."""
    use_vllm: bool = False
    """Generate rollouts with vLLM colocated on the training GPU (the ``vllm`` extra; CUDA only)."""
    shared_prefix: str = "auto"
    """Encode each group's prompt once, not once per completion, when scoring and when generating
    on the transformers path (:mod:`mrbench.engine.training.shared_prefix`): ``on`` where the model supports
    it (an error where it does not), ``off`` TRL's own passes, ``auto`` on for the pretrained
    presets and hub models it supports and off for the tiny presets (whose committed reports were
    computed without it). It changes numbers by float rounding only, so it is not in the run key."""

    def __post_init__(self) -> None:
        # Lower bounds; every float must also be finite (inf passes `> 0`, NaN fails silently).
        minimum = {
            "steps": (1, True),
            "num_generations": (2, True),
            "prompts_per_step": (1, True),
            "learning_rate": (0, False),
            "beta": (0, True),
            "temperature": (0, False),
            "max_completion_length": (0, True),
            "eval_limit": (0, True),
            "gradient_accumulation_steps": (1, True),
        }
        # Upper bounds, each with its reason (mrbench.core.limits), checked before anything starts.
        maximum = {
            "steps": limits.STEPS_MAX,  # time
            "num_generations": limits.GENERATIONS_MAX,  # memory: G completions per prompt per step
            "prompts_per_step": 65_536,  # memory: the batch is prompts_per_step × G completions
            "learning_rate": 1.0,  # AdamW at a rate above 1 diverges on the first step
            "beta": 1_000.0,  # a KL term this heavy leaves no reward signal to learn from
            "temperature": 100.0,  # sampling beyond this is uniform noise
            "max_completion_length": limits.TOKENS_MAX,  # the models' context
            "eval_limit": limits.EVAL_LIMIT_MAX,  # no evaluation dataset is larger
            "gradient_accumulation_steps": 65_536,  # memory and time: a micro-batch per step each
        }
        problems: list[str] = []
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, float) and not math.isfinite(value):
                problems.append(f"{f.name}={value!r} (must be a finite number)")
            elif f.name in minimum:
                bound, inclusive = minimum[f.name]
                if not (value >= bound if inclusive else value > bound):
                    problems.append(f"{f.name}={value!r} (must be {'>=' if inclusive else '>'} {bound})")
                elif value > maximum[f.name]:
                    problems.append(f"{f.name}={value!r} (must be {Range(le=maximum[f.name])})")
        from mrbench.engine.models.catalog import PRECISIONS

        if self.shared_prefix not in SHARED_PREFIX:
            problems.append(f"shared_prefix={self.shared_prefix!r} (choose from {', '.join(SHARED_PREFIX)})")
        if self.precision not in PRECISIONS:
            problems.append(f"precision={self.precision!r} (choose from {', '.join(PRECISIONS)})")
        if problems:
            raise UserError(f"invalid train settings: {', '.join(problems)}")

    @classmethod
    def from_overrides(cls, overrides: dict[str, Any] | None) -> TrainSettings:
        """Defaults updated by ``overrides`` (strings coerced); unknown keys raise :class:`UserError`."""
        from mrbench.core.registry import coerce_value

        base = cls()
        values = dataclasses.asdict(base)
        for key, raw in (overrides or {}).items():
            if key not in values:
                known = ", ".join(values)
                raise UserError(f"unknown train setting {key!r}; known settings: {known}")
            values[key] = coerce_value(raw, values[key], key=key)  # a bad value: RegistryError, a UserError
        return cls(**values)


@dataclass(frozen=True)
class CellOptions:
    """How a cell runs, not what it computes: never part of the run key, so changing one reruns
    nothing. A sweep hands its settings to each cell with the cell's spec (:attr:`RunSpec.options`);
    an argument of :func:`mrbench.engine.cell.runner.run_cell` (``mrbench run``'s options) wins over them,
    and None leaves the documented default: an environment variable, else the built-in value."""

    checkpoint_every: int | None = None
    """Training checkpoints every N optimizer steps (0: none); None: ``$MRBENCH_CHECKPOINT_EVERY``,
    else a tenth of the steps (:func:`mrbench.engine.cell.resume.resolve_checkpoint_every`)."""
    tracking_retry_s: float | None = None
    """Seconds each call to the store is retried; None: ``$MRBENCH_TRACKING_RETRY_S``, else 300
    (:func:`mrbench.store.client.tracking_retry_s`)."""
    kill_after_checkpoint: int | None = None
    """A rehearsed crash (``mrbench sweep --rehearse``): on its first attempt the cell SIGKILLs its
    own process group right after its training checkpoint of this step is complete
    (:class:`mrbench.engine.cell.resume.CheckpointWriter`); a resumed attempt trains on. None: never."""

    def given(self) -> dict[str, Any]:
        """The options that are set (not None)."""
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}


@dataclass(frozen=True)
class RunSpec:
    """Everything that defines one cell of a sweep, and how it runs (:attr:`options`)."""

    method: str
    task: str
    model: str
    seed: int
    method_params: dict[str, Any] = field(default_factory=dict)
    task_params: dict[str, Any] = field(default_factory=dict)
    train: TrainSettings = field(default_factory=TrainSettings)
    options: CellOptions = field(default_factory=CellOptions, compare=False)
    """How the cell runs (checkpoint interval, store retry bound): not part of the run key."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (also the `config.json` artifact, and how a worker gets its spec); the
        ``options`` entry only when one is set."""
        data = self._computed()
        options = self.options.given()
        return {**data, "options": options} if options else data

    def _computed(self, *, keyed: bool = False) -> dict[str, Any]:
        """What the cell computes; ``keyed``: the content of its run key (no :data:`ROUNDING_ONLY`
        field), else those fields too where they are not at their default."""
        return {
            "method": self.method,
            "method_params": dict(self.method_params),
            "task": self.task,
            "task_params": dict(self.task_params),
            "model": self.model,
            "seed": self.seed,
            "train": _train_fields(self.train, keyed=keyed),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunSpec:
        """Inverse of :meth:`to_dict` (no registry validation; use :func:`resolve_spec` for that)."""
        return cls(
            method=data["method"],
            task=data["task"],
            model=data["model"],
            seed=int(data["seed"]),
            method_params=dict(data.get("method_params", {})),
            task_params=dict(data.get("task_params", {})),
            train=TrainSettings(**data.get("train", {})),
            options=CellOptions(**data.get("options", {})),
        )

    def run_key(self) -> str:
        """12-hex content hash of what the cell computes: equal specs share a key, any change gives a
        new one; :attr:`options` (how it runs) are left out."""
        payload = json.dumps(
            {"v": RUN_KEY_VERSION, **self._computed(keyed=True)}, sort_keys=True, default=str
        )
        return hashlib.sha256(payload.encode()).hexdigest()[:12]

    def label(self) -> str:
        """Short human-readable cell name."""
        return layout.cell_label(self.method, self.task, self.model, self.seed)

    def flat_params(self) -> dict[str, str]:
        """MLflow params of the cell (names from :func:`mrbench.core.layout.cell_params`)."""
        return layout.cell_params(
            method=self.method,
            task=self.task,
            model=self.model,
            seed=self.seed,
            method_params=self.method_params,
            task_params=self.task_params,
            train=_train_fields(self.train, keyed=False),
        )


def _train_fields(train: TrainSettings, *, keyed: bool) -> dict[str, Any]:
    """``train`` as a dict without the :data:`ROUNDING_ONLY` fields (``keyed``) or without those
    at their default (otherwise: a default spec's dict and params are what they were before them)."""
    default = TrainSettings()
    return {
        k: v
        for k, v in dataclasses.asdict(train).items()
        if k not in ROUNDING_ONLY or (not keyed and v != getattr(default, k))
    }


def resolve_spec(
    method: str,
    task: str,
    model: str,
    seed: int,
    *,
    method_params: dict[str, Any] | None = None,
    task_params: dict[str, Any] | None = None,
    train: TrainSettings | dict[str, Any] | None = None,
) -> RunSpec:
    """Validate names, parameters and the task's setting values, and fill in every default.

    Raises :class:`UserError` naming the bad value (with "did you mean" for names).
    Defaults are made explicit so that the run key changes when a default changes.
    """
    import mrbench.methods as methods
    import mrbench.tasks as tasks
    from mrbench.engine.models.catalog import task_settings_for, validate_model_name

    # Unknown names and parameters raise RegistryError (a UserError) naming them.
    resolved_method = methods.get_method(method).resolve_params(method_params)
    entry = tasks.get_task_entry(task)
    # The settings the model was built for (the tiny models' compact prompts) under the caller's.
    resolved_task = entry.resolve_params(
        task_settings_for(model, dict(task_params or {}), list(entry.params))
    )
    # Values too (n_eval=-1, an unknown attack style): building a task only checks its settings,
    # so a bad value stops here, before any store or run is touched.
    built = tasks.build_task(task, resolved_task)
    validate_model_name(model)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise UserError(f"seed must be a non-negative integer, got {seed!r}")
    if isinstance(train, TrainSettings):
        settings = train
    else:  # the task's own defaults (e.g. a smaller learning rate), then the caller's overrides
        task_defaults = dict(built.train_defaults)
        try:
            TrainSettings.from_overrides(task_defaults)
        except UserError as exc:  # the task's own mistake, not the caller's
            raise UserError(f"task {task!r} has bad train_defaults: {exc}") from None
        settings = TrainSettings.from_overrides({**task_defaults, **(train or {})})
    return RunSpec(
        method=methods.get_method(method).name,
        task=tasks.get_task_entry(task).name,
        model=model,
        seed=seed,
        method_params=resolved_method,
        task_params=resolved_task,
        train=settings,
    )
