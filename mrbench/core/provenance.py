"""Where the running code comes from: the git commit of the ``mrbench`` package."""

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
