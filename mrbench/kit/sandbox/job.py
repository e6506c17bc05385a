"""What a run takes and gives: :class:`Job` (the program and its tests) and :class:`Result`.

Host side only (the zygote receives a job as a plain request dict and answers a plain dict that
:class:`~.host.Sandbox` turns into a :class:`Result`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

STATUSES = (
    "passed",  # every test passed
    "failed",  # a test assertion failed (the program ran; the answer was wrong)
    "error",  # an exception in the candidate's code, or one it caused in the tests
    "timeout",  # no verdict before the wall-clock deadline
    "killed",  # the candidate died from a signal (CPU, file-size or memory limit, crash)
    "exited",  # the candidate ended itself (sys.exit / os._exit) before the tests finished
    "syntax_error",  # the code does not compile
    "sandbox_error",  # a fault of the harness or of the test data, not of the candidate
)
"""Every value :attr:`Result.status` can take."""


@dataclass(frozen=True)
class Job:
    """One program to test.

    ``code`` is untrusted. ``prelude`` (trusted: imports, helper functions and classes the
    tests or answers rely on) runs first in both processes. ``tests`` (trusted) runs in the
    tester with ``candidate`` bound to the function ``entry_point`` names in the candidate's
    namespace — a name (``"add"``) or an expression (``"Solution().twoSum"``); a plain name is
    also bound under itself, as are the extra ``names`` (tests that call functions directly,
    MBPP style). ``check`` is the statement that runs the tests.
    """

    code: str
    tests: str
    entry_point: str = ""
    prelude: str = ""
    check: str = "check(candidate)"
    names: tuple[str, ...] = ()

    def exports(self) -> list[tuple[str, str]]:
        """(name in the tests, expression in the candidate's namespace) pairs."""
        pairs: list[tuple[str, str]] = []
        if self.entry_point:
            pairs.append(("candidate", self.entry_point))
            if self.entry_point.isidentifier():
                pairs.append((self.entry_point, self.entry_point))
        pairs += [(name, name) for name in self.names if name not in dict(pairs)]
        return pairs


@dataclass(frozen=True)
class Result:
    """Outcome of one run.

    ``test_time_s``: seconds the tests spent waiting on the candidate's functions (measured by
    the tester around each call, so IPC is included and module loading is not); None unless
    the tests ran. ``work``: line events the tests' calls executed in the candidate's own code
    (deterministic, unlike the time: see :mod:`.candidate`); None unless the tests ran, or when
    the code replaced the trace function. ``wall_s``: seconds from fork to verdict.
    ``stdout``/``stderr``: the last ``Limits.output_bytes`` of the candidate's output, decoded
    leniently.
    """

    status: str
    detail: str = ""
    test_time_s: float | None = None
    n_calls: int = 0
    work: int | None = None
    wall_s: float = 0.0
    stdout: str = ""
    stderr: str = ""
    exit_code: int | None = None
    signal: int | None = None
    network_isolated: bool = False
    user_isolated: bool = False
    filesystem_isolated: bool = False

    @property
    def passed(self) -> bool:
        """Every test passed."""
        return self.status == "passed"

    @property
    def ran(self) -> bool:
        """The program ran to completion or failed only on a test assertion."""
        return self.status in ("passed", "failed")

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict of all fields."""
        return {k: getattr(self, k) for k in self.__dataclass_fields__}
