"""Every ``MRBENCH_*`` environment variable, declared once: its name, parser, default and doc.

Code reads a variable through its declaration (``env.THREADS.get()``), and code that sets one in a
child process's environment names it by ``env.VERBOSE.name``; no other product module spells the
prefix (``tests/test_layers.py``). ``docs/architecture.md`` holds :func:`markdown_table` verbatim
(``tests/core/test_env.py``).

One reading rule for every variable: unset, empty or blank is the default; any other value is
parsed, and one the parser refuses is a :class:`~mrbench.core.errors.UserError` that names the
variable, the value and what it must be. A switch (:func:`switch`) is ``1``, ``true``, ``yes`` or
``on`` against ``0``, ``false``, ``no`` or ``off``, in any case; a choice of words
(:func:`one_of`) ignores case too; numbers are plain digits.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from mrbench.core.errors import UserError
from mrbench.core.limits import KEPT_LOGS_MAX, SANDBOX_UID_BASE_MAX, STEPS_MAX, THREADS_MAX

T = TypeVar("T")

PREFIX = "MRBENCH_"
"""What every variable's name starts with (a Ray task gets the sweep process's ``MRBENCH_*``)."""
TRUE = ("1", "true", "yes", "on")
FALSE = ("0", "false", "no", "off")


@dataclass(frozen=True)
class EnvVar(Generic[T]):
    """One environment variable: ``parse`` turns a set value into ``T`` or raises :class:`ValueError`
    with what the value must be; ``default`` is the value when it is unset or blank. ``shown``: the
    docs' default where ``default`` alone does not say it (None: computed by the code that reads it)."""

    name: str
    parse: Callable[[str], T]
    default: T
    doc: str
    shown: str = ""

    def raw(self) -> str | None:
        """The value as set, None when the variable is unset, empty or blank."""
        value = os.environ.get(self.name)
        return value if value is not None and value.strip() else None

    def is_set(self) -> bool:
        """Whether the variable has a value (blank counts as unset)."""
        return self.raw() is not None

    def get(self) -> T:
        """The parsed value, else the default; :class:`UserError` for a value the parser refuses."""
        value = self.raw()
        if value is None:
            return self.default
        try:
            return self.parse(value)
        except ValueError as exc:
            raise UserError(f"{self.name}={value!r} must be {exc}") from None


# --- parsers: a value, or ValueError(what the value must be) ----------------------------------


def switch(text: str) -> bool:
    """``1``/``true``/``yes``/``on`` → True, ``0``/``false``/``no``/``off`` → False (any case).

    >>> switch(" Yes "), switch("OFF")
    (True, False)
    """
    word = text.strip().lower()
    if word in TRUE or word in FALSE:
        return word in TRUE
    raise ValueError(f"a switch: {', '.join(TRUE)} or {', '.join(FALSE)}")


def one_of(*words: str) -> Callable[[str], str]:
    """A parser of one of ``words`` (any case, surrounding blanks ignored), returned in lower case."""

    def parse(text: str) -> str:
        word = text.strip().lower()
        if word not in words:
            raise ValueError(" or ".join(repr(w) for w in words))
        return word

    return parse


def whole_number(minimum: int, maximum: int) -> Callable[[str], int]:
    """A parser of a whole number of plain digits from ``minimum`` (0 or 1) to ``maximum``."""
    what = "a positive integer" if minimum == 1 else f"an integer ≥ {minimum}"
    what += f" up to {maximum}"

    def parse(text: str) -> int:
        digits = text.strip()
        if not (digits.isascii() and digits.isdigit()) or not minimum <= int(digits) <= maximum:
            raise ValueError(what)
        return int(digits)

    return parse


def seconds(text: str) -> float:
    """A number of seconds ≥ 0 (``inf``: no bound)."""
    try:
        value = float(text)
    except ValueError:
        raise ValueError("a number of seconds ≥ 0") from None
    if math.isnan(value) or value < 0:
        raise ValueError("a number of seconds ≥ 0")
    return value


def steps_or_auto(text: str) -> int | None:
    """``auto`` → None, else a number of steps from 0 to :data:`~mrbench.core.limits.STEPS_MAX`:
    how often a cell writes a training checkpoint (the one parser of ``--checkpoint-every``)."""
    value = text.strip().lower()
    if value == "auto":
        return None
    if value.isascii() and value.isdigit() and int(value) <= STEPS_MAX:
        return int(value)
    raise ValueError(f"auto or a number of steps from 0 (no checkpoints) to {STEPS_MAX}")


def as_is(value: str) -> str:
    """The value as set."""
    return value


# --- the variables ----------------------------------------------------------------------------

