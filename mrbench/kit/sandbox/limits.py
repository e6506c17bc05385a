"""Resource limits of a run: :class:`Limits` on the host, ``setrlimit`` in each child.

The host sends a run's limits to the zygote in their wire form (:meth:`Limits.to_wire`, a plain
dict); the zygote applies them to each child it forks with :func:`apply_rlimits`. Loaded inside
the zygote too (see :mod:`.zygote`): standard library only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

_MB = 1024 * 1024
TESTER_MAX_PROCESSES = 4  # the tester runs trusted code: it needs no more than this


@dataclass(frozen=True)
class Limits:
    """Per-run resource limits; every field's unit is in its name."""

    timeout_s: float = 5.0  # wall-clock deadline for the whole run (load + tests)
    memory_mb: int = 1024  # address space of each process (RLIMIT_AS)
    file_size_mb: int = 16  # largest file a process may write, stdout/stderr included
    max_processes: int = 16  # processes + threads of the candidate's uid (RLIMIT_NPROC)
    max_open_files: int = 64  # file descriptors per process (RLIMIT_NOFILE)
    output_bytes: int = 4096  # tail of stdout/stderr kept in the result

    def __post_init__(self) -> None:
        for name in ("timeout_s", "memory_mb", "file_size_mb", "max_processes", "max_open_files"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and value > 0):
                raise ValueError(f"Limits.{name} must be a positive number, got {value!r}")
        if self.max_open_files < 16:
            raise ValueError(f"Limits.max_open_files must be at least 16, got {self.max_open_files!r}")
        if self.output_bytes < 0:
            raise ValueError(f"Limits.output_bytes must be >= 0, got {self.output_bytes!r}")

    def to_wire(self) -> dict[str, float | int]:
        """The plain dict the zygote receives with each run (the timeout a float, the rest ints)."""
        return {
            "timeout_s": float(self.timeout_s),
            "memory_mb": int(self.memory_mb),
            "file_size_mb": int(self.file_size_mb),
            "max_processes": int(self.max_processes),
            "max_open_files": int(self.max_open_files),
            "output_bytes": int(self.output_bytes),
        }


def apply_rlimits(role: str, limits: dict[str, Any], *, nproc_extra: int) -> None:
    """Set this process's rlimits for ``role`` (``"candidate"`` or ``"tester"``).

    ``limits``: the wire form of :class:`Limits`. ``nproc_extra``: processes to allow on top of
    the role's own, since ``RLIMIT_NPROC`` counts every process of the uid (0 with dedicated
    uids; otherwise what the user already runs plus some slack).
    """
    import resource

    nproc = (int(limits["max_processes"]) if role == "candidate" else TESTER_MAX_PROCESSES) + nproc_extra
    memory = int(limits["memory_mb"]) * _MB
    file_size = int(limits["file_size_mb"]) * _MB
    settings = [
        (resource.RLIMIT_CORE, 0, 0),
        (resource.RLIMIT_AS, memory, memory),
        (resource.RLIMIT_FSIZE, file_size, file_size),
        (resource.RLIMIT_NOFILE, int(limits["max_open_files"]), int(limits["max_open_files"])),
        (resource.RLIMIT_NPROC, nproc, nproc),
    ]
    if role == "candidate":  # the persistent tester is bounded by each run's deadline instead
        cpu = math.ceil(float(limits["timeout_s"])) + 1
        settings.append((resource.RLIMIT_CPU, cpu, cpu + 1))  # SIGXCPU first, then SIGKILL
    for res, soft, hard in settings:
        resource.setrlimit(res, (soft, hard))
