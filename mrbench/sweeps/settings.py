"""Every sweep setting, declared once (:data:`SETTINGS`).

One :class:`Setting` per key of a sweep file gives: the key (so the known keys and the "unknown
setting, did you mean" message), how a value is read and checked (bounded numbers through
:class:`~mrbench.core.registry.Range`; a bad value is a :class:`UserError` naming the setting and
its file), the :class:`~mrbench.sweeps.spec.SweepSpec` field it sets, the sweep's names it must
stay within, its ``mrbench sweep`` option (:mod:`mrbench.cli.commands.sweep` builds the options
from here), and its row of the table in ``docs/sweep-yaml.md`` (:func:`settings_table`; a test
fails when the page differs). :func:`mrbench.sweeps.spec.apply_settings` applies them.

Names, hyper-parameters and train fields are checked by :func:`mrbench.engine.config.resolve_spec`
when the grid is expanded (see :mod:`mrbench.sweeps.grid`); this module checks shapes and types.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from mrbench.core import env, limits
from mrbench.core.errors import UserError
from mrbench.core.names import MAX_NAME_LENGTH, name_problem
from mrbench.core.registry import Range
from mrbench.engine.cell.resume import parse_checkpoint_every
from mrbench.engine.processes.distributed import DISTRIBUTED
from mrbench.lab.presets import get_scenario
from mrbench.store.client import DEFAULT_RETRY_S
from mrbench.sweeps.memory_plan import parse_size

EXECUTORS = ("local", "ray")
CPUS_PER_CELL_MAX = 1_024
"""Ray CPUs of one cell: no node has more cores."""


@dataclass(frozen=True)
class At:
    """Where a value is read, for error messages: its key, its source (a file, or
    ``"command-line options"``; empty: unnamed), and whether a repeated list entry is dropped
    (comma-separated options) rather than an error."""

    key: str
    source: str = ""
    dedupe: bool = False

    @property
    def where(self) -> str:
        """`` in SOURCE``, or nothing."""
        return f" in {self.source}" if self.source else ""

    def error(self, text: str) -> UserError:
        """``sweep setting 'KEY' in SOURCE: TEXT``."""
        return UserError(f"sweep setting {self.key!r}{self.where}: {text}")

    def bad(self, expected: str, value: Any) -> UserError:
        """``... expected EXPECTED, got VALUE``."""
        return self.error(f"expected {expected}, got {value!r}")

    def inner(self, name: str) -> At:
        """The entry ``name`` of this setting's mapping (``models.tool-calling``)."""
        return replace(self, key=f"{self.key}.{name}")


Reader = Callable[[Any, At], Any]
"""Reads one setting's value (YAML data, or a command-line string) into its SweepSpec field's value."""


@dataclass(frozen=True)
class Option:
    """A setting's ``mrbench sweep`` option, ``--flag VALUE`` (the value read like the file's)."""

    flag: str
    help: str
    type: type = str


@dataclass(frozen=True)
class Switch:
    """A setting's ``mrbench sweep`` switch: given, it sets the setting to ``sets``."""

    flag: str
    help: str
    sets: Any


@dataclass(frozen=True)
class Setting:
    """One sweep setting: YAML key, reader, doc row, command-line option, and its checks."""

    key: str
    read: Reader
    default: str
    """The doc table's default (Markdown)."""
    meaning: str
    """The doc table's meaning (Markdown, one line)."""
    option: Option | Switch | None = None
    into: str | None = ""
    """The SweepSpec field set (empty: ``key``); None: ``read`` returns the fields to set."""
    within: tuple[str, str] | None = None
    """(SweepSpec field, axis): the field's keys must name the sweep's methods, tasks or models."""
    excludes: str | None = None
    """A key that may not be given in the same source."""

    @property
    def field(self) -> str | None:
        """The SweepSpec field this setting sets (None: several, see :attr:`into`)."""
        return self.key if self.into == "" else self.into