RESULTS: EnvVar[Path] = EnvVar(
    "MRBENCH_RESULTS",
    Path,
    Path("results"),
    "the results folder: the sqlite store `mlflow.db`, artifacts, checkpoints, built models, logs",
    shown="`./results`",
)
CACHE: EnvVar[Path | None] = EnvVar(
    "MRBENCH_CACHE",
    Path,
    None,
    "mrbench's cache folder (an empty MLflow store per MLflow version, copied into new stores)",
    shown="`$XDG_CACHE_HOME/mrbench`, else `~/.cache/mrbench`",
)
THREADS: EnvVar[int | None] = EnvVar(
    "MRBENCH_THREADS",
    whole_number(1, THREADS_MAX),
    None,
    "intra-op threads of every process mrbench starts, whatever the model (a positive integer)",
    shown="1 for a tiny model, else the process's share of the cores",
)
MALLOC: EnvVar[str] = EnvVar(
    "MRBENCH_MALLOC",
    one_of("keep", "default"),
    "keep",
    "`keep`: glibc keeps big freed blocks for reuse in a process computing on the CPU; `default`: "
    "glibc's own settings",
)
CPU_FOLD: EnvVar[str] = EnvVar(
    "MRBENCH_CPU_FOLD",
    one_of("mrbench", "trl"),
    "mrbench",
    "`mrbench`: TRL's log-probability folds on the CPU done in place where TRL's are the known ones; "
    "`trl`: TRL's own",
)
RANK_LAUNCH: EnvVar[str] = EnvVar(
    "MRBENCH_RANK_LAUNCH",
    one_of("fork", "accelerate"),
    "fork",
    "`fork`: a multi-process cell on a machine without CUDA forks its ranks from its worker; "
    "`accelerate`: starts them with `accelerate launch`",
)
CELL_SERVER: EnvVar[bool] = EnvVar(
    "MRBENCH_CELL_SERVER",
    switch,
    True,
    "on: a sweep forks its cells from a server that imported the stack once; off: a new interpreter per cell",
)
CHECKPOINT_EVERY: EnvVar[int | None] = EnvVar(
    "MRBENCH_CHECKPOINT_EVERY",
    steps_or_auto,
    None,
    "training checkpoints every N steps (0: none; `auto`: a tenth of the steps) where no option or "
    "sweep setting gives it",
    shown="`auto`",
)
TRACKING_RETRY_S: EnvVar[float] = EnvVar(
    "MRBENCH_TRACKING_RETRY_S",
    seconds,
    300.0,
    "seconds a call to the tracking store is retried where no option or sweep setting gives it",
)
VERBOSE: EnvVar[bool] = EnvVar(
    "MRBENCH_VERBOSE",
    switch,
    False,
    "show the libraries' captured output live, not only in the log (`--verbose`; workers inherit it)",
)
KEEP_LOGS: EnvVar[int] = EnvVar(
    "MRBENCH_KEEP_LOGS",
    whole_number(0, KEPT_LOGS_MAX),
    100,
    "how many command logs `<results>/logs` keeps, the newest ones (0: every log)",
)
TRACEBACK: EnvVar[bool] = EnvVar(
    "MRBENCH_TRACEBACK",
    switch,
    False,
    "print the traceback of an unexpected error (`mrbench --traceback`; workers inherit it)",
)
SANDBOX_PYTHON: EnvVar[str | None] = EnvVar(
    "MRBENCH_SANDBOX_PYTHON",
    as_is,
    None,
    "the interpreter the code sandbox runs (world-readable when the sandbox drops to its own uids)",
    shown="the first of this interpreter and the system's `python3` that the sandbox can run",
)
SANDBOX_UID_BASE: EnvVar[int] = EnvVar(
    "MRBENCH_SANDBOX_UID_BASE",
    whole_number(0, SANDBOX_UID_BASE_MAX),
    61000,
    "first of the uids the code sandbox leases when it runs as root (128 slots of 3 uids)",
)

VARIABLES: tuple[EnvVar[Any], ...] = (
    RESULTS,
    CACHE,
    THREADS,
    MALLOC,
    CPU_FOLD,
    RANK_LAUNCH,
    CELL_SERVER,
    CHECKPOINT_EVERY,
    TRACKING_RETRY_S,
    VERBOSE,
    KEEP_LOGS,
    TRACEBACK,
    SANDBOX_PYTHON,
    SANDBOX_UID_BASE,
)
"""Every variable, in the order of the docs' table."""


def _shown(var: EnvVar[Any]) -> str:
    """The default as the docs' table shows it."""
    if var.shown:
        return var.shown
    value = var.default
    if isinstance(value, bool):
        return f"`{int(value)}`"
    if isinstance(value, float):
        return f"`{value:g}`"
    return f"`{value}`"


def check_all() -> None:
    """Parse every variable that is set: a value one refuses is a :class:`UserError` naming it,
    raised before a command does anything (no run opened, no cell started)."""
    for variable in VARIABLES:
        variable.get()


def markdown_table() -> str:
    """The Markdown table of every variable (``docs/architecture.md`` holds it verbatim)."""
    rows = ["| variable | default | what |", "|---|---|---|"]
    rows += [f"| `{v.name}` | {_shown(v)} | {v.doc} |" for v in VARIABLES]
    return "\n".join(rows)
