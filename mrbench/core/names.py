"""The one check of a name that becomes a path or an MLflow experiment (:func:`check_name`).

A sweep's name is its MLflow experiment and its report folder ``reports/<name>/``; ``mrbench run
--experiment`` and ``mrbench eval --experiment`` name experiments a report may later be written
for; a lab scenario's name is its experiment ``lab-<name>`` and its folder ``reports/lab/<name>/``.
Experiment names also come from whoever can write to a shared tracking server, so ``mrbench
report`` checks the name it is given before it becomes a folder. Every one of them goes through
:func:`check_name`.

>>> check_name("smoke-1a2b", "--experiment")
'smoke-1a2b'
>>> [is_valid_name(n) for n in ("../x", "/tmp/ABS", "", ".hidden", "x" * 101)]
[False, False, False, False, False]
"""

from __future__ import annotations

import re
from typing import Any

from mrbench.core.errors import UserError

MAX_NAME_LENGTH = 100
"""Longest name: a folder name may have 255 bytes, and ``lab-``, ``.partial`` and the like are
added to some; 100 also keeps a report's paths readable."""
MAX_DERIVED_LENGTH = 128
"""Longest name mrbench derives from a checked one (a rehearsal's ``<name>-rehearsal``, a lab's
``lab-<scenario>``): what ``mrbench report`` accepts."""
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
"""Letters, digits, ``.``, ``_``, ``-``, starting with a letter or digit: no path separator, no
``.``/``..``, no hidden file, nothing a shell or a URL would read differently."""
RULE = (
    f"letters, digits, '.', '_', '-', starting with a letter or digit, at most {MAX_NAME_LENGTH} characters"
)


def is_valid_name(value: Any, longest: int = MAX_NAME_LENGTH) -> bool:
    """True for a string :func:`check_name` accepts (at most ``longest`` characters)."""
    return isinstance(value, str) and len(value) <= longest and NAME_RE.match(value) is not None


def name_problem(value: Any, kind: str = "name", longest: int = MAX_NAME_LENGTH) -> str | None:
    """What is wrong with ``value`` as a name (``'a/b' is not a valid KIND (…)``), or None."""
    if is_valid_name(value, longest):
        return None
    shown = repr(value[:60] + "…") if isinstance(value, str) and len(value) > 60 else repr(value)
    rule = RULE.replace(str(MAX_NAME_LENGTH), str(longest))
    return f"{shown} is not a valid {kind} ({rule}; it names an MLflow experiment and a folder)"


def check_name(value: Any, what: str, kind: str = "name", longest: int = MAX_NAME_LENGTH) -> str:
    """``value`` when it is a valid name; else :class:`UserError` ``WHAT: 'VALUE' is not a valid
    KIND (…)`` (``what`` names where it came from: an option, a setting, a scenario; ``longest``:
    :data:`MAX_DERIVED_LENGTH` where a name mrbench derived is read back)."""
    problem = name_problem(value, kind, longest)
    if problem is not None:
        raise UserError(f"{what}: {problem}")
    return value