# ------------------------------------------------------------------------------------- readers


def _unique(items: list[Any], at: At) -> tuple[Any, ...]:
    """``items`` in order; a repeated entry is dropped with ``at.dedupe``, else an error naming it."""
    repeated = list(dict.fromkeys(v for i, v in enumerate(items) if v in items[:i]))
    if repeated and not at.dedupe:
        raise UserError(
            f"sweep setting {at.key!r}{at.where} lists {', '.join(map(repr, repeated))} more than once"
        )
    return tuple(dict.fromkeys(items))


def _split(value: Any) -> list[Any] | None:
    """A YAML list or a comma-separated string as a list; None for anything else."""
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    return list(value) if isinstance(value, list | tuple) else None


def names(value: Any, at: At) -> tuple[str, ...]:
    """A non-empty list of names, order kept; a repeated name is an error, or dropped with dedupe."""
    items = _split(value)
    if items is None:
        raise at.bad("a list of names", value)
    if not items or any(not isinstance(v, str) or not v.strip() for v in items):
        raise at.bad("a non-empty list of names", value)
    return _unique([v.strip() for v in items], at)


def integer(bound: Range) -> Reader:
    """An integer within ``bound`` (a YAML integer, or its digits as a string)."""

    def read(value: Any, at: At) -> int:
        expected = f"an integer {bound}"
        if isinstance(value, bool) or not isinstance(value, int | str):
            raise at.bad(expected, value)
        try:
            number = int(value)
        except ValueError:
            raise at.bad(expected, value) from None
        if not bound.admits(number):
            raise at.bad(expected, value)
        return number

    return bounded(read, bound)


def number(bound: Range) -> Reader:
    """A number within ``bound``, as a float (a command-line string is converted by the option)."""

    def read(value: Any, at: At) -> float:
        if not bound.admits(value):
            raise at.bad(f"a number {bound}", value)
        return float(value)

    return bounded(read, bound)


def bounded(reader: Reader, bound: Range) -> Reader:
    """``reader``, marked with the ``bound`` it checks (shown in the doc table: :func:`settings_table`)."""
    reader.bound = bound  # type: ignore[attr-defined]
    return reader


def optional(reader: Reader) -> Reader:
    """``reader``, except that null means None: no value given."""

    def read(value: Any, at: At) -> Any:
        return None if value is None else reader(value, at)

    bound = getattr(reader, "bound", None)
    return read if bound is None else bounded(read, bound)


def choice(options: tuple[str, ...]) -> Reader:
    """One of ``options``."""

    def read(value: Any, at: At) -> str:
        if value not in options:
            raise at.bad(f"one of {', '.join(options)}", value)
        return value

    return read


def _name(value: Any, at: At) -> str:
    """The sweep's name, checked as every name of a path or an experiment is (:mod:`mrbench.core.names`)."""
    problem = name_problem(value, "sweep name")
    if problem is not None:
        raise at.error(problem)
    return value


def _preset(value: Any, at: At) -> dict[str, Any]:
    """Nothing to set: :func:`mrbench.sweeps.spec.build_sweep_spec` starts from the preset."""
    if not isinstance(value, str):
        raise at.bad("a preset name", value)
    return {}


def _address(value: Any, at: At) -> str | None:
    if value is not None and not isinstance(value, str):
        raise at.error("expected an address string")
    return value


def _flag(value: Any, at: At) -> bool:
    if not isinstance(value, bool):
        raise at.bad("true or false", value)
    return value


def _models(value: Any, at: At) -> dict[str, Any]:
    """A list for every task, or per task a list: sets ``models`` and ``task_models``."""
    if isinstance(value, Mapping):
        per_task = {str(t): names(m, at.inner(str(t))) for t, m in value.items()}
        return {"models": (), "task_models": per_task}
    return {"models": names(value, at), "task_models": {}}


_seed = integer(Range(ge=0, le=limits.SEED_MAX))


