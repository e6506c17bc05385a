"""Where the running code comes from (the git commit of the ``mrbench`` package) and what it runs on
(the CPU's kind, which decides the float rounding of CPU kernels)."""

from __future__ import annotations

import subprocess
from pathlib import Path


def git_sha() -> str:
    """Commit of the working tree the harness runs from ("unknown" outside git); "+dirty" if the
    ``mrbench`` package's files differ from it (an edited README or a written report is not code)."""
    here = Path(__file__).resolve().parents[1]  # the mrbench package folder
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=5, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no", "--", "."],
            cwd=here,
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return sha + ("+dirty" if dirty else "")


def cpu_kind(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The processor's architecture, vendor and widest vector instructions, e.g. ``x86_64
    GenuineIntel AVX-512`` (Linux's ``cpuinfo``; elsewhere the architecture alone).

    torch's and MKL's CPU kernels pick their code path by these (AVX-512 or AVX2, say),
    and the paths round differently in the last bits, which a few training steps grow into other
    figures: a CPU sweep reproduces number for number on a CPU of the same kind only.
    """
    import platform

    machine = platform.machine() or "unknown"
    try:
        text = cpuinfo.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return machine
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields.setdefault(key.strip(), value.strip())  # the first processor's
    flags = set((fields.get("flags") or fields.get("Features") or "").split())  # x86 | Arm
    widest = next((name for flag, name in _VECTOR_FLAGS if flag in flags), None)
    return " ".join(part for part in (machine, fields.get("vendor_id"), widest) if part)


_VECTOR_FLAGS = (("avx512f", "AVX-512"), ("avx2", "AVX2"), ("avx", "AVX"), ("sve", "SVE"), ("asimd", "NEON"))
"""``cpuinfo`` flag → name, widest first."""