def _seeds(value: Any, at: At) -> tuple[int, ...]:
    raw = [value] if isinstance(value, int) and not isinstance(value, bool) else _split(value)
    if raw is None:
        raise at.bad("a list of integers", value)
    if not raw:
        raise at.error("expected at least one seed")
    if len(raw) > limits.SEEDS_MAX:
        raise at.error(f"expected at most {limits.SEEDS_MAX} seeds, got {len(raw)}")
    return _unique([_seed(v, at) for v in raw], at)


_n = integer(Range(ge=1, le=limits.SEEDS_MAX))


def _n_seeds(value: Any, at: At) -> tuple[int, ...]:
    """Seeds 0 … N−1."""
    return tuple(range(_n(value, at)))


bounded(_n_seeds, _n.bound)  # type: ignore[attr-defined]


def mapping(value: Any, at: At) -> dict[str, Any]:
    """A mapping with string keys (null: empty)."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise at.bad("a mapping", value)
    bad = [k for k in value if not isinstance(k, str)]
    if bad:
        raise at.error(f"keys must be names, got {bad!r}")
    return dict(value)


def _nested(value: Any, at: At) -> dict[str, dict[str, Any]]:
    return {name: mapping(inner, at.inner(name)) for name, inner in mapping(value, at).items()}


def _evals(value: Any, at: At) -> dict[str, tuple[str, ...]]:
    return {task: names(v, at.inner(task)) for task, v in mapping(value, at).items()}


def _lab(value: Any, at: At) -> tuple[str, ...]:
    """Lab scenario names (``[]`` or null: none); an unknown name is the lab's error, naming the key."""
    if value is None or (isinstance(value, list | tuple | str) and not value):
        return ()
    scenarios = names(value, at)
    for scenario in scenarios:
        try:
            get_scenario(scenario)
        except UserError as exc:  # the lab's UnknownNameError, with the file and the key
            raise at.error(str(exc)) from None
    return scenarios


def _gpu_memory(value: Any, at: At) -> int | None:
    """A memory size (``80GB``, ``141GiB``, or bytes) → bytes; null → None (the visible GPU's)."""
    if value is None:
        return None
    try:
        return parse_size(value)
    except UserError:
        raise at.bad("a memory size such as 80GB or 141GiB", value) from None


def _checkpoint_every(value: Any, at: At) -> int | None:
    """``auto`` (or null) → None, else a number of steps ≥ 0."""
    if isinstance(value, str):
        try:
            return parse_checkpoint_every(value)
        except UserError:
            raise at.bad(f"auto or an integer {_every.bound}", value) from None  # type: ignore[attr-defined]
    return _every(value, at)


_every = optional(integer(Range(ge=0, le=limits.STEPS_MAX)))
bounded(_checkpoint_every, _every.bound)  # type: ignore[attr-defined]


# ------------------------------------------------------------------------------------ settings

SETTINGS: tuple[Setting, ...] = (
    Setting(
        "name",
        _name,
        default=(
            "the file's name, slugged; without a file, the preset's (`<preset>-<hash>` when the cells "
            "differ from it)"
        ),
        meaning=(
            f"MLflow experiment and report folder (letters, digits, `.` `_` `-`; at most {MAX_NAME_LENGTH})"
        ),
        option=Option(
            "--name",
            "Sweep name = MLflow experiment and report folder (default: the config's name, else its "
            "file name, else the preset's, with a hash of the settings where they differ from it, "
            "e.g. smoke-1a2b3c4d).",
        ),
    ),
    Setting(
        "preset",
        _preset,
        default="`smoke`",
        meaning="the preset to start from; the other settings override it",
        option=Option(
            "--preset", "smoke (default), cpu (tiny ladder × 3 seeds), smol (SmolLM2-135M) or paper (GPUs)."
        ),
        into=None,
    ),
    Setting(
        "methods",
        names,
        default="the preset's",
        meaning="registry names, entry-point names or `module:function`",
        option=Option("--methods", "Comma-separated methods."),
    ),
    Setting(
        "method_params",
        _nested,
        default="the preset's",
        meaning="hyper-parameters per method",
        within=("method_params", "methods"),
    ),
    Setting(
        "tasks",
        names,
        default="the preset's",
        meaning="registry names, entry-point names or `module:factory`",
        option=Option("--tasks", "Comma-separated tasks."),
    ),
    Setting(
        "task_params",
        _nested,
        default="the preset's",
        meaning="settings per task",
        within=("task_params", "tasks"),
    ),
    Setting(
        "models",
        _models,
        default="the preset's",
        meaning="models for every task, or per task a list",
        option=Option("--models", "Comma-separated models (all tasks)."),
        into=None,
        within=("task_models", "tasks"),
    ),
    Setting(
        "seeds",
        _seeds,
        default="the preset's",
        meaning=(
            f"training seeds, each 0 … 2**32 − 1 (numpy's seed type), at most {limits.SEEDS_MAX} "
            "(or `n_seeds`)"
        ),
        option=Option("--seeds", "Comma-separated seeds, e.g. 0,1,2."),
    ),
    Setting(
        "n_seeds",
        _n_seeds,
        default="—",
        meaning="seeds 0 … N−1, instead of `seeds`",
        option=Option("--n-seeds", "Seeds 0..N-1 (instead of --seeds).", int),
        into="seeds",
        excludes="seeds",
    ),
    Setting(
        "steps",
        optional(integer(Range(ge=1, le=limits.STEPS_MAX))),
        default="null (`train`'s)",
        meaning="training steps for every cell (applied last)",
        option=Option("--steps", "Training steps for every cell.", int),
    ),
    Setting("train", mapping, default="the preset's", meaning="`TrainSettings` for every cell (below)"),
    Setting(
        "task_train",
        _nested,
        default="the preset's",
        meaning="`TrainSettings` per task, after `train`",
        within=("task_train", "tasks"),
    ),
    Setting(
        "model_train",
        _nested,
        default="the preset's",
        meaning="`TrainSettings` per model, after `task_train`",
        within=("model_train", "models"),
    ),
    Setting(
        "workers",
        integer(Range(ge=1, le=limits.WORKERS_MAX)),
        default="1 (`smoke`, `smol`: 2)",
        meaning="cells at a time on this machine (separate processes when > 1)",
        option=Option(
            "--workers", "Cells at a time, each in its own process (default: smoke and smol 2, else 1).", int
        ),
    ),
    Setting(
        "executor",
        choice(EXECUTORS),
        default="`local`",
        meaning="`local` (this machine) or `ray` (cells as Ray tasks)",
        option=Option("--executor", "local (default) or ray."),
    ),
    Setting(
        "ray_address",
        _address,
        default="null",
        meaning="`ray.init(address=...)` for `executor: ray`; null = a local Ray",
        option=Option("--ray-address", "Ray cluster address for --executor ray."),
    ),
    Setting(
        "gpus_per_cell",
        number(Range(ge=0, le=limits.PROCESSES_MAX)),
        default="0 (`paper`: 1)",
        meaning="Ray resources per cell: GPUs",
        option=Option("--gpus-per-cell", "GPUs per cell (Ray executor).", float),
    ),
    Setting(
        "cpus_per_cell",
        number(Range(gt=0, le=CPUS_PER_CELL_MAX)),
        default="1",
        meaning="and CPUs (its whole part is the cell's thread count)",
    ),
    Setting(
        "processes_per_cell",
        integer(Range(ge=1, le=limits.PROCESSES_MAX)),
        default="1",
        meaning="> 1: each cell trains in that many processes (`accelerate launch`; "
        "`train.prompts_per_step` is shared between them)",
        option=Option(
            "--processes-per-cell",
            "Train each cell in N processes (accelerate launch; train.prompts_per_step is shared).",
            int,
        ),
    ),
    Setting(
        "distributed",
        choice(DISTRIBUTED),
        default="`ddp`",
        meaning="with `processes_per_cell` > 1: `ddp`, `fsdp` or `zero3` (`zero3` on GPUs only)",
        option=Option("--distributed", "accelerate preset of those processes: ddp | fsdp | zero3."),
    ),
    Setting(
        "gpu_memory",
        _gpu_memory,
        default="the visible GPU's, else 80GB",
        meaning="memory of each GPU the memory plan checks every cell against (`80GB`, `141GiB`); "
        "a cell that does not fit is refused before any run (docs/paper.md)",
        option=Option(
            "--gpu-memory",
            "Memory of each GPU for the memory plan, e.g. 80GB or 141GiB (default: the visible "
            "GPU's, else 80GB); cells that do not fit are refused.",
        ),
    ),
    Setting(
        "checkpoint_every",
        _checkpoint_every,
        default=f"`auto` (or `${env.CHECKPOINT_EVERY.name}`)",
        meaning="training checkpoints a killed cell resumes from, every N steps (0: none; `auto`: a "
        "tenth of the steps); not part of the run key",
        option=Option(
            "--checkpoint-every",
            "Training checkpoints every N steps, 0 for none, or auto (a tenth of the steps; the "
            f"default, unless ${env.CHECKPOINT_EVERY.name} is set).",
        ),
    ),
    Setting(
        "tracking_retry_s",
        optional(number(Range(ge=0, le=limits.RETRY_S_MAX))),
        default=f"{DEFAULT_RETRY_S:g} (or `${env.TRACKING_RETRY_S.name}`)",
        meaning="seconds a cell retries an unreachable tracking store before it logs offline; not "
        "part of the run key",
        option=Option(
            "--tracking-retry-s",
            "Seconds each cell retries an unreachable tracking store before it logs offline "
            f"(default {DEFAULT_RETRY_S:g}, or ${env.TRACKING_RETRY_S.name}).",
            float,
        ),
    ),
    Setting(
        "report",
        _flag,
        default="true",
        meaning="write `reports/<name>/report.md` when the sweep ends",
        option=Switch("--no-report", "Do not write the report at the end.", False),
    ),
    Setting(
        "eval",
        _evals,
        default="none",
        meaning="extra datasets per task, evaluated on each cell's trained policy (below)",
        within=("eval", "tasks"),
    ),
    Setting(
        "lab",
        _lab,
        default="every scenario",
        meaning="estimator-lab scenarios simulated before the report; `[]` = none",
        option=Switch("--no-lab", "Do not run the estimator lab before the report (lab: []).", []),
    ),
    Setting(
        "lab_seeds",
        integer(Range(ge=1, le=limits.LAB_SEEDS_MAX)),
        default="50",
        meaning="seeds per lab scenario",
    ),
    Setting(
        "rehearse",
        _flag,
        default="false",
        meaning="rehearse the sweep on the CPU: stand-in models, a few steps, each cell killed and resumed "
        "(docs/cluster.md)",
        option=Switch(
            "--rehearse",
            "Rehearse the sweep on this CPU before booking GPUs: every cell's configuration with a small "
            "stand-in model of its family, 2 steps, killed after its first checkpoint and resumed, then "
            "the report (experiment <name>-rehearsal).",
            True,
        ),
    ),
)
BY_KEY: dict[str, Setting] = {s.key: s for s in SETTINGS}


def settings_table() -> str:
    """The Markdown table of every setting (``docs/sweep-yaml.md`` holds it verbatim)."""
    rows = ["| key | default | option | meaning |", "|---|---|---|---|"]
    for s in SETTINGS:
        flag = f"`{s.option.flag}`" if s.option is not None else ""
        bound = getattr(s.read, "bound", None)
        meaning = f"{s.meaning} ({bound})" if bound is not None else s.meaning
        rows.append(f"| `{s.key}` | {s.default} | {flag} | {meaning} |")
    return "\n".join(rows)
